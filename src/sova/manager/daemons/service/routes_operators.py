"""The operators' routes (OpenAPI tag ``operators``): the cluster, decision, plan and
audit reads; plans approved or rejected; fences, modes, drains and forgotten hosts;
credentials; liveness, readiness and metrics.

Each route calls into :class:`sova.manager.daemons.service.service.ManagerService`. The role a
route needs is decided by the guard from its method and path
(:func:`sova.manager.daemons.service.guard.required_role`), before the route runs; the viewer-403
test walks every route of this tag in the OpenAPI document.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sova.manager.daemons.credentials import Credential
from sova.manager.daemons.schema import (
    AuditPage,
    ClusterView,
    DecisionPage,
    FenceAction,
    FenceView,
    Health,
    ModeChange,
    ModeView,
    OperatorAction,
    PlanPage,
    PlanView,
    Readiness,
)
from sova.manager.daemons.service.control import PlanConflict, PlanNotFound
from sova.manager.daemons.service.fences import fence_end
from sova.manager.daemons.service.fleet import DrainPreview, DrainView, HostBusy, HostUnknown
from sova.manager.daemons.service.guard import ANONYMOUS
from sova.manager.daemons.service.http_errors import (
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
from sova.manager.daemons.service.routes import (
    AUTH,
    AUTH_RESPONSES,
    FORBIDDEN,
    OPERATOR_RESPONSES,
    PLAN_RESPONSES,
    By,
    FenceKind,
    HostName,
    Service,
    Why,
    body_who,
    fleet_errors,
    plan_errors,
    stored,
    who,
)
from sova.manager.daemons.service.views import ClusterHistory

log = logging.getLogger("sova.manager")
router = APIRouter(tags=["operators"])


@router.get(
    "/v1/cluster",
    operation_id="getCluster",
    response_model=ClusterView,
    dependencies=AUTH,
    responses=AUTH_RESPONSES,
    summary="Hosts, their last report, hot verdicts, directives and leases",
)
async def get_cluster(
    service: Service,
    offset: Annotated[int, Query(ge=0, le=10**6)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> ClusterView:
    return service.cluster_view(offset, limit)


@router.get(
    "/v1/cluster/history",
    operation_id="getClusterHistory",
    response_model=ClusterHistory,
    dependencies=AUTH,
    responses=AUTH_RESPONSES,
    summary="Each host's last reports the planner holds (its hot-spot window), oldest first",
)
async def get_cluster_history(
    service: Service,
    offset: Annotated[int, Query(ge=0, le=10**6)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> ClusterHistory:
    return service.cluster_history(offset, limit)


@router.get(
    "/v1/decisions",
    operation_id="getDecisions",
    response_model=DecisionPage,
    dependencies=AUTH,
    responses=AUTH_RESPONSES,
    summary="The decision log with the inputs of each decision (oldest or newest first)",
)
async def get_decisions(
    service: Service,
    window: LogWindow,
    after: DecisionAfter = 0,
    limit: PageLimit = 100,
    host: HostFilter = None,
    vm: VMFilter = None,
) -> DecisionPage:
    return await service.decision_page(replace(window, after=after, limit=limit, host=host, vm=vm))


@router.get(
    "/v1/plans",
    operation_id="listPlans",
    response_model=PlanPage,
    dependencies=AUTH,
    responses=AUTH_RESPONSES,
    summary="Proposed plans (recommend mode) and what became of them (oldest or newest first)",
)
async def list_plans(
    service: Service,
    window: LogWindow,
    state: PlanState = None,
    after: RowAfter = 0,
    limit: PageLimit = 100,
    host: HostFilter = None,
    vm: VMFilter = None,
) -> PlanPage:
    sl = replace(window, after=after, limit=limit, kind=state, host=host, vm=vm)
    return await service.plan_page(sl)


@router.get(
    "/v1/plans/{plan_id}",
    operation_id="getPlan",
    response_model=PlanView,
    dependencies=AUTH,
    responses=PLAN_RESPONSES,
    summary="One plan: inputs, actions, expected effect, expiry and its fate",
)
async def get_plan(service: Service, plan_id: PlanId) -> PlanView:
    try:
        return await service.plan_view(plan_id)
    except (PlanNotFound, PlanConflict) as exc:
        raise plan_errors(exc) from None


@router.get(
    "/v1/plans/{plan_id}/watcher",
    operation_id="getPlanAsWatcherActionPlan",
    dependencies=AUTH,
    responses=PLAN_RESPONSES,
    summary="One plan in OpenStack Watcher's action-plan shape (migrate, live)",
)
async def get_plan_watcher(service: Service, plan_id: PlanId) -> dict[str, Any]:
    from sova.orchestrator.recommend import Proposal, to_watcher_action_plan

    try:
        p = await service.plan_view(plan_id)
    except (PlanNotFound, PlanConflict) as exc:
        raise plan_errors(exc) from None
    return to_watcher_action_plan(
        [Proposal(a.vm, a.src, a.dst, p.reason, a.vm) for a in p.actions],
        audit_uuid=str(p.id),
    )


@router.post(
    "/v1/plans/{plan_id}/approve",
    operation_id="approvePlan",
    response_model=PlanView,
    dependencies=AUTH,
    responses={**PLAN_RESPONSES, **OPERATOR_RESPONSES},
    summary="Approve an open plan: its migration is signalled (audit-logged)",
)
async def approve_plan(
    service: Service, plan_id: PlanId, body: OperatorAction, request: Request
) -> PlanView:
    try:
        return await stored(service.approve_plan(plan_id, *body_who(request, body)))
    except (PlanNotFound, PlanConflict) as exc:
        raise plan_errors(exc) from None


@router.post(
    "/v1/plans/{plan_id}/reject",
    operation_id="rejectPlan",
    response_model=PlanView,
    dependencies=AUTH,
    responses={**PLAN_RESPONSES, **OPERATOR_RESPONSES},
    summary="Reject an open plan: nothing moves (audit-logged)",
)
async def reject_plan(
    service: Service, plan_id: PlanId, body: OperatorAction, request: Request
) -> PlanView:
    try:
        return await stored(service.reject_plan(plan_id, *body_who(request, body)))
    except (PlanNotFound, PlanConflict) as exc:
        raise plan_errors(exc) from None


@router.get(
    "/v1/fences",
    operation_id="listFences",
    response_model=list[FenceView],
    dependencies=AUTH,
    responses=AUTH_RESPONSES,
    summary="Fences in force: maintenance hosts, pinned VMs, frozen VF assignments",
)
async def list_fences(service: Service) -> list[FenceView]:
    return service.fence_views()


@router.put(
    "/v1/fences/{kind}/{name}",
    operation_id="setFence",
    response_model=FenceView,
    dependencies=AUTH,
    responses=OPERATOR_RESPONSES,
    summary="Set a fence (maintenance | pin | vf-freeze-host | vf-freeze-vm); audit-logged",
)
async def set_fence(
    service: Service, kind: FenceKind, name: HostName, body: FenceAction, request: Request
) -> FenceView:
    bound = service.settings.max_fences_per_kind
    held = service.desk.ops.names(kind)
    if name not in held and len(held) >= bound:
        raise HTTPException(
            422,
            f"{kind}: at most max_fences_per_kind = {bound} fences of one kind; lift one first",
        )
    try:
        until_s = fence_end(body.until_s, body.for_s, service.state.now())
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    try:
        return await stored(service.set_fence(kind, name, *body_who(request, body), until_s))
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None


@router.delete(
    "/v1/fences/{kind}/{name}",
    operation_id="clearFence",
    dependencies=AUTH,
    responses={**OPERATOR_RESPONSES, 404: {"description": "no such fence"}},
    summary="Lift a fence; audit-logged",
)
async def clear_fence(
    service: Service,
    kind: FenceKind,
    name: HostName,
    request: Request,
    by: By = None,
    reason: Why = "",
) -> Any:
    if not await stored(service.clear_fence(kind, name, who(request, by), reason)):
        raise HTTPException(404, f"no {kind} fence on {name}")
    return {"cleared": True}


@router.get(
    "/v1/mode",
    operation_id="getMode",
    response_model=ModeView,
    dependencies=AUTH,
    responses=AUTH_RESPONSES,
    summary="The cluster's mode and hosts whose mode differs",
)
async def get_mode(service: Service) -> ModeView:
    return service.mode_view()


@router.put(
    "/v1/mode",
    operation_id="setMode",
    response_model=ModeView,
    dependencies=AUTH,
    responses=OPERATOR_RESPONSES,
    summary="Set the cluster's mode (autonomic | recommend); kept across restarts",
)
async def set_mode(service: Service, body: ModeChange, request: Request) -> ModeView:
    return await stored(service.set_mode("*", body.mode, *body_who(request, body)))


@router.delete(
    "/v1/mode",
    operation_id="resetMode",
    response_model=ModeView,
    dependencies=AUTH,
    responses=OPERATOR_RESPONSES,
    summary="Return the cluster to the config file's mode",
)
async def reset_mode(
    service: Service, request: Request, by: By = None, reason: Why = ""
) -> ModeView:
    return await stored(service.set_mode("*", None, who(request, by), reason))


@router.put(
    "/v1/hosts/{host}/mode",
    operation_id="setHostMode",
    response_model=ModeView,
    dependencies=AUTH,
    responses={**OPERATOR_RESPONSES, 404: {"description": "no such host"}},
    summary="Set one host's mode, over the cluster's; kept across restarts",
)
async def set_host_mode(
    service: Service, host: HostName, body: ModeChange, request: Request
) -> ModeView:
    if host not in service.state.hosts and host not in service.tokens.hosts:
        # A typo would be stored as a mode nobody has, the host meant left unchanged.
        raise HTTPException(404, f"no host {host}: it has no token and has not reported")
    return await stored(service.set_mode(host, body.mode, *body_who(request, body)))


@router.delete(
    "/v1/hosts/{host}/mode",
    operation_id="resetHostMode",
    response_model=ModeView,
    dependencies=AUTH,
    responses=OPERATOR_RESPONSES,
    summary="Return one host to the cluster's mode",
)
async def reset_host_mode(
    service: Service, host: HostName, request: Request, by: By = None, reason: Why = ""
) -> ModeView:
    return await stored(service.set_mode(host, None, who(request, by), reason))


@router.put(
    "/v1/hosts/{host}/drain",
    operation_id="drainHost",
    response_model=DrainView,
    dependencies=AUTH,
    responses={**OPERATOR_RESPONSES, 404: {"description": "no such host"}},
    summary="Drain a host: maintenance, and its VMs moved off by the planner (audited)",
)
async def drain_host(
    service: Service, host: HostName, body: OperatorAction, request: Request
) -> DrainView:
    try:
        return await stored(service.fleet.drain(host, *body_who(request, body)))
    except HostUnknown as exc:
        raise fleet_errors(exc) from None
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None


@router.delete(
    "/v1/hosts/{host}/drain",
    operation_id="cancelDrain",
    response_model=DrainView,
    dependencies=AUTH,
    responses=OPERATOR_RESPONSES,
    summary="Stop draining a host (it leaves maintenance); audited",
)
async def cancel_drain(
    service: Service, host: HostName, request: Request, by: By = None, reason: Why = ""
) -> DrainView:
    return await stored(service.fleet.cancel(host, who(request, by), reason))


@router.get(
    "/v1/hosts/{host}/drain",
    operation_id="getDrain",
    response_model=DrainView,
    dependencies=AUTH,
    responses=AUTH_RESPONSES,
    summary="A drain's progress: VMs left, in flight, moves done, blocked with why",
)
async def get_drain(service: Service, host: HostName) -> DrainView:
    return await service.fleet.status(host)


@router.get(
    "/v1/hosts/{host}/drain/preview",
    operation_id="previewDrain",
    response_model=DrainPreview,
    dependencies=AUTH,
    responses={**AUTH_RESPONSES, 404: {"description": "no such host"}},
    summary="The moves a drain of the host would make (VM, target, why); nothing proposed",
)
async def preview_drain(service: Service, host: HostName) -> DrainPreview:
    try:
        return await service.fleet.preview(host)
    except HostUnknown as exc:
        raise fleet_errors(exc) from None


@router.delete(
    "/v1/hosts/{host}",
    operation_id="forgetHost",
    dependencies=AUTH,
    responses={
        **OPERATOR_RESPONSES,
        404: {"description": "no such host"},
        409: {"description": "the host is live, migrating or named by an open plan"},
    },
    summary="Forget (decommission) a stale host: its state leaves memory and store",
)
async def forget_host(
    service: Service, host: HostName, request: Request, by: By = None, reason: Why = ""
) -> dict[str, bool]:
    try:
        await stored(service.fleet.forget(host, who(request, by), reason))
    except (HostUnknown, HostBusy) as exc:
        raise fleet_errors(exc) from None
    return {"forgotten": True}


@router.get(
    "/v1/audit",
    operation_id="getAudit",
    response_model=AuditPage,
    dependencies=AUTH,
    responses=AUTH_RESPONSES,
    summary="The audit log of operator actions and plan fates: who, what, when",
)
async def get_audit(
    service: Service,
    window: LogWindow,
    after: RowAfter = 0,
    limit: PageLimit = 100,
    host: HostFilter = None,
    vm: VMFilter = None,
    action: AuditAction = None,
) -> AuditPage:
    sl = replace(window, after=after, limit=limit, host=host, vm=vm, kind=action)
    return await service.audit_page(sl)


@router.get(
    "/v1/credentials",
    operation_id="listCredentials",
    response_model=dict[str, str],
    dependencies=AUTH,
    responses={**AUTH_RESPONSES, **FORBIDDEN},
    summary="Operator credentials in force: name -> role (admin role; no secrets)",
)
async def list_credentials(service: Service) -> dict[str, str]:
    return service.tokens.operators.names()


@router.get(
    "/v1/whoami",
    operation_id="whoAmI",
    response_model=dict[str, str],
    dependencies=AUTH,
    responses=AUTH_RESPONSES,
    summary="The credential this request's token belongs to: name and role",
)
async def whoami(request: Request) -> dict[str, str]:
    cred: Credential = getattr(request.state, "sova_operator", ANONYMOUS)
    return {"name": cred.name, "role": cred.role}


@router.post(
    "/v1/credentials/reload",
    operation_id="reloadCredentials",
    response_model=dict[str, int],
    dependencies=AUTH,
    responses={**AUTH_RESPONSES, **FORBIDDEN, 409: {"description": "not reloaded"}},
    summary="Re-read the host tokens and operators files (as SIGHUP does); admin role",
)
async def reload_credentials(service: Service, request: Request) -> dict[str, int]:
    if not service.reload_tokens():
        raise HTTPException(409, "credentials not reloaded; the old ones stay (see the log)")
    log.warning("credentials reloaded by %s", who(request, None))
    return {"hosts": len(service.tokens.hosts), "operators": len(service.tokens.operators)}


@router.get(
    "/healthz",
    operation_id="getLiveness",
    response_model=Health,
    summary="Liveness: the process serves requests (restart it if this fails)",
)
async def healthz(service: Service) -> Health:
    return Health(status="ok", hosts=len(service.hosts), store=service.store.dialect)


@router.get(
    "/readyz",
    operation_id="getReadiness",
    response_model=Readiness,
    summary="Readiness: the store takes writes and the planner completes its rounds",
    responses={
        503: {
            "description": "the knowledge store cannot be written, or planning rounds "
            "fail or stopped (none completed in 2 periods)"
        }
    },
)
async def readyz(service: Service, request: Request) -> Any:
    ok, why = await service.ready()
    ph = service.planner_health
    body = Readiness(
        status=why,
        hosts=len(service.hosts),
        store=service.store.dialect,
        last_round_s=ph.last_ok_wall,
        last_round_duration_s=ph.last_duration_s if ph.last_ok_mono is not None else None,
        round_failures=ph.failures,
        role="leader",
        epoch=request.app.state.epoch,
    )
    if not ok:
        return JSONResponse(status_code=503, content=body.model_dump())
    return body


@router.get(
    "/metrics",
    operation_id="getMetrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus metrics"}},
)
async def metrics(service: Service) -> Response:
    data = await asyncio.get_running_loop().run_in_executor(
        None, generate_latest, service.metrics.registry
    )
    return Response(data, media_type=CONTENT_TYPE_LATEST)
