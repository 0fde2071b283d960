"""An operator's plan carried out: whether it can run now (Watcher's pre-condition, on the
two hosts' latest reports) and, with ``orchestrator = "openstack"``, its run through the
source host's actuator (Nova), bounded, with its end recorded.

Apart from the operator desk (:mod:`sova.manager.daemons.service.operator`), which holds the
plans and their approval, because these read the planner's state and the cloud, not the
operator's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace

from sova.manager.daemons.service.control import OperatorControls
from sova.manager.daemons.service.ledger import Ledger
from sova.manager.daemons.service.state import ManagerState
from sova.manager.daemons.service.store import AuditRow, PlanRow, RoundWrite
from sova.orchestrator.base import Actuator
from sova.policy.cold_spots import choose_target
from sova.policy.hotspot import Utilisation

log = logging.getLogger("sova.manager")


def plan_precondition(
    st: ManagerState, ops: OperatorControls, plan: PlanRow, now: float
) -> str | None:
    """Why ``plan`` cannot be carried out now (Watcher's pre-condition), or None."""
    core, hosts = st.core, st.hosts
    stale = core.stale(now)
    for role, h in (("source", plan.host), ("target", plan.dst)):
        if h not in hosts:
            return f"{role} {h} has never reported"
        if h in stale:
            return f"{role} {h} is stale (no report for {now - hosts[h].received_s:.0f} s)"
        if ("maintenance", h) in ops.fences:
            return f"{role} {h} is in maintenance"
        if role == "target" and ("drain", h) in ops.fences:
            return f"target {h} is being drained"
    if plan.vm in ops.names("pin"):
        return f"{plan.vm} is pinned"
    vm = hosts[plan.host].vms.get(plan.vm)
    if vm is None:
        return f"{plan.vm} is not in {plan.host}'s last report"
    if vm.migrating or plan.vm in core.leases:
        return f"{plan.vm} is already migrating"
    busy = core.leased_hosts() & {plan.host, plan.dst}
    if busy:
        return f"{', '.join(sorted(busy))} already sending or receiving a migration"
    held = core.hold(plan.vm, now)
    if held is not None:
        return held
    ruled = core.placement_refusal(plan.vm, plan.host, plan.dst)
    if ruled is not None:
        return ruled
    # The planner's own screening, on the two hosts' latest reports.
    util = {h: Utilisation(*hosts[h].util) for h in (plan.host, plan.dst)}
    alpha = core.detector.alpha
    if (
        choose_target(util, plan.host, vm, alpha, metric=core.metric, ceiling=core.ceiling)
        is None
    ):
        return f"target {plan.dst} is no longer a cold spot for {plan.vm}"
    return None


async def run_through_actuator(
    st: ManagerState,
    ledger: Ledger,
    actuator_for: Callable[[str], Actuator],
    plan: PlanRow,
    did: int,
) -> None:
    """Run an approved plan through the source's actuator (Nova), bounded; record the end."""
    from sova.orchestrator.recommend import Proposal, execute_approved, to_watcher_action_plan

    wplan = to_watcher_action_plan(
        [Proposal(plan.vm, plan.host, plan.dst, plan.reason, plan.vm)],
        audit_uuid=str(plan.id),
    )
    action = wplan["actions"][0]["uuid"]
    timeout = st.settings.openstack.migration_timeout_s
    loop = asyncio.get_running_loop()
    try:
        ex = await loop.run_in_executor(
            None,
            lambda: execute_approved(wplan, action, actuator_for, timeout_s=timeout),
        )
        result, detail = ex.result, ex.detail
    except Exception as exc:  # an API or credential error ends the run, not the manager
        result, detail = "failed", f"{type(exc).__name__}: {exc}"
    end = replace(
        plan,
        state="executed" if result == "succeeded" else "failed",
        detail=f"{plan.detail}; {result}" + (f": {detail}" if detail else ""),
    )
    now = st.now()
    # the plan's fate gets an audit row, as expiry and supersession do (issue 21)
    w = RoundWrite(
        plans=[end], audit=[AuditRow(now, "sova", end.state, f"plan {plan.id}", end.detail)]
    )
    ledger.ended_elsewhere(plan.vm, did, now, result, detail or "via openstack", w)
    await st.writer.write(w)
    log.info("plan %d through openstack: %s %s", plan.id, result, detail)
