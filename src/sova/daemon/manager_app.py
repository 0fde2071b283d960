"""``sova manager``: the cluster's Monitor, Analyse, Plan and Knowledge over HTTP (Sova Fig. 3).

This module is the HTTP surface: the routes, validation errors that name the field, the
OpenAPI document, and the server's start-up. The behaviour behind the routes is
:class:`sova.daemon.manager_service.ManagerService`; the guard in front of them (tokens,
body limits) is :mod:`sova.daemon.manager_guard`.

Why one module over 700 lines: it is the API's route table. Each route is a few lines of
call into the service, but carries its OpenAPI metadata (operationId, responses, the
role it needs), and the viewer-403 table test and the published ``docs/openapi.json`` read
them as one document; split by URL prefix, a route's guard and its documented errors
would sit in different files from the routes beside it. The logic lives elsewhere.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import signal
import ssl
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, TypeVar

from fastapi import FastAPI, Header, HTTPException, Query, Request, Security
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from sova import __version__
from sova.daemon.config import ManagerSettings
from sova.daemon.conn_guard import base_protocol, guarded
from sova.daemon.credentials import Credential
from sova.daemon.http_errors import (
    AuditAction,
    DecisionAfter,
    HostFilter,
    LogWindow,
    PageLimit,
    PlanId,
    PlanState,
    RowAfter,
    VMFilter,
)
from sova.daemon.http_errors import validation_error as _validation_error
from sova.daemon.leadership import (
    Leadership,
    clock_offset,
    clock_refusal,
    leader_gauges,
    step_down,
)
from sova.daemon.manager_console import console_router
from sova.daemon.manager_control import FENCE_KINDS, PlanConflict, PlanNotFound
from sova.daemon.manager_fleet import DrainView, HostBusy, HostUnknown
from sova.daemon.manager_guard import ANONYMOUS, GuardMiddleware
from sova.daemon.manager_security import exposure_check
from sova.daemon.manager_service import (
    ManagerService,
    NotTheSource,
    ReportRefused,
    StoreUnavailable,
)
from sova.daemon.manager_standby import WarmWindows, advertise_url, serve_standby
from sova.daemon.schema import (
    FIELD_NAMES,
    FORGING_CHARS,
    FREE_TEXT_PATTERN,
    NAME_MAX,
    NAME_PATTERN,
    PROTOCOL,
    AuditPage,
    ClusterView,
    DecisionPage,
    Directive,
    FenceView,
    Health,
    MigrationDone,
    MigrationDoneAck,
    ModeChange,
    ModeView,
    OperatorAction,
    PlanPage,
    PlanView,
    Readiness,
    Report,
    for_agent,
    forging,
)
from sova.daemon.store import Store
from sova.daemon.store_admin import NotLeading
from sova.orchestrator.base import Actuator

log = logging.getLogger("sova.manager")
T = TypeVar("T")


HostName = Annotated[str, PathParam(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]
VMName = Annotated[str, PathParam(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]

_AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or invalid token; nothing was changed"},
}
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
_PLAN_RESPONSES: dict[int | str, dict[str, Any]] = {
    **_AUTH_RESPONSES,
    404: {"description": "no plan with this id"},
    409: {"description": "the plan is not open, expired, or cannot run now (says why)"},
}
_OPERATOR_RESPONSES: dict[int | str, dict[str, Any]] = {
    **_AUTH_RESPONSES,
    403: {"description": "the credential's role does not allow this; nothing was changed"},
    503: {"description": "the knowledge store cannot be written; nothing was changed"},
}
FenceKind = Annotated[str, PathParam(pattern="^(" + "|".join(FENCE_KINDS) + ")$")]
By = Annotated[str | None, Query(min_length=1, max_length=128, pattern=rf"^[^{FORGING_CHARS}]+$")]
# No control characters, line separators or bidi controls: a newline (or U+2028, NEL, a
# right-to-left override) in a reason would forge a line in `sova audit` output and in
# the journal.
Why = Annotated[str, Query(max_length=500, pattern=FREE_TEXT_PATTERN)]


def _who(request: Request, by: str | None) -> str:
    """The audit log's "who": the credential's name; a ``by`` the client sent only
    annotates it (it is self-declared)."""
    cred: Credential = getattr(request.state, "sova_operator", ANONYMOUS)
    if by is None or by == cred.name:
        return cred.name
    room = 128 - len(cred.name) - 3
    return f"{cred.name} ({by[:room]})"


def _body_who(request: Request, body: OperatorAction) -> tuple[str, str]:
    """(who, reason) of an operator change's body; 422 on a reason that could forge a line."""
    if (bad := forging(body.reason)) is not None:
        raise HTTPException(
            422,
            f"reason: {bad} is not allowed (control characters, line separators and bidi "
            "controls could forge an audit line)",
        )
    return _who(request, body.by if "by" in body.model_fields_set else None), body.reason


