"""The directive/lease ledger: what each host is told, and how each migration's lease ends.

A lease is the decision core's: :class:`sova.manager.decisions.core.ManagerCore` opens and ends it and
says why (:class:`sova.manager.decisions.core.EndReason`). This ledger is its persistence and its
delivery: the directive that carries a lease to its source (:mod:`directives`), the
store rows of every opening and ending — written before an agent can act on them — and the
metrics. The lease's id is the decision's, the directive's and the migration row's.

Where a new way for a lease to end belongs (e.g. an operator withdrawing a directive): a
method of the core that ends it and says why, and a method here that persists that end
(:meth:`Ledger.write_end`) and applies it to the core (:meth:`Ledger.change`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import replace

from sova.manager.daemons.config import AGENT_REPORT_TIMEOUT_S
from sova.manager.daemons.logs import fields
from sova.manager.daemons.schema import Directive, MigrationDone, epoch_of, freeze_version
from sova.manager.daemons.service.directives import DirectiveBook
from sova.manager.daemons.service.fates import PlanFates
from sova.manager.daemons.service.state import ManagerState
from sova.manager.daemons.service.store import (
    AuditRow,
    DirectiveRow,
    LeaseRow,
    MigrationEnd,
    RoundWrite,
    StoredState,
)
from sova.manager.decisions.core import EndReason, Lease, LeaseEnd, RoundResult

log = logging.getLogger("sova.manager")


class NotTheSource(PermissionError):
    """A migration's end reported by a host other than its source."""


