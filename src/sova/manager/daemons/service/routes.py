"""What the leader's routers share: the service they call, the bearer scheme, path types,
the errors every route documents, and the audit's "who" of an operator change.

A router (one per OpenAPI tag: :mod:`sova.manager.daemons.service.routes_agents`,
:mod:`sova.manager.daemons.service.routes_operators`) gets the
:class:`~sova.manager.daemons.service.service.ManagerService` from ``app.state``, which
:func:`sova.manager.daemons.service.app.create_app` sets: as a dependency (``service: Service``), or
on the agents' hot path with :func:`service_of`. The routes are plain functions of their
module, not closures over one app.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, HTTPException, Query, Request, Security
from fastapi import Path as PathParam
from fastapi.security import HTTPBearer

from sova.manager.daemons.credentials import Credential
from sova.manager.daemons.schema import (
    FORGING_CHARS,
    FREE_TEXT_PATTERN,
    NAME_MAX,
    NAME_PATTERN,
    OperatorAction,
    forging,
)
from sova.manager.daemons.service.control import FENCE_KINDS, PlanConflict, PlanNotFound
from sova.manager.daemons.service.fleet import HostUnknown
from sova.manager.daemons.service.guard import ANONYMOUS
from sova.manager.daemons.service.service import ManagerService

log = logging.getLogger("sova.manager")
T = TypeVar("T")


def service_of(request: Request) -> ManagerService:
    """The service, for the agents' routes: they answer every report and directive poll,
    and a dependency is one more thing FastAPI resolves per request."""
    service: ManagerService = request.app.state.service
    return service


async def _service(request: Request) -> ManagerService:
    # async: FastAPI runs a plain-def dependency in its thread pool.
    return service_of(request)


Service = Annotated[ManagerService, Depends(_service)]

# The guard (guard) has authenticated the request before FastAPI sees it; this
# scheme documents the token in the OpenAPI document and names it on each route.
BEARER = HTTPBearer(
    auto_error=False,
    description="the host's token (agent endpoints) or the admin token (read endpoints)",
)
AUTH = [Security(BEARER)]

HostName = Annotated[str, PathParam(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]
VMName = Annotated[str, PathParam(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]
FenceKind = Annotated[str, PathParam(pattern="^(" + "|".join(FENCE_KINDS) + ")$")]
By = Annotated[str | None, Query(min_length=1, max_length=128, pattern=rf"^[^{FORGING_CHARS}]+$")]
# No control characters, line separators or bidi controls: a newline (or U+2028, NEL, a
# right-to-left override) in a reason would forge a line in `sova audit` output and in
# the journal.
Why = Annotated[str, Query(max_length=500, pattern=FREE_TEXT_PATTERN)]

AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or invalid token; nothing was changed"},
}
FORBIDDEN: dict[int | str, dict[str, Any]] = {
    403: {"description": "the credential's role does not allow this; nothing was changed"},
}
BODY_RESPONSES: dict[int | str, dict[str, Any]] = {
    **AUTH_RESPONSES,
    413: {"description": "body larger than max_report_bytes; nothing was changed"},
}
PLAN_RESPONSES: dict[int | str, dict[str, Any]] = {
    **AUTH_RESPONSES,
    404: {"description": "no plan with this id"},
    409: {"description": "the plan is not open, expired, or cannot run now (says why)"},
}
OPERATOR_RESPONSES: dict[int | str, dict[str, Any]] = {
    **AUTH_RESPONSES,
    403: {"description": "the credential's role does not allow this; nothing was changed"},
    503: {"description": "the knowledge store cannot be written; nothing was changed"},
}


def who(request: Request, by: str | None) -> str:
    """The audit log's "who": the credential's name; a ``by`` the client sent only
    annotates it (it is self-declared)."""
    cred: Credential = getattr(request.state, "sova_operator", ANONYMOUS)
    if by is None or by == cred.name:
        return cred.name
    room = 128 - len(cred.name) - 3
    return f"{cred.name} ({by[:room]})"


def body_who(request: Request, body: OperatorAction) -> tuple[str, str]:
    """(who, reason) of an operator change's body; 422 on a reason that could forge a line."""
    if (bad := forging(body.reason)) is not None:
        raise HTTPException(
            422,
            f"reason: {bad} is not allowed (control characters, line separators and bidi "
            "controls could forge an audit line)",
        )
    return who(request, body.by if "by" in body.model_fields_set else None), body.reason


async def stored(coro: Awaitable[T]) -> T:
    """An operator change: 503 (nothing changed) when the store refuses it."""
    try:
        return await coro
    except (PlanNotFound, PlanConflict, ValueError):
        raise
    except Exception as exc:
        log.error("operator change not stored: %s", exc)
        # The exception's text may quote SQL and table names: the journal has it, the
        # client gets the kind only.
        raise HTTPException(
            503, f"knowledge store cannot be written ({type(exc).__name__}); nothing changed"
        ) from None


def plan_errors(exc: Exception) -> HTTPException:
    if isinstance(exc, PlanNotFound):
        return HTTPException(404, str(exc))
    return HTTPException(409, str(exc))


def fleet_errors(exc: Exception) -> HTTPException:
    return HTTPException(404 if isinstance(exc, HostUnknown) else 409, str(exc))