_FORBIDDEN: dict[int | str, dict[str, Any]] = {
    403: {"description": "the credential's role does not allow this; nothing was changed"},
}
_BODY_RESPONSES: dict[int | str, dict[str, Any]] = {
    **_AUTH_RESPONSES,
    413: {"description": "body larger than max_report_bytes; nothing was changed"},
}


def create_app(
    settings: ManagerSettings,
    store: Store,
    *,
    clock: Callable[[], float] | None = None,
    registry: CollectorRegistry | None = None,
    migrate: bool = True,
    fork_planner: bool = False,
    actuator_for: Callable[[str], Actuator] | None = None,
    monotonic: Callable[[], float] | None = None,
    epoch: int | None = None,
    warm: WarmWindows | None = None,
) -> FastAPI:
    """The manager's ASGI app: migrates the store, restores state, wires the routes.
    ``epoch``: the leadership epoch this manager leads (PostgreSQL; None on SQLite);
    ``warm``: report windows a standby read ahead (the restore reads only what is new)."""
    if migrate:
        store.migrate()
    service = ManagerService(
        settings,
        store,
        clock=clock,
        registry=registry,
        fork_planner=fork_planner,
        actuator_for=actuator_for,
        monotonic=monotonic,
    )
    service.restore(warm)
    service.publish_peers()  # the standbys authorize with these credentials (peers.py)
    role_gauge, epoch_gauge = leader_gauges(service.metrics.registry)
    role_gauge.set(1)
    epoch_gauge.set(epoch or 0)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        bg = asyncio.create_task(service.run_background())
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            # Token rotation without a restart (only where signals reach this loop).
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, service.reload_tokens)
        try:
            yield
        finally:
            bg.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await bg
            await service.close()

    app = FastAPI(
        title="Sova manager",
        version=f"{__version__} (wire protocol {PROTOCOL})",
        summary="Cluster manager of Sova: host reports in, migration directives out.",
        description=(
            "Agents POST a compact report each period and get their migration directive "
            "`<flag, target, vm>` in the response. Report fields have one-letter names to "
            "keep a report under 304 bytes; each field's description gives its meaning."
        ),
        lifespan=lifespan,
    )
    app.state.service = service
    app.add_middleware(GuardMiddleware, service=service)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.include_router(console_router())  # /console/: the web console (not in OpenAPI)
    bearer = HTTPBearer(
        auto_error=False,
        description="the host's token (agent endpoints) or the admin token (read endpoints)",
    )
    auth = [Security(bearer)]

    @app.post(
        "/v1/hosts/{host}/reports",
        operation_id="postReport",
        response_model=Directive,
        dependencies=auth,
        responses={**_BODY_RESPONSES, **_REPORT_RESPONSES},
        tags=["agents"],
        summary="Send a host report; the response is the host's migration directive",
    )
    async def post_report(host: HostName, report: Report) -> Any:
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

    @app.get(
        "/v1/hosts/{host}/directive",
        operation_id="getDirective",
        response_model=Directive,
        dependencies=auth,
        responses={**_AUTH_RESPONSES, **_NOT_LEADING},
        tags=["agents"],
        summary="The host's current directive; with seq, wait for the round that saw it",
    )
    async def get_directive(
        request: Request,
        host: HostName,
        seq: Annotated[int | None, Query(ge=0, le=2**53)] = None,
        wait_s: Annotated[float, Query(ge=0, le=30)] = 5.0,
        p: Annotated[int, Query(ge=0, description="the agent's wire protocol version")] = 0,
    ) -> Any:
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

    @app.post(
        "/v1/migrations/{vm}/done",
        operation_id="postMigrationDone",
        response_model=MigrationDoneAck,
        dependencies=auth,
        responses={**_BODY_RESPONSES, **_DONE_RESPONSES},
        tags=["agents"],
        summary="The source agent reports a signalled migration's end; releases its lease",
    )
    async def post_migration_done(
        vm: VMName,
        done: MigrationDone,
        request: Request,
        x_sova_host: Annotated[
            str, Header(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)
        ],
    ) -> MigrationDoneAck:
        host = request.state.sova_host
        try:
            return MigrationDoneAck(released=await service.migration_done(host, vm, done))
        except NotTheSource as exc:
            raise HTTPException(403, str(exc)) from None

    @app.get(
        "/v1/cluster",
        operation_id="getCluster",
        response_model=ClusterView,
        dependencies=auth,
        responses=_AUTH_RESPONSES,
        tags=["operators"],
        summary="Hosts, their last report, hot verdicts, directives and leases",
    )
    async def get_cluster(
        offset: Annotated[int, Query(ge=0, le=10**6)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> ClusterView:
        return service.cluster_view(offset, limit)

    @app.get(
        "/v1/decisions",
        operation_id="getDecisions",
        response_model=DecisionPage,
        dependencies=auth,
        responses=_AUTH_RESPONSES,
        tags=["operators"],
        summary="The decision log with the inputs of each decision (oldest or newest first)",
    )
    async def get_decisions(
        window: LogWindow,
        after: DecisionAfter = 0,
        limit: PageLimit = 100,
        host: HostFilter = None,
        vm: VMFilter = None,
    ) -> DecisionPage:
        return await service.decision_page(
            replace(window, after=after, limit=limit, host=host, vm=vm)
        )

    async def _stored(coro: Awaitable[T]) -> T:
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

    def _plan_errors(exc: Exception) -> HTTPException:
        if isinstance(exc, PlanNotFound):
            return HTTPException(404, str(exc))
        return HTTPException(409, str(exc))

    @app.get(
        "/v1/plans",
        operation_id="listPlans",
        response_model=PlanPage,
        dependencies=auth,
        responses=_AUTH_RESPONSES,
        tags=["operators"],
        summary="Proposed plans (recommend mode) and what became of them (oldest or newest first)",
    )
    async def list_plans(
        window: LogWindow,
        state: PlanState = None,
        after: RowAfter = 0,
        limit: PageLimit = 100,
        host: HostFilter = None,
        vm: VMFilter = None,
    ) -> PlanPage:
        sl = replace(window, after=after, limit=limit, kind=state, host=host, vm=vm)
        return await service.plan_page(sl)

    @app.get(
        "/v1/plans/{plan_id}",
        operation_id="getPlan",
        response_model=PlanView,
        dependencies=auth,
        responses=_PLAN_RESPONSES,
        tags=["operators"],
        summary="One plan: inputs, actions, expected effect, expiry and its fate",
    )
    async def get_plan(plan_id: PlanId) -> PlanView:
        try:
            return await service.plan_view(plan_id)
        except (PlanNotFound, PlanConflict) as exc:
            raise _plan_errors(exc) from None

    @app.get(
        "/v1/plans/{plan_id}/watcher",
        operation_id="getPlanAsWatcherActionPlan",
        dependencies=auth,
        responses=_PLAN_RESPONSES,
        tags=["operators"],
        summary="One plan in OpenStack Watcher's action-plan shape (migrate, live)",
    )
    async def get_plan_watcher(plan_id: PlanId) -> dict[str, Any]:
        from sova.orchestrator.recommend import Proposal, to_watcher_action_plan

        try:
            p = await service.plan_view(plan_id)
        except (PlanNotFound, PlanConflict) as exc:
            raise _plan_errors(exc) from None
        return to_watcher_action_plan(
            [Proposal(a.vm, a.src, a.dst, p.reason, a.vm) for a in p.actions],
            audit_uuid=str(p.id),
        )

    @app.post(
        "/v1/plans/{plan_id}/approve",
        operation_id="approvePlan",
        response_model=PlanView,
        dependencies=auth,
        responses={**_PLAN_RESPONSES, **_OPERATOR_RESPONSES},
        tags=["operators"],
        summary="Approve an open plan: its migration is signalled (audit-logged)",
    )
    async def approve_plan(plan_id: PlanId, body: OperatorAction, request: Request) -> PlanView:
        try:
            return await _stored(service.approve_plan(plan_id, *_body_who(request, body)))
        except (PlanNotFound, PlanConflict) as exc:
            raise _plan_errors(exc) from None

    @app.post(
        "/v1/plans/{plan_id}/reject",
        operation_id="rejectPlan",
        response_model=PlanView,
        dependencies=auth,
        responses={**_PLAN_RESPONSES, **_OPERATOR_RESPONSES},
        tags=["operators"],
        summary="Reject an open plan: nothing moves (audit-logged)",
    )
    async def reject_plan(plan_id: PlanId, body: OperatorAction, request: Request) -> PlanView:
        try:
            return await _stored(service.reject_plan(plan_id, *_body_who(request, body)))
        except (PlanNotFound, PlanConflict) as exc:
            raise _plan_errors(exc) from None

    @app.get(
        "/v1/fences",
        operation_id="listFences",
        response_model=list[FenceView],
        dependencies=auth,
        responses=_AUTH_RESPONSES,
        tags=["operators"],
        summary="Fences in force: maintenance hosts, pinned VMs, frozen VF assignments",
    )
    async def list_fences() -> list[FenceView]:
        return service.fence_views()

    @app.put(
        "/v1/fences/{kind}/{name}",
        operation_id="setFence",
        response_model=FenceView,
        dependencies=auth,
        responses=_OPERATOR_RESPONSES,
        tags=["operators"],
        summary="Set a fence (maintenance | pin | vf-freeze-host | vf-freeze-vm); audit-logged",
    )
    async def set_fence(
        kind: FenceKind, name: HostName, body: OperatorAction, request: Request
    ) -> FenceView:
        bound = service.settings.max_fences_per_kind
        held = service.desk.ops.names(kind)
        if name not in held and len(held) >= bound:
            raise HTTPException(
                422,
                f"{kind}: at most max_fences_per_kind = {bound} fences of one kind; lift one first",
            )
        try:
            return await _stored(service.set_fence(kind, name, *_body_who(request, body)))
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None

    @app.delete(
        "/v1/fences/{kind}/{name}",
        operation_id="clearFence",
        dependencies=auth,
        responses={**_OPERATOR_RESPONSES, 404: {"description": "no such fence"}},
        tags=["operators"],
        summary="Lift a fence; audit-logged",
    )
    async def clear_fence(
        kind: FenceKind, name: HostName, request: Request, by: By = None, reason: Why = ""
    ) -> Any:
        if not await _stored(service.clear_fence(kind, name, _who(request, by), reason)):
            raise HTTPException(404, f"no {kind} fence on {name}")
        return {"cleared": True}

    @app.get(
        "/v1/mode",
        operation_id="getMode",
        response_model=ModeView,
        dependencies=auth,
        responses=_AUTH_RESPONSES,
        tags=["operators"],
        summary="The cluster's mode and hosts whose mode differs",
    )
    async def get_mode() -> ModeView:
        return service.mode_view()

    @app.put(
        "/v1/mode",
        operation_id="setMode",
        response_model=ModeView,
        dependencies=auth,
        responses=_OPERATOR_RESPONSES,
        tags=["operators"],
        summary="Set the cluster's mode (autonomic | recommend); kept across restarts",
    )
    async def set_mode(body: ModeChange, request: Request) -> ModeView:
        return await _stored(service.set_mode("*", body.mode, *_body_who(request, body)))

    @app.delete(
        "/v1/mode",
        operation_id="resetMode",
        response_model=ModeView,
        dependencies=auth,
        responses=_OPERATOR_RESPONSES,
        tags=["operators"],
        summary="Return the cluster to the config file's mode",
    )
    async def reset_mode(request: Request, by: By = None, reason: Why = "") -> ModeView:
        return await _stored(service.set_mode("*", None, _who(request, by), reason))

    @app.put(
        "/v1/hosts/{host}/mode",
        operation_id="setHostMode",
        response_model=ModeView,
        dependencies=auth,
        responses={**_OPERATOR_RESPONSES, 404: {"description": "no such host"}},
        tags=["operators"],
        summary="Set one host's mode, over the cluster's; kept across restarts",
    )
    async def set_host_mode(host: HostName, body: ModeChange, request: Request) -> ModeView:
        if host not in service.state.hosts and host not in service.tokens.hosts:
            # A typo would be stored as a mode nobody has, the host meant left unchanged.
            raise HTTPException(404, f"no host {host}: it has no token and has not reported")
        return await _stored(service.set_mode(host, body.mode, *_body_who(request, body)))

    @app.delete(
        "/v1/hosts/{host}/mode",
        operation_id="resetHostMode",
        response_model=ModeView,
        dependencies=auth,
        responses=_OPERATOR_RESPONSES,
        tags=["operators"],
        summary="Return one host to the cluster's mode",
    )
    async def reset_host_mode(
        host: HostName, request: Request, by: By = None, reason: Why = ""
    ) -> ModeView:
        return await _stored(service.set_mode(host, None, _who(request, by), reason))

    def _fleet_errors(exc: Exception) -> HTTPException:
        return HTTPException(404 if isinstance(exc, HostUnknown) else 409, str(exc))

    @app.put(
        "/v1/hosts/{host}/drain",
        operation_id="drainHost",
        response_model=DrainView,
        dependencies=auth,
        responses={**_OPERATOR_RESPONSES, 404: {"description": "no such host"}},
        tags=["operators"],
        summary="Drain a host: maintenance, and its VMs moved off by the planner (audited)",
    )
    async def drain_host(host: HostName, body: OperatorAction, request: Request) -> DrainView:
        try:
            return await _stored(service.fleet.drain(host, *_body_who(request, body)))
        except HostUnknown as exc:
            raise _fleet_errors(exc) from None
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None

    @app.delete(
        "/v1/hosts/{host}/drain",
        operation_id="cancelDrain",
        response_model=DrainView,
        dependencies=auth,
        responses=_OPERATOR_RESPONSES,
        tags=["operators"],
        summary="Stop draining a host (it leaves maintenance); audited",
    )
    async def cancel_drain(
        host: HostName, request: Request, by: By = None, reason: Why = ""
    ) -> DrainView:
        return await _stored(service.fleet.cancel(host, _who(request, by), reason))

    @app.get(
        "/v1/hosts/{host}/drain",
        operation_id="getDrain",
        response_model=DrainView,
        dependencies=auth,
        responses=_AUTH_RESPONSES,
        tags=["operators"],
        summary="A drain's progress: VMs left, in flight, moves done, blocked with why",
    )
    async def get_drain(host: HostName) -> DrainView:
        return await service.fleet.status(host)

    @app.delete(
        "/v1/hosts/{host}",
        operation_id="forgetHost",
        dependencies=auth,
        responses={
            **_OPERATOR_RESPONSES,
            404: {"description": "no such host"},
            409: {"description": "the host is live, migrating or named by an open plan"},
        },
        tags=["operators"],
        summary="Forget (decommission) a stale host: its state leaves memory and store",
    )
    async def forget_host(
        host: HostName, request: Request, by: By = None, reason: Why = ""
    ) -> dict[str, bool]:
        try:
            await _stored(service.fleet.forget(host, _who(request, by), reason))
        except (HostUnknown, HostBusy) as exc:
            raise _fleet_errors(exc) from None
        return {"forgotten": True}

    @app.get(
        "/v1/audit",
        operation_id="getAudit",
        response_model=AuditPage,
        dependencies=auth,
        responses=_AUTH_RESPONSES,
        tags=["operators"],
        summary="The audit log of operator actions and plan fates: who, what, when",
    )
    async def get_audit(
        window: LogWindow,
        after: RowAfter = 0,
        limit: PageLimit = 100,
        host: HostFilter = None,
        vm: VMFilter = None,
        action: AuditAction = None,
    ) -> AuditPage:
        sl = replace(window, after=after, limit=limit, host=host, vm=vm, kind=action)
        return await service.audit_page(sl)

    @app.get(
        "/v1/credentials",
        operation_id="listCredentials",
        response_model=dict[str, str],
        dependencies=auth,
        responses={**_AUTH_RESPONSES, **_FORBIDDEN},
        tags=["operators"],
        summary="Operator credentials in force: name -> role (admin role; no secrets)",
    )
    async def list_credentials() -> dict[str, str]:
        return service.tokens.operators.names()

    @app.get(
        "/v1/whoami",
        operation_id="whoAmI",
        response_model=dict[str, str],
        dependencies=auth,
        responses=_AUTH_RESPONSES,
        tags=["operators"],
        summary="The credential this request's token belongs to: name and role",
    )
    async def whoami(request: Request) -> dict[str, str]:
        cred: Credential = getattr(request.state, "sova_operator", ANONYMOUS)
        return {"name": cred.name, "role": cred.role}

    @app.post(
        "/v1/credentials/reload",
        operation_id="reloadCredentials",
        response_model=dict[str, int],
        dependencies=auth,
        responses={**_AUTH_RESPONSES, **_FORBIDDEN, 409: {"description": "not reloaded"}},
        tags=["operators"],
        summary="Re-read the host tokens and operators files (as SIGHUP does); admin role",
    )
    async def reload_credentials(request: Request) -> dict[str, int]:
        if not service.reload_tokens():
            raise HTTPException(409, "credentials not reloaded; the old ones stay (see the log)")
        log.warning("credentials reloaded by %s", _who(request, None))
        return {"hosts": len(service.tokens.hosts), "operators": len(service.tokens.operators)}

    @app.get(
        "/healthz",
        operation_id="getLiveness",
        response_model=Health,
        tags=["operators"],
        summary="Liveness: the process serves requests (restart it if this fails)",
    )
    async def healthz() -> Health:
        return Health(status="ok", hosts=len(service.hosts), store=store.dialect)

    @app.get(
        "/readyz",
        operation_id="getReadiness",
        response_model=Readiness,
        tags=["operators"],
        summary="Readiness: the store takes writes and the planner completes its rounds",
        responses={
            503: {
                "description": "the knowledge store cannot be written, or planning rounds "
                "fail or stopped (none completed in 2 periods)"
            }
        },
    )
    async def readyz() -> Any:
        ok, why = await service.ready()
        ph = service.planner_health
        body = Readiness(
            status=why,
            hosts=len(service.hosts),
            store=store.dialect,
            last_round_s=ph.last_ok_wall,
            last_round_duration_s=ph.last_duration_s if ph.last_ok_mono is not None else None,
            round_failures=ph.failures,
            role="leader",
            epoch=epoch,
        )
        if not ok:
            return JSONResponse(status_code=503, content=body.model_dump())
        return body

    @app.get(
        "/metrics",
        operation_id="getMetrics",
        tags=["operators"],
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}, "description": "Prometheus metrics"}},
    )
    async def metrics() -> Response:
        data = await asyncio.get_running_loop().run_in_executor(
            None, generate_latest, service.metrics.registry
        )
        return Response(data, media_type=CONTENT_TYPE_LATEST)

    return app


