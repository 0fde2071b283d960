"""What operators read: the cluster, decisions, plans, fences, modes, the audit log.

Read-only over the other parts; pages of history come from the store (in a worker thread,
so a large page never stalls report intake).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TypedDict

from pydantic import BaseModel, ConfigDict, Field

from sova.manager.daemons.schema import (
    AuditPage,
    AuditView,
    ClusterView,
    DecisionPage,
    DecisionView,
    FenceView,
    HostView,
    LeaseView,
    ModeView,
    PlanAction,
    PlanPage,
    PlanView,
    ResourceUse,
)
from sova.manager.daemons.service.control import CLUSTER, OperatorControls
from sova.manager.daemons.service.ledger import Ledger
from sova.manager.daemons.service.operator import OperatorDesk
from sova.manager.daemons.service.rounds import Rounds
from sova.manager.daemons.service.state import RESOURCES, ManagerState
from sova.manager.daemons.service.store import AuditRow, DecisionRow, FenceRow, PlanRow
from sova.manager.daemons.service.store_rows import LogSlice
from sova.manager.decisions.fastplan import ArrayWindow


# The answer of GET /v1/cluster/history. Here rather than in the wire schema: only this
# read builds it, and no agent or standby parses it.
class HostWindow(BaseModel):
    model_config = ConfigDict(frozen=True)

    host: str
    cpu: list[float] = Field(description="the host's CPU use in each report held, oldest first")
    mem: list[float] = Field(description="its memory use, the same reports")
    net: list[float] = Field(description="its link use, the same reports")


class ClusterHistory(BaseModel):
    model_config = ConfigDict(frozen=True)

    now_s: float
    n: int = Field(description="the most reports held per host (the hot-spot test's window)")
    hosts: list[HostWindow] = Field(
        description="each host's reports the planner holds now, by host name; fewer than n "
        "after a start, a restart of the host's agent or a migration (the window restarts)"
    )


def fence_view(f: FenceRow) -> FenceView:
    return FenceView(
        kind=f.kind,
        name=f.name,
        set_by=f.set_by,
        since_s=f.since_s,
        reason=f.reason,
        until_s=f.until_s,
    )


def plan_view(p: PlanRow) -> PlanView:
    return PlanView(
        id=p.id,
        state=p.state,
        created_s=p.created_s,
        expires_s=p.expires_s,
        host=p.host,
        reason=p.reason,
        actions=[PlanAction(action="migrate", vm=p.vm, src=p.host, dst=p.dst)],
        inputs=dict(p.inputs),
        expected=dict(p.expected),
        decided_by=p.decided_by,
        decided_s=p.decided_s,
        detail=p.detail,
    )


def mode_view(ops: OperatorControls, live: Iterable[str] = ()) -> ModeView:
    """The cluster's mode and every host whose mode differs (``live``: hosts reporting;
    one with no stored or configured mode of its own has the cluster's, so a standby,
    which knows none, lists the same)."""
    row = ops.modes.get(CLUSTER)
    hosts = sorted(set(live) | set(ops.modes) | set(ops.default_host_modes))
    return ModeView(
        cluster=ops.cluster_mode,
        cluster_set_by=row.set_by if row is not None else None,
        hosts={
            h: ops.mode_of(h) for h in hosts if h != CLUSTER and ops.mode_of(h) != ops.cluster_mode
        },
    )


def decision_view(r: DecisionRow) -> DecisionView:
    return DecisionView(
        id=r.id,
        time_s=r.time_s,
        host=r.host,
        flag=r.flag,
        target=r.target,
        vm=r.vm,
        reason=r.reason,
        hot_resources=list(r.hot_resources),
        inputs=dict(r.inputs),
    )


def audit_view(r: AuditRow) -> AuditView:
    return AuditView(
        id=r.id, time_s=r.time_s, who=r.who, action=r.action, subject=r.subject, detail=r.detail
    )


class Views:
    def __init__(self, st: ManagerState, ledger: Ledger, desk: OperatorDesk, rounds: Rounds):
        self.st = st
        self.ledger = ledger
        self.desk = desk
        self.rounds = rounds

    def cluster(self, offset: int = 0, limit: int = 1000) -> ClusterView:
        st, ops = self.st, self.desk.ops
        now = st.now()
        stale = st.core.stale(now)
        maint = ops.maintenance()
        pinned = ops.names("pin")
        frozen = ops.names("vf-freeze-vm")
        hosts = []
        for h in sorted(st.hosts)[offset : offset + limit]:
            hs = st.hosts[h]
            hot, reason = self.rounds.verdicts.get(h, (False, "not planned yet"))
            d = self.ledger.directive_for(h)
            hosts.append(
                HostView(
                    host=h,
                    last_seen_s=hs.received_s,
                    age_s=round(now - hs.received_s, 3),
                    state="stale" if h in stale else "fresh",
                    seq=hs.seq,
                    utilisation=ResourceUse(**dict(zip(RESOURCES, hs.util, strict=True))),
                    hot=hot,
                    reason=reason,
                    vms={
                        n: ResourceUse(**dict(zip(RESOURCES, v.util.as_tuple(), strict=True)))
                        for n, v in sorted(hs.vms.items())
                    },
                    directive=d if d.id else None,
                    mode=ops.mode_of(h),
                    maintenance=maint.get(h),
                    vf_frozen=("vf-freeze-host", h) in ops.fences,
                    pinned_vms=sorted(pinned & hs.vms.keys()),
                    vf_frozen_vms=sorted(frozen & hs.vms.keys()),
                )
            )
        leases = [
            LeaseView(vm=vm, src=lease.src, dst=lease.dst, since_s=lease.since_s)
            for vm, lease in sorted(st.core.leases.items())
        ]
        return ClusterView(
            now_s=st.now(),
            rounds=self.rounds.count,
            hosts=hosts,
            leases=leases,
            mode=ops.cluster_mode,
            fences=self.fences(),
            open_plans=len(ops.open_plans),
        )

    def history(self, offset: int = 0, limit: int = 1000) -> ClusterHistory:
        """The reports the hot-spot test judges each host by (its window, in memory)."""
        core = self.st.core
        hosts = []
        for h in sorted(self.st.hosts)[offset : offset + limit]:
            w = core.history.get(h)
            if w is None:
                rows: list[list[float]] = []
            elif isinstance(w, ArrayWindow):
                # no flush: a round may be reading the arrays in its worker thread
                rows = w.arrays.peek(h, w)
            else:  # a deque put in by a restore
                rows = [list(u.as_tuple()) for u in w]
            cpu, mem, net = ([r[i] for r in rows] for i in range(3))
            hosts.append(HostWindow(host=h, cpu=cpu, mem=mem, net=net))
        return ClusterHistory(now_s=self.st.now(), n=core.detector.n, hosts=hosts)

    def fences(self) -> list[FenceView]:
        return [fence_view(f) for _, f in sorted(self.desk.ops.fences.items())]

    def modes(self) -> ModeView:
        return mode_view(self.desk.ops, self.st.hosts)

    async def decision_page(self, sl: LogSlice) -> DecisionPage:
        loop = asyncio.get_running_loop()
        rows = await loop.run_in_executor(None, self.st.store.decision_slice, sl)
        views = [decision_view(r) for r in rows]
        return DecisionPage(decisions=views, **page_bounds([v.id for v in views], sl))

    async def plan_page(self, sl: LogSlice) -> PlanPage:
        loop = asyncio.get_running_loop()
        rows = await loop.run_in_executor(None, self.st.store.plan_slice, sl)
        views = [plan_view(r) for r in rows]
        return PlanPage(plans=views, **page_bounds([v.id for v in views], sl))

    async def audit_page(self, sl: LogSlice) -> AuditPage:
        loop = asyncio.get_running_loop()
        rows = await loop.run_in_executor(None, self.st.store.audit_slice, sl)
        views = [audit_view(r) for r in rows]
        return AuditPage(entries=views, **page_bounds([v.id for v in views], sl))


class PageBounds(TypedDict):
    next_after: int
    next_before: int | None


def page_bounds(ids: list[int], sl: LogSlice) -> PageBounds:
    """A page's ``next_after`` (newer rows: the highest id seen) and, newest first,
    ``next_before`` (older rows: the lowest id seen; None once the page is short)."""
    older = min(ids) if sl.newest_first and len(ids) == sl.limit else None
    return PageBounds(next_after=max(ids, default=sl.after), next_before=older)
