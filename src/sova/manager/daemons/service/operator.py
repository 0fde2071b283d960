"""The operator desk: fences, modes and plans as the service carries them out.

:mod:`sova.manager.daemons.service.control` holds and derives the operator's state (the
:class:`OperatorControls`); this module changes it. Every change is persisted with an audit
row naming who and when, under the round lock (never in the middle of a round), before it
takes effect. A plan an operator approves is carried out through the ordinary directive
path (the ledger), or, with ``orchestrator = "openstack"``, by the manager itself through
the source host's actuator (Watcher's pre-condition / execute, bounded).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NoReturn

from sova.manager.daemons.logs import fields
from sova.manager.daemons.schema import freeze_version
from sova.manager.daemons.service.control import (
    CLUSTER,
    FENCE_KINDS,
    OperatorControls,
    PlanConflict,
    PlanNotFound,
    expected_effect,
)
from sova.manager.daemons.service.fences import until_text
from sova.manager.daemons.service.ledger import Ledger
from sova.manager.daemons.service.plan_run import plan_precondition, run_through_actuator
from sova.manager.daemons.service.state import ManagerState, cap_reason
from sova.manager.daemons.service.store import (
    AuditRow,
    DecisionRow,
    DirectiveRow,
    FenceRow,
    LeaseRow,
    ModeRow,
    PlanRow,
    RoundWrite,
    StoredState,
)
from sova.manager.daemons.service.withdraw import Invalidates, Withdrawals
from sova.manager.decisions.core import Lease, MigrationDecision
from sova.orchestrator.base import Actuator

log = logging.getLogger("sova.manager")

MAX_VF_FROZEN_VMS = 4096  # every agent is told the whole list (reports name only a few VMs)


class OperatorDesk:
    """Fences, modes and plans: changed by operators, read by every round."""

    def __init__(
        self,
        st: ManagerState,
        ledger: Ledger,
        actuator_for: Callable[[str], Actuator] | None = None,
    ) -> None:
        self.st = st
        self.ledger = ledger
        # Set (orchestrator = "openstack"): an approved plan is carried out through this
        # source host's actuator (Nova) by the manager itself, not sent to the agent.
        self.actuator_for = actuator_for
        self.ops = OperatorControls(st.settings.mode, dict(st.settings.host_modes))
        self.executions: set[asyncio.Task[None]] = set()
        self.withdrawals = Withdrawals(st, ledger)

    def restore(self, state: StoredState) -> None:
        settings = self.st.settings
        self.ops = OperatorControls.restore(
            settings.mode, settings.host_modes, state.modes, state.fences, state.plans
        )
        self.sync_fences()
        stored = self.ops.modes.get(CLUSTER)
        if stored is not None and stored.mode != settings.mode:
            log.warning(
                "cluster mode is %s (set by %s through the API), not the config file's %s; "
                "`sova mode reset` returns to the file's",
                stored.mode,
                stored.set_by,
                settings.mode,
            )

    async def close(self) -> None:
        for task in list(self.executions):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(task), 5.0)

    # ------------------------------------------------------------------ fences and modes

    def sync_fences(self) -> None:
        """The fences as the core plans with them and every response carries them."""
        self.st.core.maintenance = self.ops.maintenance()
        self.st.core.pinned = self.ops.names("pin")
        self.st.core.draining = self.ops.names("drain")
        self.ledger.vf_frozen_hosts = self.ops.names("vf-freeze-host")
        self.ledger.vf_frozen_vms = sorted(self.ops.names("vf-freeze-vm"))
        self.ledger.vf_frozen_version = freeze_version(self.ledger.vf_frozen_vms)
        for kind in FENCE_KINDS:
            self.st.metrics.fences.labels(kind).set(len(self.ops.names(kind)))

    async def _operator_write(self, w: RoundWrite, invalid: Invalidates | None = None) -> None:
        """Persist an operator's change (with its audit row) before it takes effect, and
        withdraw the unstarted directives it makes ``invalid`` in the same write."""
        lock, _ = self.st.primitives()
        async with lock:  # never in the middle of a round
            now = self.st.now()
            pending = self.withdrawals.settle(invalid, now, w) if invalid is not None else []
            try:
                await self.st.writer.write(w)
            except BaseException:
                self.withdrawals.undo(pending)
                raise
            self.withdrawals.done(pending)

    async def set_fence(
        self, kind: str, name: str, by: str, reason: str, until_s: float | None = None
    ) -> FenceRow:
        if kind not in FENCE_KINDS:
            raise ValueError(f"kind = {kind!r}: one of {', '.join(FENCE_KINDS)}")
        if kind == "vf-freeze-vm" and len(self.ops.names(kind)) >= MAX_VF_FROZEN_VMS:
            raise ValueError(f"vf-freeze-vm: at most {MAX_VF_FROZEN_VMS} VMs may be frozen")
        now = self.st.now()
        row = FenceRow(kind, name, by, now, reason, until_s)
        detail = (reason or "") + (f" (until {until_text(until_s)})" if until_s else "")
        await self._operator_write(
            RoundWrite(fences_set=[row], audit=[AuditRow(now, by, f"fence:{kind}", name, detail)]),
            _invalidated_by_fence(kind, name, by),
        )
        self.ops.fences[(kind, name)] = row
        self.sync_fences()
        log.warning(
            "%s set %s on %s%s",
            by,
            kind,
            name,
            f" ({detail.strip()})" if detail else "",
            extra=fields(**{FENCE_KINDS[kind]: name}),
        )
        return row

    async def clear_fence(self, kind: str, name: str, by: str, reason: str) -> bool:
        if kind not in FENCE_KINDS:
            raise ValueError(f"kind = {kind!r}: one of {', '.join(FENCE_KINDS)}")
        if (kind, name) not in self.ops.fences:
            return False
        now = self.st.now()
        await self._operator_write(
            RoundWrite(
                fences_cleared=[(kind, name)],
                audit=[AuditRow(now, by, f"unfence:{kind}", name, reason)],
            )
        )
        self.ops.fences.pop((kind, name), None)
        self.sync_fences()
        log.warning(
            "%s cleared %s on %s", by, kind, name, extra=fields(**{FENCE_KINDS[kind]: name})
        )
        return True

    async def set_mode(self, scope: str, mode: str | None, by: str, reason: str) -> None:
        """``scope`` = "*" (the cluster) or a host; ``mode`` None = back to the config's."""
        now = self.st.now()
        subject = "cluster" if scope == CLUSTER else scope
        w = RoundWrite(audit=[AuditRow(now, by, "mode", subject, f"{mode or 'reset'} {reason}")])
        if mode is None:
            w.modes_cleared.append(scope)
        else:
            w.modes_set.append(ModeRow(scope, mode, by, now))
        # The sources this change puts in recommend mode: their directives are proposals now.
        after = replace(self.ops, modes=dict(self.ops.modes))
        if mode is None:
            after.modes.pop(scope, None)
        else:
            after.modes[scope] = w.modes_set[0]

        def invalid(dr: DirectiveRow) -> str | None:
            was, becomes = self.ops.mode_of(dr.host), after.mode_of(dr.host)
            if was != "recommend" and becomes == "recommend":
                return f"{dr.host} in recommend mode (set by {by})"
            return None

        await self._operator_write(w, invalid)
        if mode is None:
            self.ops.modes.pop(scope, None)
        else:
            self.ops.modes[scope] = w.modes_set[0]
        log.warning("%s set the mode of %s to %s", by, subject, mode or "the config file's")

    # ------------------------------------------------------------------ plans, in a round

    def expire_plans(self, now: float, w: RoundWrite) -> None:
        for p in self.ops.expire(now) + self.close_obsolete(now):
            w.plans.append(p)
            w.audit.append(AuditRow(now, "sova", "expire", f"plan {p.id}", p.detail))
            self.st.metrics.plans.labels("expired").inc()

    def close_obsolete(self, now: float, drained: str | None = None) -> list[PlanRow]:
        """Open plans nothing can carry out any more, closed as expired: their VM left
        the source by another way (it moved, or was shut down), or a host they name is
        gone — an open plan would keep a drained host from being forgotten (issue 38).
        ``drained``: a host whose drain ended; the plans its drain proposed go too."""
        out = []
        for pid, p in sorted(self.ops.open_plans.items()):
            src = self.st.hosts.get(p.host)
            why = None
            if src is None or p.vm not in src.vms:
                why = f"obsolete: {p.vm} is no longer on {p.host}"
            elif p.dst not in self.st.hosts:
                why = f"obsolete: {p.dst} is no longer known"
            elif drained == p.host and p.inputs.get("drain"):
                why = f"obsolete: the drain of {p.host} ended"
            if why is not None:
                self.ops.close(pid)
                out.append(
                    replace(p, state="expired", decided_by="sova", decided_s=now, detail=why)
                )
        return out

    async def end_drain_plans(self, host: str) -> None:
        """A drain ended (cancelled): the plans it proposed are closed with it."""
        now = self.st.now()
        lock, _ = self.st.primitives()
        async with lock:
            w = RoundWrite()
            for p in self.close_obsolete(now, drained=host):
                w.plans.append(p)
                w.audit.append(AuditRow(now, "sova", "expire", f"plan {p.id}", p.detail))
                self.st.metrics.plans.labels("expired").inc()
            if w.plans:
                await self.st.writer.write(w)
        self.st.metrics.open_plans.set(len(self.ops.open_plans))

    def propose(self, lease: Lease, d: MigrationDecision, now: float, w: RoundWrite) -> None:
        """A recommend-mode decision becomes a plan (or keeps the identical open one)."""
        src = self.st.hosts.get(lease.src)
        dst = self.st.hosts.get(lease.dst)
        vm = src.vms.get(lease.vm) if src is not None else None
        expected: dict[str, Any] = {}
        if src is not None and dst is not None and vm is not None:
            expected = expected_effect(src.util, dst.util, vm.util)
        ttl = self.st.settings.plan_ttl_s
        plan = PlanRow(
            d.id,
            now,
            now + ttl,
            lease.src,
            lease.vm,
            lease.dst,
            "proposed",
            cap_reason(d.signal.reason),
            d.inputs,
            expected,
        )
        new, superseded = self.ops.propose(plan, now)
        for old in superseded:
            w.plans.append(old)
            w.audit.append(AuditRow(now, "sova", "supersede", f"plan {old.id}", old.detail))
            self.st.metrics.plans.labels("superseded").inc()
        if new is not None:
            w.plans.append(new)
            w.audit.append(
                AuditRow(
                    now,
                    "sova",
                    "propose",
                    f"plan {new.id}",
                    f"migrate {new.vm} {new.host} -> {new.dst}",
                )
            )
            self.st.metrics.plans.labels("proposed").inc()
            log.info(
                "proposed plan %d: migrate %s %s -> %s (recommend mode; expires in %.0f s)",
                new.id,
                new.vm,
                new.host,
                new.dst,
                ttl,
                extra=fields(plan=new.id, decision=new.id, vm=new.vm, host=new.host),
            )

    # ------------------------------------------------------------------ plans, by operators

    async def plan_row(self, plan_id: int) -> PlanRow:
        """Plan ``plan_id``: an open one from memory, any other from the store."""
        row = self.ops.open_plans.get(plan_id)
        if row is None:
            loop = asyncio.get_running_loop()
            row = await loop.run_in_executor(None, self.st.store.plan, plan_id)
        if row is None:
            raise PlanNotFound(f"no plan {plan_id}")
        return row

    async def _require_open(self, plan_id: int) -> None:
        """PlanNotFound, or PlanConflict saying what became of it, unless the plan is open."""
        row = await self.plan_row(plan_id)
        if row.state != "proposed":
            raise PlanConflict(
                f"plan {plan_id} is {row.state}"
                + (f" ({row.decided_by}: {row.detail})" if row.detail else "")
            )

    async def reject_plan(self, plan_id: int, by: str, reason: str) -> PlanRow:
        await self._require_open(plan_id)
        now = self.st.now()
        lock, _ = self.st.primitives()
        async with lock:
            plan = self.ops.open_plans.get(plan_id)
            if plan is None:
                raise PlanConflict(f"plan {plan_id} was closed meanwhile")
            done = replace(
                plan, state="rejected", decided_by=by, decided_s=now, detail=reason or "rejected"
            )
            await self.st.writer.write(
                RoundWrite(
                    plans=[done], audit=[AuditRow(now, by, "reject", f"plan {plan_id}", reason)]
                )
            )
            self.ops.close(plan_id)
        self.st.metrics.plans.labels("rejected").inc()
        self.st.metrics.open_plans.set(len(self.ops.open_plans))
        log.warning(
            "plan %d rejected by %s%s",
            plan_id,
            by,
            f": {reason}" if reason else "",
            extra=fields(plan=plan_id, vm=done.vm, host=done.host),
        )
        return done

    async def _not_run(self, plan: PlanRow, by: str, now: float, why: str) -> NoReturn:
        """An approval whose pre-condition fails closes the plan as failed, and says why."""
        failed = replace(
            plan, state="failed", decided_by=by, decided_s=now, detail=f"not run: {why}"
        )
        await self.st.writer.write(
            RoundWrite(
                plans=[failed],
                audit=[AuditRow(now, by, "approve", f"plan {plan.id}", failed.detail)],
            )
        )
        self.ops.close(plan.id)
        self.st.metrics.plans.labels("failed").inc()
        raise PlanConflict(f"plan {plan.id} cannot run now: {why}")

    async def approve_plan(self, plan_id: int, by: str, reason: str) -> PlanRow:
        """Carry out an open plan through the normal directive path (or the actuator)."""
        await self._require_open(plan_id)
        st = self.st
        lock, _ = st.primitives()
        async with lock:  # the round's state is consistent between rounds only
            plan = self.ops.open_plans.get(plan_id)
            if plan is None:
                raise PlanConflict(f"plan {plan_id} was closed meanwhile")
            now = st.now()
            if now >= plan.expires_s:
                raise PlanConflict(f"plan {plan_id} expired at t={plan.expires_s:.0f}")
            why = plan_precondition(self.st, self.ops, plan, now)
            if why is not None:
                await self._not_run(plan, by, now, why)
            did = st.take_id()
            via = "openstack" if self.actuator_for is not None else f"directive {did}"
            approved = replace(
                plan,
                state="approved",
                decided_by=by,
                decided_s=now,
                detail=f"approved; carried out as migration {did} ({via})",
            )
            hot = tuple(plan.inputs.get("hot_resources", ()))
            w = RoundWrite(
                decisions=[
                    DecisionRow(
                        did,
                        now,
                        plan.host,
                        True,
                        plan.dst,
                        plan.vm,
                        f"plan {plan_id} approved by {by}: move {plan.vm} to {plan.dst}",
                        hot,
                        {**plan.inputs, "plan": plan_id, "approved_by": by},
                    )
                ],
                new_leases=[LeaseRow(plan.vm, plan.host, plan.dst, now, did)],
                plans=[approved],
                audit=[AuditRow(now, by, "approve", f"plan {plan_id}", reason)],
            )
            directive = None
            if self.actuator_for is None:
                directive = DirectiveRow(plan.host, did, True, plan.dst, plan.vm, now, False)
                w.directives.append(directive)
            await st.writer.write(w)  # persisted before anything can act on it
            self.ops.close(plan_id)
            self.ledger.open_approved(Lease(plan.vm, plan.host, plan.dst, now, did), directive)
            if directive is not None:
                self.ledger.fates.track(did, approved)
            st.metrics.plans.labels("approved").inc()
            st.metrics.open_plans.set(len(self.ops.open_plans))
        log.warning(
            "plan %d approved by %s: migrating %s %s -> %s (%s)",
            plan_id,
            by,
            plan.vm,
            plan.host,
            plan.dst,
            via,
            extra=fields(plan=plan_id, vm=plan.vm, host=plan.host),
        )
        if self.actuator_for is not None:
            run = run_through_actuator(self.st, self.ledger, self.actuator_for, approved, did)
            task = asyncio.get_running_loop().create_task(run)
            self.executions.add(task)
            task.add_done_callback(self.executions.discard)
        return approved

def _invalidated_by_fence(kind: str, name: str, by: str) -> Invalidates:
    """Which directives fence ``kind`` on ``name`` makes invalid (maintenance: of its source
    or its target; pin: of its VM; the VF freezes forbid no migration), and why."""

    def invalid(dr: DirectiveRow) -> str | None:
        if kind == "maintenance" and name in (dr.host, dr.target):
            role = "source" if name == dr.host else "target"
            return f"{role} {name} in maintenance (set by {by})"
        if kind == "pin" and name == dr.vm:
            return f"{name} pinned (by {by})"
        if kind == "drain" and name == dr.target:  # its source's moves are the drain's
            return f"target {name} being drained (set by {by})"
        return None

    return invalid