def openapi_document(app: FastAPI) -> str:
    # The published document names the wire protocol, not the build: it changes with the
    # API, not with every commit (a live manager's /openapi.json names its build too).
    doc = {**app.openapi()}
    doc["info"] = {**doc["info"], "version": f"wire protocol {PROTOCOL}"}
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def run_manager(settings: ManagerSettings) -> None:
    """Serve until SIGINT/SIGTERM (uvicorn's handlers), then flush the store and exit."""

    from sova.daemon.logs import configure as configure_logging
    from sova.daemon.systemd import Watchdog, notifying_uvicorn_server, round_progress

    configure_logging(settings.log_level)
    # A planning round runs in a worker thread; with the default 5 ms GIL switch interval it
    # can hold up a report for tens of ms. 1 ms keeps the event loop responsive during it.
    sys.setswitchinterval(0.001)
    _raise_nofile(settings.http.max_connections + 256)
    warnings = exposure_check(settings)  # refuses an exposed manager without auth/TLS
    store = Store(settings.database_url, lease_s=settings.leader_lease_s)
    lead: Leadership | None = None
    warm: WarmWindows | None = None
    if store.dialect == "postgresql":
        # Active/standby: wait (serving as a standby) until this manager leads.
        lead = Leadership(
            store, advertise_url(settings), lease_s=settings.leader_lease_s, on_lost=step_down
        )
        serving = lambda standby: uvicorn_config(standby, settings)  # noqa: E731
        # A clock too far from the store's waits as a standby (which says why) instead.
        if clock_refusal(clock_offset(store)) is not None or not lead.try_lock():
            # A warm standby: the windows are read while it waits, not when it takes over.
            warm = WarmWindows(store, settings.planner.n)
            if not serve_standby(store, lead, settings, serving, warm):
                lead.close()
                store.close()
                return  # stopped while a standby
        lead.start_heartbeat()  # from now on: a long migration must not idle the lock out
        store.migrate()  # only a leader migrates: a newer standby waits for its turn
        lead.take_over()
        if warm is not None and store.migrated:
            warm = None  # the schema changed under the rows read: read them afresh
    else:
        store.lock_writer()  # a second manager on one SQLite store exits here (StoreBusy)
    took = time.monotonic()
    app = create_app(
        settings,
        store,
        fork_planner=True,
        actuator_for=_actuators(settings),
        epoch=lead.epoch if lead else None,
        warm=warm,
    )
    if lead is not None:
        log.info(
            "leader at epoch %s: store restored in %.1f s (%s)",
            lead.epoch,
            time.monotonic() - took,
            "windows read ahead by this standby" if warm else "windows read now",
        )
    # Warned once the store is ours and migrated: a manager refused for its store then
    # prints that one line alone.
    for warning in warnings:
        log.warning(warning)
    # The manager keeps ~100 objects per host alive (windows, VM loads) and every report
    # makes short-lived garbage; with CPython's default thresholds a full collection walks
    # all of them every few seconds (tens of ms at 10,000 hosts). Collect young objects
    # as usual, full passes rarely; restored state is frozen out of the collector.
    if warm is None:
        # A warm standby froze its rows before; a full pass now (~1 s at 10,000 hosts)
        # would delay its first answer for at most a restore's few cyclic leftovers.
        gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 1000)
    config = uvicorn_config(app, settings)
    log.info(
        "sova manager %s on %s://%s:%d, store %s",
        __version__,
        "https" if settings.tls_certfile else "http",
        settings.listen,
        settings.port,
        store.dialect,
    )
    try:
        svc = app.state.service
        # Pinged only while planning makes progress: a round hung past WatchdogSec restarts
        # the manager (a ping from the HTTP loop alone would keep a dead planner alive).
        watchdog = Watchdog(round_progress(lambda: svc.rounds, lambda: svc.planning))
        notifying_uvicorn_server(config, watchdog).run()
    finally:
        if lead is not None:
            lead.close()
        store.close()


