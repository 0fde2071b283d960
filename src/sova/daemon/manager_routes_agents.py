"""The agents' routes (OpenAPI tag ``agents``): a host's report in and its migration
directive out, the directive long-poll, and a signalled migration's end.

The behaviour is :class:`sova.daemon.manager_service.ManagerService`'s; the guard in front
(host tokens, body limit) is :mod:`sova.daemon.manager_guard`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, HTTPException, Query, Request
from fastapi.responses import JSONResponse

from sova.daemon.manager_routes import (
    AUTH,
    AUTH_RESPONSES,
    BODY_RESPONSES,
    HostName,
    VMName,
    service_of,
)
from sova.daemon.manager_service import NotTheSource, ReportRefused, StoreUnavailable
from sova.daemon.schema import (
    FIELD_NAMES,
    NAME_MAX,
    NAME_PATTERN,
    Directive,
    MigrationDone,
    MigrationDoneAck,
    Report,
    for_agent,
)
from sova.daemon.store_admin import NotLeading

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
    service = service_of(request)
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