class Ledger:
    """Each host's newest directive and the store rows of every lease's life."""

    def __init__(self, st: ManagerState) -> None:
        self.st = st
        self.directives = DirectiveBook()
        # Read for every report's response: derived once per fence change, not per report.
        self.vf_frozen_hosts: set[str] = set()
        self.vf_frozen_vms: list[str] = []
        self.vf_frozen_version = freeze_version([])
        # host -> the last flagged directive a response carried (it may be held there).
        self.delivered: dict[str, int] = {}
        # Leases whose end is written while a round runs; the core forgets them after it.
        self._recorded: set[int] = set()
        self.fates = PlanFates()  # approved plans, closed when their lease ends

    def restore(self, state: StoredState, drop_next: Iterable[str] = ()) -> None:
        """Leases and directives from the store (after the windows were replayed: replaying
        old reports must not "arrive" a live lease)."""
        self.st.core.restore(
            [Lease(r.vm, r.src, r.dst, r.since_s, r.decision_id) for r in state.leases],
            # Which host each VM left, and when: the anti-thrash rules survive a restart.
            [
                (m["vm"], m["src"], float(m["started_s"]))
                for m in sorted(self.st.store.migration_rows(), key=lambda m: m["started_s"])
            ],
            drop_next,
        )
        self.directives = DirectiveBook({d.host: d for d in state.directives})
        # Whether a response carried them before the restart is unknown: assume it did.
        self.delivered = {d.host: d.id for d in state.directives if d.flag and not d.acked}
        self.fates.restore(self.st.store, state.leases)
        self.st.metrics.leases.set(len(self.st.core.leases))

    # ------------------------------------------------------------------ directives

    def directive_for(self, host: str) -> Directive:
        d = self.directives.view(host)
        # Every agent gets the whole VM list (reports name only a few of a host's VMs),
        # unless it holds this version already (schema.for_agent leaves it out then).
        whole, vms = host in self.vf_frozen_hosts, self.vf_frozen_vms
        freeze = {"vf_freeze_host": whole, "vf_freeze_vms": vms}
        return d.model_copy(update={**freeze, "vf_freeze_version": self.vf_frozen_version})

    def deliver(self, host: str) -> Directive:
        """:meth:`directive_for` as a response to the host's agent carries it (noted: the
        agent may hold it from now on)."""
        d = self.directive_for(host)
        if d.flag:
            # A leader paused past its lease may have been deposed and its directive
            # withdrawn by the new leader: none from memory unless the leadership is
            # confirmed (NotLeading: 503, the agent asks again or another manager).
            self.st.store.confirm_leading()
            self.delivered[host] = d.id
        return d

    def ack(self, host: str, did: int) -> None:
        dr = self.directives.ack(host, did)
        if dr is None:
            return
        w = RoundWrite(acked=[(host, dr.id)])
        # The agent acks a newer store's directive: this one (restored from an older
        # store) was never applied, so its lease must not hold both hosts.
        lease = self.st.core.leases.get(dr.vm) if dr.vm is not None else None
        if epoch_of(did) != epoch_of(dr.id) and lease is not None and lease.id == dr.id:
            now = self.st.now()
            detail = "superseded by a newer store epoch"
            self.write_end(w, lease.vm, lease.id, now, "expired", detail, count=False)
            self.change(lease.id, lambda: self.st.core.supersede(lease.vm, lease.id))
        self.st.writer.write(w)

    def expire_directives(self, now: float, w: RoundWrite) -> None:
        """Withdraw directives their source never acknowledged (or that went stale); their
        leases end unstarted (the windows stay)."""
        ttl = self.st.settings.planner.directive_ttl_periods * self.st.period_s
        for dr in self.directives.overdue(now, ttl, self.st.core.stale(now)):
            w.acked.append((dr.host, dr.id))
            end = self.st.core.withdraw(dr.vm, dr.id) if dr.vm is not None else None
            if end is not None:
                detail = f"{dr.host} never acknowledged the signal"
                self.write_end(w, end.lease.vm, end.lease.id, now, "expired", detail)
            log.warning(
                "withdrew directive %d for %s: not acknowledged in %.0f s",
                dr.id,
                dr.host,
                ttl,
                extra=fields(directive=dr.id, host=dr.host, vm=dr.vm),
            )

    def restart_timers(self, heard_until: float, now: float) -> int:
        """This manager hears the agents again from ``now`` (it leads, or resumed after a
        stall) and last heard them at ``heard_until`` (the previous leader's newest
        report, or the stall's start). The hosts fresh then, and the directives waiting
        for their acknowledgement, are timed from ``now``: an agent that applied a
        directive needs time to reach this manager with its acknowledgement (a timeout
        against the silent manager, then the next URL; docs/design.md, "Timers across a
        takeover"). Judged on the old receipt times, the first round ended the lease of a
        migration in flight and sent its source a second one (issue 37). Hosts already
        stale then stay stale. Returns how many hosts and directives were re-timed.

        The timers start once an agent has had the time to reach this manager (its next
        report, a period away, after one report timeout against the silent manager), so
        the TTL and the staleness bound are each whole on this manager's clock however
        slowly the agents come over."""
        core = self.st.core
        start = now + self.st.period_s + AGENT_REPORT_TIMEOUT_S
        n = 0
        for host, seen in core.seen.items():
            if seen < start and heard_until - seen <= core.stale_after_s:
                core.seen[host] = start
                n += 1
        for host, dr in self.directives.items():
            if dr.flag and not dr.acked and dr.issued_s < start:
                self.directives[host] = replace(dr, issued_s=start)
                n += 1
        return n

    async def wait_directive(
        self, host: str, seq: int, timeout_s: float, *, deliver: bool = True
    ) -> Directive:
        """The directive of the first round that has seen this host's report ``seq``
        (``deliver``: the host's agent takes it; an operator's read does not)."""
        _, cond = self.st.primitives()
        async with cond:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    cond.wait_for(lambda: self.st.planned_seq.get(host, -1) >= seq), timeout_s
                )
        return self.deliver(host) if deliver else self.directive_for(host)

    # ------------------------------------------------------------------ lease ends

    def write_end(
        self,
        w: RoundWrite,
        vm: str,
        lease_id: int,
        now: float,
        result: str,
        detail: str,
        *,
        count: bool = True,
    ) -> None:
        """Add one lease's end to ``w`` (once: an end already written stays as it is)."""
        w.dropped_leases.append(vm)
        if lease_id in self._recorded:
            return
        w.migration_ends.append(MigrationEnd(lease_id, now, result, detail))
        self.fates.ended(w, lease_id, now, result, detail)
        if count:
            self.st.metrics.migrations.labels(result).inc()

    def change(self, lease_id: int, change: Callable[[], object]) -> None:
        """Apply a lease's end to the core now, or after the round in progress (whose
        result must then not write it again)."""
        if self.st.planning:
            self._recorded.add(lease_id)
        self.st.on_core(change)
        self.st.metrics.leases.set(len(self.st.core.leases))

    def record_arrivals(self, ends: Iterable[LeaseEnd], now: float, host: str) -> None:
        """Leases the core closed because their VM showed up on the target ``host``."""
        w = RoundWrite()
        for end in sorted(ends, key=lambda e: e.lease.vm):
            detail = f"reported by target {host}"
            self.write_end(w, end.lease.vm, end.lease.id, now, "succeeded", detail)
        self.st.metrics.leases.set(len(self.st.core.leases))
        self.st.writer.write(w)

    async def migration_done(self, host: str, vm: str, done: MigrationDone) -> bool:
        lease = self.st.core.leases.get(vm)
        if lease is None:
            return False
        if host != lease.src:
            # Only the source runs (or declines) the migration; a target or bystander
            # saying so would free the hosts of a copy still in flight.
            raise NotTheSource(f"{host} is not the source of {vm}'s migration")
        w = RoundWrite()
        detail = done.detail or f"reported by {host}"
        now = self.st.now()
        self.write_end(w, vm, lease.id, now, done.result, detail)
        if done.result == "declined" and detail.startswith("refused directive"):
            # The agent found a field this manager never sends: someone else's directive,
            # or a broken manager. The operators must hear of it, not only the lease row.
            log.error("%s refused a directive: %s", host, detail)
            w.audit.append(AuditRow(now, host, "refused", f"directive {lease.id}", detail))
        if self.directives.settle(lease.src, lease.id):
            w.acked.append((lease.src, lease.id))
        # A migration that ran (either way) restarts the windows; a declined signal only
        # frees the hosts.
        ran = done.result != "declined"
        landed = done.result == "succeeded" if ran else None
        self.change(
            lease.id,
            lambda: self.st.core.release(vm, ran=ran, lease_id=lease.id, landed=landed),
        )
        await self.st.writer.write(w)  # durable before the agent is told it may forget
        return True

    def ended_elsewhere(
        self, vm: str, lease_id: int, now: float, result: str, detail: str, w: RoundWrite
    ) -> None:
        """A migration carried out by the manager itself (an actuator) ended."""
        self.write_end(w, vm, lease_id, now, result, detail)
        self.change(lease_id, lambda: self.st.core.release(vm, ran=True, lease_id=lease_id))

    # ------------------------------------------------------------------ openings

    def record_round(self, result: RoundResult, now: float, w: RoundWrite) -> None:
        """The leases a round closed and opened, as store rows and directives in ``w``."""
        for end in result.closed:
            why = (
                "lease timed out"
                if end.why == EndReason.TIMEOUT
                else f"source {end.lease.src} went silent"
            )
            self.write_end(w, end.lease.vm, end.lease.id, now, "expired", why)
        for lease in result.opened:
            w.new_leases.append(LeaseRow(lease.vm, lease.src, lease.dst, lease.since_s, lease.id))
            w.directives.append(
                DirectiveRow(lease.src, lease.id, True, lease.dst, lease.vm, now, False)
            )
            self.st.metrics.migrations.labels("signalled").inc()

    def publish(self, w: RoundWrite) -> None:
        """``w`` is in the store: its directives may be seen by their hosts now."""
        for dr in w.directives:
            self.directives[dr.host] = dr

    def undo(self, opened: Iterable[Lease]) -> None:
        """Not in the store means not decided: the next round decides again."""
        self.st.core.revoke(opened)

    def open_approved(self, lease: Lease, directive: DirectiveRow | None) -> None:
        """An approved plan's migration, persisted: its lease opens (and its directive is
        published, unless the manager carries it out itself)."""
        self.st.core.open(lease)
        if directive is not None:
            self.directives[directive.host] = directive
        self.st.metrics.migrations.labels("signalled").inc()
        self.st.metrics.leases.set(len(self.st.core.leases))

    def round_done(self) -> None:
        """The round's queued core changes were applied."""
        self._recorded.clear()