def uvicorn_config(app: Any, settings: ManagerSettings) -> Any:
    """How the manager (leader or standby) is served: one connection guard, TLS in it."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=settings.listen,
        port=settings.port,
        log_level=settings.log_level,
        log_config=None,  # uvicorn logs through the handler configure_logging installed
        access_log=False,  # 1,000 reports/s would drown the journal
        timeout_keep_alive=int(max(1, settings.http.idle_timeout_s)),
        # uvicorn's limit counts idle connections too (idle clients would 503 everyone);
        # the guard bounds connections instead, evicting idle ones first.
        limit_concurrency=None,
        h11_max_incomplete_event_size=settings.http.max_header_bytes,
        # TLS in the connection guard, so a handshake is limited and timed (issue 21)
        http=guarded(base_protocol(), settings.http, server_tls(settings)),
        backlog=4096,
    )


def server_tls(settings: ManagerSettings) -> ssl.SSLContext | None:
    """The manager's TLS context (uvicorn's defaults: TLS 1.2+, the certificate chain)."""
    if settings.tls_certfile is None or settings.tls_keyfile is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(settings.tls_certfile), str(settings.tls_keyfile))
    return ctx


def _actuators(settings: ManagerSettings) -> Callable[[str], Actuator] | None:
    """orchestrator = "openstack": approved plans are carried out through Nova by the
    manager (one actuator per source host, made when first needed)."""
    if settings.orchestrator != "openstack":
        return None
    from sova.orchestrator.settings import openstack_actuator

    made: dict[str, Actuator] = {}

    def actuator_for(host: str) -> Actuator:
        if host not in made:
            made[host] = openstack_actuator(settings, host)
        return made[host]

    return actuator_for


def _raise_nofile(want: int) -> None:
    """Room for ``max_connections`` sockets: the default soft limit (often 1,024) would make
    accept() fail long before the guard's limits apply."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def main(argv: list[str] | None = None) -> None:
    """``python -m sova.daemon.manager_app --openapi docs/openapi.json`` publishes the spec."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--openapi", type=Path, required=True)
    args = ap.parse_args(argv)
    app = create_app(ManagerSettings(), Store("sqlite://"))
    args.openapi.write_text(openapi_document(app))


if __name__ == "__main__":
    main()
