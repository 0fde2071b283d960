"""The host agent: Sensor + Effector of one hypervisor (Sova Fig. 3), one loop per period.

    sample (driver) -> sensing windows -> factors -> Operation Table (Alg. 1):    (pure)
                       VF holders + tiers, or VLM for the VM the manager moves
                    -> plan: desired vs actual inventory -> ordered actions        (planner)
                    -> apply each through the executor                             (I/O, bounded)

The agent never trusts its own memory of the host: each period it reads the actual
inventory and plans the difference, so a crash, a restart or an operation that finished
late is repaired by the next period instead of compounding (reconciliation). Between
periods :meth:`HostAgent.poll` collects finished operations and, when a VF was freed,
immediately re-plans the pending decision so the next holder does not wait a full period.

Two more loops share the executor:

* **bandwidth** (:meth:`HostAgent.bandwidth_step`, its own shorter period — DAQS runs at
  200 ms): measured rates -> the configured allocator -> rate limits;
* **migration**: the manager's ``<flag, target>`` signal (:meth:`HostAgent.signal`) makes
  Alg. 1 label the largest-MF VM VLM; its VF is revoked first (a VM holding a plain VF
  cannot live-migrate), then the migration is submitted. A failed or timed-out migration
  is forgotten: the VM keeps running at the source and the normal loop re-grants its VF.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from sova.agent.bandwidth_loop import BandwidthLoop
from sova.agent.config import ControllerConfig
from sova.agent.executor import MIGRATION_ENDED, Executor, Outcome, Result
from sova.agent.fleet_member import FleetMember
from sova.agent.registry import allocator_plugin, vf_policy
from sova.agent.vf_policies import VFContext, VFPolicy, note_holders
from sova.driver_protocol import Driver
from sova.lazymap import LazyMapping
from sova.model import (
    Action,
    AttachVF,
    DetachVF,
    Host,
    HostSample,
    Inventory,
    Migrate,
    NicKind,
    SetGuestRateLimit,
    SetVFRate,
)
from sova.policy.hotspot import (
    UTILISATION_SLACK,
    HostCapacity,
    HostReport,
    Utilisation,
    VMLoad,
)
from sova.policy.operation import Migration, Operation, choose_migration
from sova.policy.sensing import (
    HostSensor,
    LoadShares,
    VMFactors,
    demand_loads,
    host_load,
    vm_loads,
)
from sova.policy.vfsched import Candidate, VFDecision


@dataclass(frozen=True)
class StepReport:
    time_s: float
    factors: Mapping[str, VMFactors]
    actual: Inventory  # the period's one read of the host (HostAgent.snapshot)
    decision: VFDecision | None
    desired_rates: Mapping[str, float | None]
    planned: Sequence[Action]
    load: LoadShares | None = None
    migrating: Mapping[str, str] = field(default_factory=dict)
    # Alg. 1's Operation Table as decided this period: VF, VNIC or VLM for every VM on the
    # host (a policy that does not grant VFs leaves them where they are: VF as found).
    operations: Mapping[str, Operation] = field(default_factory=dict)
    # the VM this period labelled VLM on the manager's signal, and its target (or None)
    migration: tuple[str, str] | None = None


@dataclass(frozen=True)
class Sensed:
    """A period's sensing done outside the agent (the simulated world senses every host at
    once with :class:`~sova.policy.sensing.SensorKernel`): what ``HostSensor`` would give."""

    factors: Mapping[str, VMFactors]
    measured: bool  # some VM of the host has a full period in its window
    # the period's loads when the world measured them too (what _observe would give)
    loads: Loads | None = None
    # the host's VF scheduling when the world ran the kernel for every host at once
    # (what the agent's VF policy would decide: no signal, fence or operation in flight)
    vf: VFDecision | None = None
    # the host's inventory when the world read it for the agent (what driver.inventory()
    # would return now)
    actual: Inventory | None = None


@dataclass(frozen=True)
class Loads:
    """A period's :func:`~sova.policy.sensing.host_load` and
    :func:`~sova.policy.sensing.vm_loads` measured outside the agent."""

    previous: bool  # the host had an earlier reading (else nothing is measured yet)
    host: LoadShares | None  # None: a counter went back (the last load stands)
    vms: Mapping[str, LoadShares]


@dataclass(frozen=True)
class PeriodDecision:
    """What :meth:`HostAgent.decide` chose for one period."""

    vf: VFDecision | None  # the scheduler's decision, if the policy schedules
    desired: dict[str, float | None]  # the VF holders and their max rate
    migration: tuple[str, str] | None = None  # (vm, target) labelled VLM this period


def path_ceilings(
    actual: Inventory, virtio_bps: float = math.inf
) -> tuple[dict[str, float], frozenset[str]]:
    """Each VM's path ceiling (the lowest of its VF max rate or, on virtio, ``virtio_bps``
    (``scheduler.virtio_lossless``), its guest limit and the line rate) and the VMs on
    virtio: what the sensor marks censored periods against (docs/design.md#censored-demand)."""
    line = actual.host.nic.capacity_bps
    ceilings: dict[str, float] = {}
    virtio: list[str] = []
    for vm, st in actual.vms.items():
        c = line
        if st.nic is NicKind.VF:
            if st.vf_max_bps is not None:
                c = min(c, st.vf_max_bps)
        else:
            c = min(c, virtio_bps)
            virtio.append(vm)
        if st.guest_limit_bps is not None:
            c = min(c, st.guest_limit_bps)
        ceilings[vm] = c
    return ceilings, frozenset(virtio)


def plan_actions(
    desired: Mapping[str, float | None],
    ranking: Sequence[str],
    actual: Inventory,
    pending: Sequence[Action],
    max_ops: int,
    min_rates: Mapping[str, float | None] | None = None,
) -> list[Action]:
    """Turn the desired VF holders (vm -> max rate) into ordered actions.

    Detaches come first because they free VFs; attaches only use VFs that are free *now*
    (a detach in flight still holds its VF), best-ranked first; rate changes last.
    """
    min_rates = min_rates or {}
    busy = {a.vm for a in pending if not isinstance(a, SetGuestRateLimit)}
    holders = actual.vf_holders
    pool = actual.host.nic.vf_pool
    actions: list[Action] = []
    for vm in sorted(holders - set(desired)):
        if vm not in busy:
            actions.append(DetachVF(vm))
    pending_attaches = sum(1 for a in pending if isinstance(a, AttachVF))
    free = pool - len(holders) - pending_attaches
    order = [vm for vm in ranking if vm in desired] + sorted(set(desired) - set(ranking))
    for vm in order:
        if vm in holders or vm in busy:
            continue
        if free <= 0:
            break
        actions.append(AttachVF(vm, desired[vm], min_rates.get(vm)))
        free -= 1
    for vm in sorted(holders & set(desired)):
        state = actual.vms[vm]
        want_max, want_min = desired[vm], min_rates.get(vm)
        if vm not in busy and (state.vf_max_bps != want_max or state.vf_min_bps != want_min):
            actions.append(SetVFRate(vm, want_max, want_min))
    return actions[:max_ops]


def operation_table(
    actual: Inventory,
    desired: Collection[str],
    leaving: Collection[str],
    grants_vfs: bool = True,
) -> dict[str, Operation]:
    """Alg. 1's label for every VM on the host: VLM if it leaves (chosen here or already
    migrating), VF if it is to hold one, VNIC otherwise."""
    out = {}
    for vm, st in sorted(actual.vms.items()):
        if vm in leaving or st.migrating:
            out[vm] = Operation.VLM
        elif vm in desired if grants_vfs else st.nic is NicKind.VF:
            out[vm] = Operation.VF
        else:
            out[vm] = Operation.VNIC
    return out


class OperationTable(LazyMapping[str, Operation]):
    """:func:`operation_table` of a period (``StepReport.operations``), built when first
    read: a simulated world reads the tables of the few hosts it did not decide for. Its
    inputs are the period's own (the read, the desired holders, a copy of the VMs
    leaving), which nothing changes after the step."""

    __slots__ = ("_args",)

    def __init__(
        self,
        actual: Inventory,
        desired: Collection[str],
        leaving: Collection[str],
        grants_vfs: bool,
    ) -> None:
        self._built = None
        self._args = (actual, desired, leaving, grants_vfs)

    def _build(self) -> dict[str, Operation]:
        return operation_table(*self._args)


class VMLoadReports(LazyMapping[str, VMLoad]):
    """A host's VM loads as the migration policy sees them (:meth:`HostAgent.host_report`),
    built when first read. A manager's round reads the VMs of the few hosts it may move a
    VM off or onto, so a simulated world of thousands of hosts builds those instead of
    every VM's every period; what is built is what the agent had when it reported."""

    __slots__ = ("_args",)

    def __init__(
        self, loads: Mapping[str, LoadShares], actual: Inventory, migrating: frozenset[str]
    ) -> None:
        self._built = None
        # the agent replaces its loads each period, never changes them: no copy needed
        self._args = (loads, actual, migrating)

    def _build(self) -> dict[str, VMLoad]:
        loads, actual, migrating = self._args
        held = actual.vms
        return {
            vm: VMLoad(
                Utilisation(s.cpu, s.mem, s.net),
                held[vm].vm.memory_bytes,
                migrating=vm in migrating,
            )
            for vm, s in loads.items()
            if vm in held
        }

    def mover_columns(self) -> tuple[list[str], list[float], list[int]] | None:
        """The VMs not migrating as a round's ranking reads them (names, flat cpu/mem/net
        shares, memory; sova.policy.hotspot._mover_columns), without building the VMLoads;
        None where the VMLoads are built already or a value would fail their checks (then
        the ranking builds them, and they raise as they would)."""
        if self._built is not None:
            return None
        loads, actual, migrating = self._args
        held = actual.vms
        columns = getattr(loads, "columns", None)
        if columns is not None:
            vms, cpu, mem, net = columns()
        else:
            vms = list(loads)
            got = list(loads.values())
            cpu, mem, net = [s.cpu for s in got], [s.mem for s in got], [s.net for s in got]
        top = 1.0 + UTILISATION_SLACK
        names: list[str] = []
        shares: list[float] = []
        memory: list[int] = []
        for vm, c, m, n in zip(vms, cpu, mem, net, strict=True):
            state = held.get(vm)
            if state is None:
                continue
            size = state.vm.memory_bytes
            if not (0.0 <= c <= top and 0.0 <= m <= top and 0.0 <= n <= top) or size <= 0:
                return None
            if vm in migrating:
                continue
            names.append(vm)
            shares += (c, m, n)
            memory.append(size)
        return names, shares, memory

    def vm_load(self, vm: str) -> VMLoad:
        """``self[vm]``, building only that VM's VMLoad if the others are not built."""
        if self._built is not None:
            return self._built[vm]
        loads, actual, migrating = self._args
        s = loads[vm]
        return VMLoad(
            Utilisation(s.cpu, s.mem, s.net),
            actual.vms[vm].vm.memory_bytes,
            migrating=vm in migrating,
        )


class HostAgent(BandwidthLoop, FleetMember):
    def __init__(
        self,
        driver: Driver,
        config: ControllerConfig | None = None,
        on_outcome: Callable[[Outcome], None] | None = None,
        dry_run: bool = False,
    ) -> None:
        self.driver = driver
        self.config = config or ControllerConfig()
        self.vf_policy = vf_policy(self.config.vf_policy)()
        self.scheduler = self.vf_policy.scheduler_config(self.config.scheduler.to_config())
        s = self.config.sensing
        self.sensor = HostSensor(
            s.window, s.epsilon, s.traffic_threshold, s.censor_margin, s.cpu_saturation
        )
        self.executor = Executor(
            driver,
            op_timeout_s=self.config.op_timeout,
            migration_timeout_s=self.config.migration_timeout,
            max_retries=self.config.max_retries,
            dry_run=dry_run,
            on_outcome=self._outcome,
        )
        self._on_outcome = on_outcome
        self.vf_since: dict[str, float] = {}
        self.migrating: dict[str, str] = {}  # vm -> target host (Operation VLM)
        self._signal: Migration | None = None
        self._last_desired: dict[str, float | None] = {}
        self._last_ranking: tuple[str, ...] = ()
        self._ops_this_period = 0
        self._prev_sample: HostSample | None = None
        self._measured = False
        # The period's one read of the host (StepReport.actual); the report, the
        # manager's directive and the next reconcile use it instead of asking again.
        self.snapshot: Inventory | None = None
        self.last_load: LoadShares | None = None
        self.last_vm_loads: Mapping[str, LoadShares] = {}
        self._capacity: tuple[Host, HostCapacity] | None = None  # host_report's, kept
        plugin = allocator_plugin(self.config.bandwidth_policy)
        self.allocator = plugin.build(self.config.static_caps) if plugin else None
        self.spread_spare = plugin is not None and plugin.spread_spare
        self._bw_last: HostSample | None = None  # the bandwidth loop's previous reading
        self.limits: dict[str, float | None] = {}
        # Guaranteed VMs' reservations (bandwidth.Reservations.entry; absent: none).
        self.reservations: dict[str, tuple[int, float, bool]] = {}
        # Operator fences from the manager (docs/operations.md#fencing): VMs (or the whole
        # host) whose VF assignment stays as it is — neither attached nor detached.
        self.vf_freeze_host = False
        self.vf_freeze_vms: frozenset[str] = frozenset()

    # ----------------------------------------------------------------- events

    def _outcome(self, outcome: Outcome) -> None:
        a = outcome.action
        ok = outcome.result is Result.SUCCEEDED
        if ok and isinstance(a, AttachVF):
            self.vf_since[a.vm] = outcome.time_s
        elif ok and isinstance(a, DetachVF):
            self.vf_since.pop(a.vm, None)
        elif isinstance(a, Migrate) and outcome.result in MIGRATION_ENDED:
            # Gone, or rolled back: either way this host stops treating it as leaving.
            self.migrating.pop(a.vm, None)
            self.vf_since.pop(a.vm, None)
        elif ok and isinstance(a, SetGuestRateLimit):
            self.limits[a.vm] = a.rate_bps
        if self._on_outcome is not None:
            self._on_outcome(outcome)

    def set_vf_freeze(self, whole_host: bool, vms: Iterable[str]) -> bool:
        """The operator's VF fences; returns whether they changed."""
        new = (bool(whole_host), frozenset(vms))
        if new == (self.vf_freeze_host, self.vf_freeze_vms):
            return False
        self.vf_freeze_host, self.vf_freeze_vms = new
        self._mark()
        return True

    @property
    def signalled(self) -> bool:
        """A migration signal waits for the next step."""
        return self._signal is not None

    def signal(self, flag: bool, target: str | None = None, vm: str | None = None) -> None:
        """The manager's migration signal for this host (Alg. 2 line 13)."""
        self._signal = Migration(flag, target, vm) if flag and target else None
        self._mark()

    # ----------------------------------------------------------------- decide

    def _candidates(self, factors: Mapping[str, VMFactors], actual: Inventory) -> list[Candidate]:
        cfg = self.scheduler
        out = []
        for vm, f in sorted(factors.items()):
            state = actual.vms.get(vm)
            if state is None:
                continue
            out.append(
                Candidate(
                    vm=vm,
                    io_score=f.io_degree if cfg.io_metric == "io_degree" else f.io_factor,
                    net_score=f.net_degree if cfg.net_metric == "net_degree" else f.net_factor,
                    has_traffic=f.has_traffic,
                    demand_bps=f.demand_est_bps,
                    eligible=state.failover_ready
                    and state.running
                    and not state.migrating
                    and vm not in self.migrating,
                )
            )
        return out

    def _vm_load_reports(self, actual: Inventory) -> VMLoadReports:
        migrating = self.migrating
        return VMLoadReports(
            self.last_vm_loads, actual, frozenset(migrating) if migrating else _NOT_MIGRATING
        )

    def decide(
        self,
        factors: Mapping[str, VMFactors],
        actual: Inventory,
        now: float,
        scheduled: VFDecision | None = None,
    ) -> PeriodDecision:
        """Alg. 1 once: the VLM label on the manager's signal, then the VF policy
        (``scheduled``: its VF scheduling done outside, for a host without a signal or
        fences)."""
        policy = self.vf_policy
        signal, self._signal = self._signal, None
        if signal is not None:
            self._mark()
        chosen = None
        if signal is not None and policy.uses_manager and not self.migrating:
            loads = self._vm_load_reports(actual)
            chosen = choose_migration(loads, signal, self.config.manager.metric)
            if chosen is not None:
                self.migrating[chosen[0]] = chosen[1]
                scheduled = None  # the chosen VM is no longer a candidate
        frozen: set[str] | frozenset[str] = frozenset()
        if self.vf_freeze_host or self.vf_freeze_vms:  # (no fences: no set built)
            frozen = (
                set(actual.vms) if self.vf_freeze_host else self.vf_freeze_vms & actual.vms.keys()
            )
        if frozen and policy.grants_vfs:
            # The policy schedules the rest: frozen VMs are not candidates, and the VFs
            # frozen holders keep are not in its pool.
            kept = {vm: actual.vms[vm].vf_max_bps for vm in frozen & actual.vf_holders}
            nic = actual.host.nic
            actual = Inventory(
                replace(actual.host, nic=replace(nic, vf_pool=max(0, nic.vf_pool - len(kept)))),
                {n: st for n, st in actual.vms.items() if n not in frozen},
            )
            decision, desired = self._desired(policy, factors, actual, now)
            return PeriodDecision(decision, {**desired, **kept}, chosen)
        return PeriodDecision(*self._desired(policy, factors, actual, now, scheduled), chosen)

    def _desired(
        self,
        policy: VFPolicy,
        factors: Mapping[str, VMFactors],
        actual: Inventory,
        now: float,
        scheduled: VFDecision | None = None,
    ) -> tuple[VFDecision | None, dict[str, float | None]]:
        ctx = VFContext(
            factors=factors,
            actual=actual,
            now=now,
            candidates_of=lambda: self._candidates(factors, actual),
            vf_since=self.vf_since,
            measured=self._measured,
            scheduler=self.scheduler,
            with_tiers=lambda chosen: self._with_tiers(chosen, factors, actual),
            scheduled=scheduled,
        )
        return policy.desired(ctx)

    def _with_tiers(
        self, chosen: Sequence[str], factors: Mapping[str, VMFactors], actual: Inventory
    ) -> dict[str, float | None]:
        tiers = actual.host.nic.tiers_bps
        if not tiers or not chosen:
            return dict.fromkeys(chosen)
        from sova.policy.tiers import assign_tiers

        demands = {vm: factors[vm].demand_bps if vm in factors else 0.0 for vm in chosen}
        rates = assign_tiers(demands, tiers)
        return {vm: rates[vm] for vm in chosen}

    # ----------------------------------------------------------------- loop

    def _observe(
        self, sample: HostSample, actual: Inventory, sensed: bool = False
    ) -> LoadShares | None:
        if not sensed:
            self.sensor.observe(sample, *path_ceilings(actual, self.scheduler.virtio_lossless))
        prev, self._prev_sample = self._prev_sample, sample
        if prev is None:
            return None
        h = actual.host
        load = host_load(prev, sample, h.cores, h.memory_bytes, h.nic.capacity_bps)
        self.last_vm_loads = vm_loads(prev, sample, h.cores, h.memory_bytes, h.nic.capacity_bps)
        if load is not None and not sensed and self.config.sensing.hotspot_on_demand:
            load, self.last_vm_loads = demand_loads(
                load, self.last_vm_loads, self.sensor.factors(), h.nic.capacity_bps
            )
        if load is not None:
            self.last_load = load
        return load

    def _take_loads(self, loads: Loads) -> LoadShares | None:
        """:meth:`_observe`'s bookkeeping with loads measured outside the agent."""
        if not loads.previous:
            return None
        self.last_vm_loads = loads.vms  # the world's, never changed after
        if loads.host is not None:
            self.last_load = loads.host
        return loads.host

    def step(self, sensed: Sensed | None = None) -> StepReport:
        """One control period: sense (or take ``sensed``), decide, plan, apply."""
        self.executor.poll()
        now = self.driver.now()
        if sensed is not None and sensed.actual is not None:
            actual = self.snapshot = sensed.actual
        else:
            actual = self.snapshot = self.driver.inventory()
        if sensed is not None and sensed.loads is not None:
            load = self._take_loads(sensed.loads)
        else:
            load = self._observe(self.driver.sample(), actual, sensed is not None)
        factors: Mapping[str, VMFactors]
        if sensed is None:
            factors = self.sensor.factors()
            self._measured = self.sensor.measured()
        else:
            factors, self._measured = sensed.factors, sensed.measured
        d = self.decide(factors, actual, now, sensed.vf if sensed is not None else None)
        self._last_desired = d.desired
        self._last_ranking = d.vf.ranking if d.vf else tuple(d.desired)
        self._ops_this_period = 0
        planned = self._reconcile(actual)
        leaving = dict(self.migrating)
        table = OperationTable(actual, d.desired, leaving, self.vf_policy.grants_vfs)
        return StepReport(
            now, factors, actual, d.vf, d.desired, planned, load, leaving, table, d.migration
        )

    def settle(
        self,
        measured: bool,
        loads: Loads | None,
        actual: Inventory,
        desired: dict[str, float | None],
        ranking: tuple[str, ...],
        unrecorded: Sequence[str] = (),
    ) -> None:
        """A period found *settled* outside the agent (``measured`` and ``loads`` as in
        :class:`Sensed`; its factors are not read): the scheduling kernel's holders
        ``desired`` (all at no rate; its ``ranking``) are the ones the host has, with the
        host measured, nothing in flight or leaving, no signal, fence or tier;
        ``unrecorded``: the holders, in ``actual``'s order, without a dwell start in
        :attr:`vf_since`. :meth:`step` would plan nothing then; this leaves the agent's
        records as that step would (tests/test_fleet_control.py holds the two equal)
        without its report, so a simulated world of thousands of hosts spends per-host
        Python only where something changes. ``desired`` is not copied: nothing changes
        an agent's desired holders after it took them (a world hands a host the same
        mapping period after period while its holders stay)."""
        self.snapshot = actual
        if loads is not None:
            self._take_loads(loads)
        else:
            self._observe(self.driver.sample(), actual, True)
        self._measured = measured
        if self._signal is not None:
            self._signal = None
            self._mark()
        if unrecorded:
            note_holders(unrecorded, self.vf_since, self.driver.now())  # as the policy does
        self._last_desired = desired
        self._last_ranking = ranking
        self._ops_this_period = 0

    def poll(self) -> list[Outcome]:
        """Between periods: collect finished operations, use freed VFs at once."""
        if not self.executor.in_flight:
            return []
        done = self.executor.poll()
        if any(o.result is Result.SUCCEEDED and isinstance(o.action, DetachVF) for o in done):
            self.snapshot = self.driver.inventory()
            self._reconcile(self.snapshot)
        return done

    def _reconcile(self, actual: Inventory) -> list[Action]:
        budget = self.config.max_ops_per_period - self._ops_this_period
        actions: list[Action] = []
        if budget > 0:
            actions = plan_actions(
                self._last_desired,
                self._last_ranking,
                actual,
                self.executor.pending_actions(),
                budget,
            )
        actions += self._migration_actions(actual)
        for a in actions:
            self.executor.apply(a, actual)
        self._ops_this_period += len(actions)
        return actions

    def _migration_actions(self, actual: Inventory) -> list[Action]:
        """Revoke the VF of a VM chosen to migrate, then migrate it once it is on virtio."""
        out: list[Action] = []
        for vm, target in sorted(self.migrating.items()):
            state = actual.vms.get(vm)
            if state is None:
                self.migrating.pop(vm, None)  # already gone (an earlier run finished it)
                continue
            if self.executor.busy(vm):
                continue
            if state.nic is NicKind.VF:
                out.append(DetachVF(vm))
            elif not state.migrating:
                out.append(Migrate(vm, target, self.config.manager.migration_bandwidth))
        return out

    # ----------------------------------------------------------------- report

    def host_report(self) -> HostReport | None:
        """What the manager needs from this host, from the last period's snapshot: its
        latest load (the manager keeps the history) and per-VM loads."""
        parts = self.report_parts()
        if parts is None:
            return None
        load, vms, capacity = parts
        return HostReport(history=(load,), vms=vms, capacity=capacity)

    def report_parts(self) -> tuple[Utilisation, Mapping[str, VMLoad], HostCapacity] | None:
        """:meth:`host_report`'s parts as ``ManagerCore.ingest_many`` takes them (a
        simulated world hands every host's to its manager without the report object)."""
        s, actual = self.last_load, self.snapshot
        if s is None or actual is None:
            return None
        h = actual.host
        known = self._capacity
        if known is None or known[0] is not h:
            # Shares are of this host's capacity: the manager needs it to judge how much of
            # a smaller or larger target a VM would take (heterogeneous hosts). Built again
            # only when the host's description is another object (a driver's new reading).
            known = self._capacity = (
                h,
                HostCapacity(float(h.cores), float(h.memory_bytes), h.nic.capacity_bps),
            )
        return Utilisation(s.cpu, s.mem, s.net), self._vm_load_reports(actual), known[1]

    def report_vms(self) -> VMLoadReports | None:
        """:meth:`report_parts`' VM loads alone, or None before the first period (a
        simulated world hands its manager the hosts' loads as arrays, and these beside)."""
        actual = self.snapshot
        return None if actual is None else self._vm_load_reports(actual)


_NOT_MIGRATING: frozenset[str] = frozenset()
