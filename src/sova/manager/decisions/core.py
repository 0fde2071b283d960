"""The manager's decision core, independent of how reports arrive (HTTP or in-process).

It keeps what Algorithm 2 needs — the last ``n`` utilisation vectors per host and each
host's latest per-VM loads — runs the hotspot detector and cold-spot planner once per
round, and holds migration *leases*: a VM is never migrated twice at once and a target is
reserved while it receives. Every decision is logged with the inputs that caused it, so
an operator can answer "why did VM1 move?" from the log alone.

The daemon (issue 4) persists the same records through the knowledge store; the
simulator uses this class directly so that both run exactly the same decisions.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from sova.manager.decisions.fastplan import ArrayWindow, WindowArrays, notable
from sova.manager.decisions.intake import ReportIntake, Window
from sova.manager.decisions.leases import EndReason as EndReason
from sova.manager.decisions.leases import LeaseEnd as LeaseEnd

# Made by the pipeline, imported from here by the daemon and simulator.
from sova.manager.decisions.pipeline import Lease as Lease
from sova.manager.decisions.pipeline import MigrationDecision as MigrationDecision
from sova.manager.decisions.pipeline import Pipeline, Round
from sova.manager.decisions.placement import Placement, View
from sova.manager.decisions.stages import brakes, default_pipeline
from sova.policy.hotspot import (
    HostCapacity,
    HostReport,
    HotnessMetric,
    HotspotDetector,
    MigrationSignal,
    MoveCost,
    VMLoad,
)


class ManagerParams(Protocol):
    """What the core is built from: the one manager schema,
    :class:`sova.agent.config.ManagerSpec` (the daemon's ``[planner]`` extends it). A
    protocol, not an import: the agent and the manager are independent layers."""

    @property
    def alpha(self) -> float: ...
    @property
    def k(self) -> int: ...
    @property
    def n(self) -> int: ...
    @property
    def metric(self) -> str: ...
    @property
    def ceiling(self) -> float | None: ...
    @property
    def lease_timeout(self) -> float: ...
    @property
    def restart_window_after_migration(self) -> bool: ...
    @property
    def return_tabu(self) -> float: ...
    @property
    def max_concurrent_migrations(self) -> int: ...
    @property
    def max_migrations_per_hour(self) -> int: ...
    @property
    def vm_cooldown(self) -> float: ...
    @property
    def min_relief(self) -> float: ...
    @property
    def relief_horizon(self) -> float: ...
    @property
    def move_copy_rate(self) -> float: ...
    @property
    def move_downtime(self) -> float: ...


@dataclass(frozen=True)
class RoundResult:
    """What one planning round decided (callers read this, never diff the core's state)."""

    time_s: float
    signals: Mapping[str, MigrationSignal]
    decisions: tuple[MigrationDecision, ...]
    opened: tuple[Lease, ...]
    closed: tuple[LeaseEnd, ...]
    # Migrations of sources in recommend mode: decided exactly as the others, but only
    # proposed (no lease, no directive) until an operator approves them.
    proposed: tuple[Lease, ...] = ()

    @property
    def flagged(self) -> list[str]:
        return [h for h, s in notable(self.signals) if s.flag]


@dataclass
class ManagerCore(ReportIntake):
    detector: HotspotDetector = field(default_factory=HotspotDetector)
    metric: HotnessMetric | str = HotnessMetric.VOLUME
    ceiling: float | None = None
    lease_timeout_s: float = 900.0
    # Anti-thrash, on by default (docs/design.md#anti-thrash): without these rules sova-fig5's
    # cluster moves VM1 HM2 <-> HM3 every ~50 s. False = the papers' k-of-n test over the raw
    # last n reports. On: when a migration ends, its source's and target's windows restart,
    # and the report spanning the copy is dropped too. Those reports describe a placement
    # that no longer exists (the VM's load on the source, the copy traffic on both links),
    # so judging the new placement by them flags the source again at once and moves a
    # second VM off a host already relieved.
    restart_window_after_migration: bool = True
    # 0 = off. Otherwise a VM is not sent back to a host it left less than this long ago.
    # Without it, a move that leaves the target above alpha (Sova Fig. 5 stage 3) is
    # reversed as soon as the target's window fills, and the VM ping-pongs every minute.
    return_tabu_s: float = 900.0
    # Cluster-wide brakes (0 = no limit): migrations in flight at once, migrations started
    # in the last hour, and the time a VM stays put after it was sent somewhere. A migration
    # they hold back is not signalled this round; its decision says which limit held it.
    # Each migration costs both links a copy of the VM's memory, so a cluster whose
    # detector misfires (bad thresholds, a flapping report) must not spend them unbounded.
    max_concurrent_migrations: int = 4
    max_migrations_per_hour: int = 30
    vm_cooldown_s: float = 300.0
    # What a migration must buy (docs/design.md#relief): the VM moved is one whose move
    # relieves the overload, and worth its copy and pause.
    move_cost: MoveCost = field(default_factory=MoveCost)
    # Source -> (VM, target) of its open proposal (recommend mode): kept in the next
    # rounds while still valid, so a plan does not flip between near-equal targets.
    proposals: dict[str, tuple[str, str]] = field(default_factory=dict)
    departed: dict[str, dict[str, float]] = field(default_factory=dict)  # vm -> host -> t
    last_moved: dict[str, float] = field(default_factory=dict)  # vm -> when it was last sent
    started: deque[float] = field(default_factory=deque)  # start times within the last hour
    # host -> its detector window, oldest first: a view of the window arrays below
    # (fastplan.ArrayWindow) for the windows the core made, or a deque of Utilisation put
    # in from outside (a restore)
    history: dict[str, Window] = field(default_factory=dict)
    vms: dict[str, Mapping[str, VMLoad]] = field(default_factory=dict)
    # vm -> lease. Written only by the lease lifecycle below (open, release, withdraw,
    # supersede, revoke, expiry in plan, arrival in ingest, restore); everything else reads.
    leases: dict[str, Lease] = field(default_factory=dict)
    # The simulator keeps every decision here for its report; the daemon persists each
    # round's RoundResult instead and turns this off so memory does not grow with uptime.
    keep_log: bool = True
    log: list[MigrationDecision] = field(default_factory=list)
    _skip: dict[str, int] = field(default_factory=dict)  # host -> reports still to drop
    # A host silent for longer than this is *stale*: its last report describes a past that
    # may no longer exist (agent dead, host down), so it is neither a source nor a target,
    # and when it reports again its window starts afresh. Only hosts ingested with ``at=``
    # are tracked (the simulator's hosts never go silent).
    stale_after_s: float = math.inf
    # The simulator's VM names are unique, so a VM seen on its lease's target has arrived.
    # A real cluster's are not (another tenant's VM may carry the same name), so the daemon
    # turns this off: there only the source, which moved that very domain, ends a lease.
    close_on_arrival: bool = True
    seen: dict[str, float] = field(default_factory=dict)  # host -> time of its last report
    # Hosts whose own last report says a migration leaves them now. Leased like a lease's
    # hosts whatever the leases say: a takeover may have lost the lease of a copy still
    # running, and a second copy beside it is what one lease per source exists to prevent.
    migrating_hosts: set[str] = field(default_factory=set)
    # Leases whose source agent restarted while they were open: it lost its memory of the
    # migration, so if the copy had finished no end will ever be reported; the VM showing
    # up on the target is then the only evidence left, and closes the lease.
    orphaned: set[str] = field(default_factory=set)
    # Operator fences (docs/operations.md#fencing): hosts in maintenance (host -> why) are
    # neither sources nor targets; pinned VMs are never chosen to move.
    maintenance: dict[str, str] = field(default_factory=dict)
    pinned: set[str] = field(default_factory=set)
    # Sources in recommend mode: their migrations are proposed, not started.
    recommend: set[str] = field(default_factory=set)
    # Each host's capacity as its agent last reported it. Used only when every planned host
    # has one (shares cannot be compared against a host of unknown size).
    capacity: dict[str, HostCapacity] = field(default_factory=dict)
    # Fleet controls (sova.manager.decisions.fleet): placement rules every move obeys, and hosts
    # being drained (fenced, and sending one VM per round until empty).
    placement: Placement = field(default_factory=Placement)
    draining: set[str] = field(default_factory=set)
    # Rule member -> its last known host(s): a report names only a few candidate VMs, so
    # the latest reports alone miss idle members (an anti-affine peer idle on a target).
    # Both hosts of a migration whose outcome is unknown, until a report names the VM.
    located: dict[str, frozenset[str]] = field(default_factory=dict)
    # The round's stages and their plug-ins (docs/design.md#the-planning-pipeline).
    pipeline: Pipeline = field(default_factory=default_pipeline, repr=False, compare=False)
    # The windows' values as a host x window array, for the round's one-pass hot-spot test
    # and the batch intake (ingest_arrays). Kept in step by the core's own writes (ingest,
    # window restarts, forget); a window object put into ``history`` from outside is copied
    # when the round reads it.
    _arrays: WindowArrays | None = field(default=None, repr=False, compare=False)
    # ingest_arrays' host -> position of its last ``hosts`` (the same tuple every period)
    _order: tuple[tuple[str, ...], dict[str, int]] | None = field(
        default=None, repr=False, compare=False
    )

    def windows(self) -> WindowArrays:
        arrays = self._arrays
        if arrays is None or arrays.n != self.detector.n:
            old = self.history
            arrays = self._arrays = WindowArrays(self.detector.n)
            for h, w in old.items():  # the views of the old arrays move to the new ones
                if isinstance(w, ArrayWindow):
                    values = list(w)
                    view = old[h] = arrays.window(h)
                    for u in values[-arrays.n :]:
                        arrays.append(h, view, u)
        return arrays

    @classmethod
    def from_spec(
        cls,
        spec: ManagerParams,
        *,
        keep_log: bool = True,
        close_on_arrival: bool = True,
        stale_after_s: float = math.inf,
    ) -> ManagerCore:
        """The core a configuration describes (the simulator's, the daemon's: the same). The
        keyword arguments are what differs between a simulated and a real cluster."""
        return cls(
            detector=HotspotDetector(spec.k, spec.n, spec.alpha),
            metric=spec.metric,
            ceiling=spec.ceiling,
            lease_timeout_s=spec.lease_timeout,
            restart_window_after_migration=spec.restart_window_after_migration,
            return_tabu_s=spec.return_tabu,
            max_concurrent_migrations=spec.max_concurrent_migrations,
            max_migrations_per_hour=spec.max_migrations_per_hour,
            vm_cooldown_s=spec.vm_cooldown,
            move_cost=MoveCost(
                min_relief=spec.min_relief,
                horizon_s=spec.relief_horizon,
                copy_rate_bps=spec.move_copy_rate,
                downtime_s=spec.move_downtime,
            ),
            keep_log=keep_log,
            close_on_arrival=close_on_arrival,
            stale_after_s=stale_after_s,
        )

    def source_restarted(self, host: str) -> set[str]:
        """``host``'s agent restarted: its open leases may close by arrival from now on.
        Returns the VMs whose leases were orphaned so."""
        orphans = {vm for vm, lease in self.leases.items() if lease.src == host}
        self.orphaned |= orphans
        return orphans

    def forget(self, host: str) -> None:
        self.history.pop(host, None)
        self.windows().drop(host)
        self.vms.pop(host, None)
        self.seen.pop(host, None)
        self.capacity.pop(host, None)
        self.migrating_hosts.discard(host)
        for vm in [vm for vm, h in self.located.items() if host in h]:
            del self.located[vm]  # unknown again until a report names it

    def stale(self, now_s: float) -> set[str]:
        """Hosts whose last report is older than ``stale_after_s``."""
        if not math.isfinite(self.stale_after_s):
            return set()
        return {h for h, t in self.seen.items() if now_s - t > self.stale_after_s}

    # ------------------------------------------------------------------ lease lifecycle

    def open(self, lease: Lease) -> Lease:
        """A migration starts outside a round (an operator approved its plan)."""
        self.leases[lease.vm] = lease
        self.note_start(lease.vm, lease.src, lease.since_s)
        return lease

    def release(
        self,
        vm: str,
        *,
        ran: bool = True,
        lease_id: int | None = None,
        landed: bool | None = None,
    ) -> LeaseEnd | None:
        """A migration ended (either way); its hosts may take part in new ones.

        ``ran=False``: the source declined the signal; nothing moved, the windows stay.
        ``lease_id``: only that lease (a newer one of the same VM stays).
        ``landed``: whether the VM is now on the target (None: not known; a placement
        rule then counts it on both hosts until a report names it).
        """
        end = self._close(vm, EndReason.RELEASED if ran else EndReason.DECLINED, lease_id)
        if end is not None and ran and landed is not None and vm in self.located:
            lease = end.lease
            self.located[vm] = frozenset((lease.dst if landed else lease.src,))
        return end

    def withdraw(self, vm: str, lease_id: int) -> LeaseEnd | None:
        """Lease ``lease_id`` of ``vm`` ends unstarted: its directive was never acknowledged.
        A newer lease of the same VM (another id) stays."""
        return self._close(vm, EndReason.WITHDRAWN, lease_id)

    def supersede(self, vm: str, lease_id: int) -> LeaseEnd | None:
        """Lease ``lease_id`` ends unstarted: its source acknowledged a newer store epoch's
        directive, so this one (restored from an older store) was never applied."""
        return self._close(vm, EndReason.SUPERSEDED, lease_id)

    def revoke(self, leases: Iterable[Lease]) -> list[LeaseEnd]:
        """Leases a round opened that could not be persisted: not decided, so undone (the
        next round decides again). Their departures stay recorded: the store keeps none,
        so a restart forgets them, and until then the brakes err on the side of caution."""
        out = []
        for lease in leases:
            end = self._close(lease.vm, EndReason.UNDONE, lease.id)
            if end is not None:
                out.append(end)
        return out

    def restore(
        self,
        leases: Iterable[Lease],
        starts: Iterable[tuple[str, str, float]] = (),
        drop_next: Iterable[str] = (),
    ) -> None:
        """State read back from a store after a restart (the windows are replayed through
        ``ingest`` first): the open leases, every migration's start (``vm, src, t``: the
        anti-thrash rules remember them), and the hosts whose next report spans a
        migration's copy and is dropped, as the live core would have."""
        self.leases = {lease.vm: lease for lease in leases}
        self.orphaned.clear()
        for vm, src, t in starts:
            self.note_start(vm, src, t)
        for host in drop_next:
            self._skip[host] = 1

    def _close(self, vm: str, why: EndReason, lease_id: int | None = None) -> LeaseEnd | None:
        lease = self.leases.get(vm)
        if lease is None or (lease_id is not None and lease.id != lease_id):
            return None
        return self._end(lease, why)

    def _end(self, lease: Lease, why: EndReason) -> LeaseEnd:
        del self.leases[lease.vm]
        self.orphaned.discard(lease.vm)
        end = LeaseEnd(lease, why)
        if end.moved:
            if lease.vm in self.placement.members:
                # Arrived: on the target. Otherwise the copy may or may not have finished.
                self.located[lease.vm] = frozenset(
                    (lease.dst,) if why is EndReason.ARRIVED else (lease.src, lease.dst)
                )
            self._restart_windows(lease)
        return end

    def _expire(self, now_s: float, stale: set[str]) -> list[LeaseEnd]:
        """Leases nobody will end: timed out (the agent never confirmed: do not block the
        hosts forever) or whose source went silent (whatever happened, both hosts' loads
        changed, so both windows restart; the source's will on its return)."""
        out = []
        for lease in list(self.leases.values()):
            if now_s - lease.since_s > self.lease_timeout_s:
                out.append(self._end(lease, EndReason.TIMEOUT))
            elif lease.src in stale:
                out.append(self._end(lease, EndReason.STALE))
        return out

    def _restart_windows(self, lease: Lease) -> None:
        # Whatever closes a migration's lease (the source's report of its end, or the VM
        # showing up on the target first, e.g. when the source agent died mid-copy) must
        # restart both windows: otherwise the relieved source is judged by reports of the
        # load it no longer carries and a second VM leaves it.
        if not self.restart_window_after_migration:
            return
        for host in (lease.src, lease.dst):
            if host in self.history:
                self.history[host].clear()
                self.windows().clear(host)
            self._skip[host] = 1

    def apply_round(self, result: RoundResult) -> None:
        """Make the changes ``plan`` made to produce ``result`` (when another process, a
        copy of this core, ran it): exactly the leases it closed and opened, the windows
        those closes restarted, the departures it recorded."""
        for end in result.closed:
            if end.lease.vm in self.leases:
                self._end(self.leases[end.lease.vm], end.why)
        for lease in result.opened:
            self.open(lease)
        self._remember(result.proposed)
        if self.keep_log:
            self.log.extend(result.decisions)

    def _remember(self, proposed: Iterable[Lease]) -> None:
        # Only this round's proposals: a source that is no longer proposing (cooled,
        # approved, fenced) forgets its old choice.
        self.proposals = {lease.src: (lease.vm, lease.dst) for lease in proposed}

    def note_start(self, vm: str, src: str, t: float) -> None:
        """A migration of ``vm`` off ``src`` started at ``t`` (signalled by this core, or
        read back from the store after a restart): what the anti-thrash rules remember."""
        if self.return_tabu_s > 0:
            self.departed.setdefault(vm, {})[src] = t
        self.last_moved[vm] = max(t, self.last_moved.get(vm, -math.inf))
        self.started.append(t)

    def hold(self, vm: str, now_s: float) -> str | None:
        """Why a migration of ``vm`` may not start now (which limit holds it), or None."""
        held = brakes(self, vm, now_s)
        return None if held is None else held.reason

    def leased_hosts(self) -> set[str]:
        leased = {h for lease in self.leases.values() for h in (lease.src, lease.dst)}
        return leased | self.migrating_hosts if self.migrating_hosts else leased

    def view(self) -> View:
        """Where the rules' members are: last known hosts and the leases in flight."""
        return View.last_known(
            self.located,
            ((lease.vm, lease.src, lease.dst) for lease in self.leases.values()),
            self.placement.members,
        )

    def placement_refusal(self, vm: str, src: str, dst: str) -> str | None:
        """Why a hard placement rule forbids moving ``vm`` from ``src`` to ``dst`` now
        (an approval's re-check), or None."""
        if not self.placement.active:
            return None
        view = self.view()
        return self.placement.refusal(vm, src, dst, view, soft=False)

    def plan(self, now_s: float, first_id: int = 1) -> RoundResult:
        """One round of Analyse + Plan (Alg. 2) over every host that has reported.

        Decisions are numbered from ``first_id`` in order; a lease carries the id of the
        decision that opened it (the daemon's directive id)."""
        stale = self.stale(now_s)
        closed = self._expire(now_s, stale)
        r = self.begin_round(now_s, first_id, stale)
        self.pipeline.run(r)
        self._remember(r.proposed)
        if self.keep_log:
            self.log.extend(r.decisions)
        return RoundResult(
            now_s,
            r.signals,
            tuple(r.decisions),
            tuple(r.opened),
            tuple(closed),
            tuple(r.proposed),
        )

    def begin_round(self, now_s: float, first_id: int = 1, stale: set[str] | None = None) -> Round:
        """A round's context before any stage ran: the hosts it plans (reported, not
        stale) and their reports, built when a stage first asks."""
        if stale is None:
            stale = self.stale(now_s)
        pinned = self.pinned
        history = self.history
        observed = self.windows().observed(history)
        planned = [h for h in observed if h not in stale] if stale else observed
        caps = self.capacity if all(h in self.capacity for h in planned) else {}
        built: dict[str, HostReport] = {}

        def report(h: str) -> HostReport:
            # Built for the hosts the round's exact search looks at (a few dozen of
            # thousands), or for every host when fleet controls need them all.
            rep = built.get(h)
            if rep is None:
                vms = self.vms.get(h, {})
                rep = built[h] = HostReport(
                    tuple(history[h]),
                    # A pinned VM's load still counts in its host's utilisation (the
                    # window); it is only never a candidate to move.
                    {n: v for n, v in vms.items() if n not in pinned} if pinned else vms,
                    caps.get(h),
                )
            return rep

        return Round(self, now_s, planned, report, caps, first_id)
