"""The agents' routes (OpenAPI tag ``agents``): a host's report in and its migration
directive out, the directive long-poll, and a signalled migration's end.

The behaviour is :class:`sova.manager.daemons.service.service.ManagerService`'s; the guard in front
(host tokens, body limit) is :mod:`sova.manager.daemons.service.guard`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Annotated, Any

from fastapi import APIRouter, Header, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from sova.manager.daemons.schema import (
    FIELD_NAMES,
    NAME_MAX,
    NAME_PATTERN,
    Directive,
    MigrationDone,
    MigrationDoneAck,
    Report,
    for_agent,
)
from sova.manager.daemons.service.guard import DECODED_REPORT, ASGIApp
from sova.manager.daemons.service.routes import (
    AUTH,
    AUTH_RESPONSES,
    BODY_RESPONSES,
    HostName,
    VMName,
    service_of,
)
from sova.manager.daemons.service.service import (
    ManagerService,
    NotTheSource,
    ReportRefused,
    StoreUnavailable,
)
from sova.manager.daemons.service.store_admin import NotLeading

router = APIRouter(tags=["agents"])

_NOT_LEADING: dict[int | str, dict[str, Any]] = {
    503: {
        "description": "a migration directive is due but this manager's leadership was not "
        "confirmed within half a lease; ask again (or another manager)"
    },
}
_REPORT_RESPONSES: dict[int | str, dict[str, Any]] = {
    409: {"description": "replayed or out-of-order report (same agent boot); nothing changed"},
    503: {
        "description": "not acknowledged: the store did not take the report's row, or a "
        "migration directive is due but this manager's leadership was not confirmed within "
        "half a lease; send it again (or to another manager)"
    },
}
_DONE_RESPONSES: dict[int | str, dict[str, Any]] = {
    403: {"description": "the host is not the migration's source; nothing was changed"},
}


@router.post(
    "/v1/hosts/{host}/reports",
    operation_id="postReport",
    response_model=Directive,
    dependencies=AUTH,
    responses={**BODY_RESPONSES, **_REPORT_RESPONSES},
    summary="Send a host report; the response is the host's migration directive",
)
async def post_report(request: Request, host: HostName, report: Report) -> Any:
    # A well-formed report is answered by ReportFastPath before FastAPI sees it; this
    # route declares it (OpenAPI) and answers the rest, with FastAPI's own errors.
    return await _answer(service_of(request), host, report)


async def _answer(service: ManagerService, host: str, report: Report) -> JSONResponse:
    """A validated report's answer, on either path: the directive, or why not."""
    service.metrics.report_protocols.labels(str(report.protocol)).inc()
    try:
        # Answered once the report's row is committed: acknowledged means durable.
        d = await service.report(host, report)
        return JSONResponse(for_agent(d, report.protocol, report.vf_freeze_version))
    except (NotLeading, StoreUnavailable) as exc:
        return JSONResponse(status_code=503, content={"error": str(exc)})
    except ReportRefused as exc:
        long = FIELD_NAMES.get(exc.field)
        field = f"{exc.field} ({long})" if long else exc.field
        item = {"loc": ["body", exc.field], "msg": str(exc), "type": "refused", "field": field}
        return JSONResponse(
            status_code=exc.status, content={"detail": [item], "error": f"{field}: {exc}"}
        )


_HOST = re.compile(NAME_PATTERN)


class ReportFastPath:
    """The agents' report POST without FastAPI's per-request machinery (routing,
    dependency solving, a second parse of the body): at 1,000 reports/s that machinery
    was most of the manager's CPU per report (docs/design.md, "The report intake").

    Sits inside :class:`~sova.manager.daemons.service.guard.GuardMiddleware`, which has
    authenticated the host, bounded and read the body and decoded it once. A report this
    path can take (POST ``/v1/hosts/{host}/reports``, a valid host name, a JSON content
    type, an object the :class:`Report` schema accepts) is answered by :func:`_answer`,
    as :func:`post_report` answers it. Anything else goes on to FastAPI unchanged, so
    every error (bad JSON, a field out of range, a wrong content type, an unknown path)
    is FastAPI's, word for word, as before."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        report = self._report(scope)
        if report is None:
            await self.app(scope, receive, send)
            return
        service: ManagerService = scope["app"].state.service
        response = await _answer(service, scope["path"].split("/")[3], report)
        await response(scope, receive, send)

    @staticmethod
    def _report(scope: MutableMapping[str, Any]) -> Report | None:
        """The request's report if this path can answer it, else None."""
        decoded = scope.get("state", {}).get(DECODED_REPORT) if scope["type"] == "http" else None
        if decoded is None or scope["method"] != "POST":
            return None
        parts = scope["path"].split("/")
        if len(parts) != 5 or parts[:3] != ["", "v1", "hosts"] or parts[4] != "reports":
            return None
        if len(parts[3]) > NAME_MAX or _HOST.fullmatch(parts[3]) is None:
            return None
        if _content_type(scope["headers"]) != b"application/json":
            return None
        try:
            return Report.model_validate(decoded)
        except ValidationError:
            return None


def _content_type(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The request's media type without parameters, lower case (the first header, as
    FastAPI reads it)."""
    for k, v in headers:
        if k == b"content-type":
            return v.split(b";", 1)[0].strip().lower()
    return None


@router.get(
    "/v1/hosts/{host}/directive",
    operation_id="getDirective",
    response_model=Directive,
    dependencies=AUTH,
    responses={**AUTH_RESPONSES, **_NOT_LEADING},
    summary="The host's current directive; with seq, wait for the round that saw it",
)
async def get_directive(
    request: Request,
    host: HostName,
    seq: Annotated[int | None, Query(ge=0, le=2**53)] = None,
    wait_s: Annotated[float, Query(ge=0, le=30)] = 5.0,
    p: Annotated[int, Query(ge=0, description="the agent's wire protocol version")] = 0,
) -> Any:
    service = service_of(request)
    # An operator's read delivers nothing: a withdrawal then knows no agent holds it.
    agent = bool(getattr(request.state, "sova_agent", True))
    try:
        if seq is None:
            d = service.directive_for(host) if agent else service.ledger.directive_for(host)
        else:
            d = await service.wait_directive(host, seq, wait_s, deliver=agent)
    except NotLeading as exc:
        return JSONResponse(status_code=503, content={"error": str(exc)})
    return JSONResponse(for_agent(d, p))


@router.post(
    "/v1/migrations/{vm}/done",
    operation_id="postMigrationDone",
    response_model=MigrationDoneAck,
    dependencies=AUTH,
    responses={**BODY_RESPONSES, **_DONE_RESPONSES},
    summary="The source agent reports a signalled migration's end; releases its lease",
)
async def post_migration_done(
    vm: VMName,
    done: MigrationDone,
    request: Request,
    x_sova_host: Annotated[str, Header(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)],
) -> MigrationDoneAck:
    service, host = service_of(request), request.state.sova_host
    try:
        return MigrationDoneAck(released=await service.migration_done(host, vm, done))
    except NotTheSource as exc:
        raise HTTPException(403, str(exc)) from None
