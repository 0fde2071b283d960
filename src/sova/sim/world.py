"""A simulated cluster with its controllers: engine + one driver and agent per host + manager.

The World is what ``sova simulate`` runs once per compared policy, and what the demo's
world process serves to agent processes over HTTP (there the agents are remote and this
class only advances the engine). Ordering inside one tick ``(t0, t1]``: phase changes due
at or before ``t0`` apply, the physics of the tick runs, operations due by ``t1``
complete; then the agents take the phases the one schedule
(:class:`~sova.agent.schedule.PhaseSchedule`) has due after this tick: every agent polls
(collects finished operations); at multiples of the bandwidth period the bandwidth
controllers run; at multiples of the control period every agent steps, its step becomes
timeline rows (:mod:`sova.record`), it reports to the manager, and the manager plans (its
signals are acted on at the agents' next step, as they would be over the network).
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from sova.agent.config import ControllerConfig
from sova.agent.executor import Outcome
from sova.agent.loop import HostAgent, StepReport
from sova.agent.registry import vf_policy
from sova.agent.schedule import BANDWIDTH, POLL, STEP, Phase, PhaseSchedule, act
from sova.hotspot_events import HotspotStates
from sova.manager.decisions.core import ManagerCore, MigrationDecision
from sova.model import Migrate, SetGuestRateLimit
from sova.policy.hotspot import HostCapacity
from sova.policy.tick import Guarantees, Sums, tally
from sova.record import (
    NONE,
    VM_COLUMN,
    ColumnBlock,
    RunRecord,
    TimelineRow,
    Values,
    column_block,
    complete_row,
    decision_record,
    migration_start_event,
    outcome_event,
    step_values,
)
from sova.scenario import PolicySpec, Scenario
from sova.sim.decisions import virtio_ceiling_bps
from sova.sim.driver import SimDriver
from sova.sim.engine import Engine
from sova.sim.fleet_bandwidth import FleetBandwidth
from sova.sim.fleet_control import FleetControl, SettledMap
from sova.sim.fleet_sensing import FleetSensing
from sova.sim.fleet_settle import SettledHosts
from sova.sim.state import Op

TICK_HOSTS = 10  # up to this many hosts the report draws a line per host per tick


class HostSeries:
    """One value per host per tick (link or CPU use), kept as compactly as its readers
    allow: every tick only up to :data:`TICK_HOSTS` hosts (the report's line per host);
    for any number of hosts the per-period means (heat maps), each host's sum over the
    run, and the last period's ticks (live views). A list of per-tick arrays for 1,000
    hosts over an hour was 29 MB per series."""

    def __init__(self, hosts: int = 0, period_ticks: int = 1) -> None:
        self.k = max(1, period_ticks)
        self.n = 0
        self._ticks: np.ndarray | None = np.zeros((64, hosts)) if hosts <= TICK_HOSTS else None
        self.total = np.zeros(hosts)
        self._periods: list[np.ndarray] = []
        self._acc = np.zeros(hosts)
        self.last: deque[np.ndarray] = deque(maxlen=self.k)

    def add(self, values: np.ndarray) -> None:
        if self._ticks is not None:
            if self.n == self._ticks.shape[0]:
                self._ticks = np.concatenate([self._ticks, np.zeros_like(self._ticks)])
            self._ticks[self.n] = values
        self.n += 1
        self.total += values
        # a period's ticks added one after another, then divided: numpy's mean over them
        self._acc = values.copy() if self.n % self.k == 1 or self.k == 1 else self._acc + values
        if self.n % self.k == 0:
            self._periods.append(self._acc / self.k)
        self.last.append(values.copy())

    @property
    def ticks(self) -> np.ndarray | None:
        """Ticks x hosts, or None past :data:`TICK_HOSTS` hosts."""
        return None if self._ticks is None else self._ticks[: self.n]

    def periods(self) -> np.ndarray:
        """Periods x hosts: the mean of each period's ticks, a trailing partial one included."""
        rows = list(self._periods)
        if self.n % self.k:
            rows.append(self._acc / (self.n % self.k))
        return np.array(rows) if rows else np.zeros((0, self.total.size))

    def mean(self) -> float | None:
        """The mean over hosts and ticks."""
        if self.n == 0:
            return None
        if self._ticks is not None:
            return float(np.mean(self._ticks[: self.n]))
        return float(self.total.sum() / (self.n * self.total.size))

    def busiest(self) -> float | None:
        """The largest of the hosts' means over the run."""
        if self.n == 0:
            return None
        if self._ticks is not None:
            return float(self._ticks[: self.n].mean(axis=0).max())
        return float((self.total / self.n).max())


@dataclass
class Stats:
    """Per-tick measurements the summary needs, accumulated without keeping every tick."""

    ticks: int = 0
    tx_bits: np.ndarray = field(default_factory=lambda: np.zeros(0))
    rx_bits: np.ndarray = field(default_factory=lambda: np.zeros(0))
    host_tx_bits: np.ndarray = field(default_factory=lambda: np.zeros(0))
    req_weight: np.ndarray = field(default_factory=lambda: np.zeros(0))
    req_time: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # log-binned histogram of per-(VM, tick) mean response times, weighted by requests
    resp_hist: np.ndarray = field(default_factory=lambda: np.zeros(240))
    guar_intervals: np.ndarray = field(default_factory=lambda: np.zeros(0))
    guar_met: np.ndarray = field(default_factory=lambda: np.zeros(0))
    series_t: list[float] = field(default_factory=list)
    host_net: HostSeries = field(default_factory=HostSeries)
    host_cpu: HostSeries = field(default_factory=HostSeries)
    # only the last control period's (live views read it): per VM per tick for a whole
    # run was most of a large run's memory; bit/s (live views show Mbit/s)
    series_vm_tx_bps: deque[np.ndarray] = field(default_factory=deque)


RESP_BINS = np.logspace(-6, 3, 241)  # 1 µs … 1000 s


@dataclass
class PolicyRun(RunRecord):
    """A simulated run's records plus what only the simulator measures."""

    stats: Stats = field(default_factory=Stats)
    engine: Engine | None = None


def agent_config(scn: Scenario, policy: PolicySpec) -> ControllerConfig:
    """The scenario's controller for one compared policy. The VF gate's
    ``scheduler.virtio_lossless`` is virtio's per-VM ceiling: unless the scenario sets it,
    the simulated hardware's own (its profile's), the ceiling the world enforces and the
    decision benchmark judges moves by (docs/design.md#vf-cost-benefit)."""
    cfg = scn.controller.for_policy(policy.vf, policy.bandwidth, policy.static_caps)
    if "virtio_lossless" in scn.controller.scheduler.model_fields_set:
        return cfg
    ceiling = virtio_ceiling_bps(scn.profile)
    scheduler = cfg.scheduler.model_copy(update={"virtio_lossless": ceiling})
    return cfg.model_copy(update={"scheduler": scheduler})


def _recording(scn: Scenario, vm_names: list[str]) -> tuple[int, np.ndarray | None]:
    """The timeline's resolution (scenario ``output:``): every how many ticks a period's
    rows are kept (0: every period), and which VMs' (None: all)."""
    tp = scn.output.timeline_period
    ticks = 0 if tp is None else max(1, int(round(tp / scn.tick)))
    if not scn.output.timeline_vms:
        return ticks, None
    keep = set(scn.output.timeline_vms)
    return ticks, np.array([v in keep for v in vm_names])


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic collector's automatic passes off, restored after (no pass of its own:
    what was made is collected with the run's, :func:`_no_cycle_scans`). A world's
    construction makes a model per VM, an agent per host and their records; the passes
    over them (and over the scenario before them) freed nothing and were a third of a
    1,000 x 20 world's construction."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def boot_vfs(eng: Engine) -> None:
    """VFs in the domain XML: the VMs static-sriov would pick start on them at t = 0.

    Same choice as the agent's static-sriov (creation order, failover-ready VMs, up to
    the pool), so the agent's first period finds nothing to change. It acts on the engine
    alone, so it lives outside :class:`World`.
    """
    for host in eng.hosts:
        vms = [i for i in eng.vms_on(host.name) if eng.ready[i]]
        for k, i in enumerate(vms[: host.nic.vf_pool]):
            eng.on_vf[i], eng.vf_index[i] = True, k


class World:
    @_collector_paused()
    def __init__(
        self, scn: Scenario, policy: PolicySpec, with_agents: bool = True, threads: int = 1
    ) -> None:
        self.scn = scn
        self.policy = policy
        self.engine = Engine(scn)
        self.engine.threads = threads
        if scn.controller.boot_vfs and policy.vf == "static-sriov":
            boot_vfs(self.engine)
        self.run = PolicyRun(policy.name, engine=self.engine)
        self._states = HotspotStates(policy.name)  # hot hosts left as they are, as states
        self.drivers = {h: SimDriver(self.engine, h) for h in self.engine.host_names}
        self.agents: dict[str, HostAgent] = {}
        if with_agents:
            cfg = agent_config(scn, policy)
            for h, drv in self.drivers.items():
                self.agents[h] = HostAgent(drv, cfg, on_outcome=self._logger(h))
        # every host's bandwidth loop at once (sim/fleet_bandwidth.py), same decisions
        self._bw = FleetBandwidth.of(self.engine, self.agents) if self.agents else None
        # and every host's sensing (sim/fleet_sensing.py), the same factors
        first = next(iter(self.agents.values()), None)
        self._sensing = FleetSensing(self.engine, first.config) if first else None
        # and every host's VF scheduling (sim/fleet_control.py), the same decisions
        self._control = (
            FleetControl(self.engine, self.agents) if FleetControl.applies(self.agents) else None
        )
        m = scn.controller.manager
        self.manager: ManagerCore | None = None
        if with_agents and vf_policy(policy.vf).uses_manager and len(self.drivers) > 1:
            self.manager = ManagerCore.from_spec(m)
        self.engine.on_submit.append(self._on_submit)
        # the hosts whose agents may have operations in flight: every operation an agent
        # tracks was submitted to the engine from its host (Executor.apply), so the others
        # have nothing to poll; in the agents' order
        self._submitted: set[str] = set()
        self._order = {h: k for k, h in enumerate(self.agents)}
        # the manager's batch intake (_ingest): the hosts in index order (the agents' and
        # the sensing arrays'), and each host's capacity as its agent reports it
        self._agent_list = list(self.agents.values())
        self._host_tuple = tuple(self.agents)
        self._caps = [
            HostCapacity(float(h.cores), float(h.memory_bytes), h.nic.capacity_bps)
            for h in self.engine.hosts
        ]
        self.tick_s = scn.tick
        self.k = 0
        self._record_ticks, self._record_vms = _recording(scn, self.engine.vm_names)
        self._changes = sorted({p.at for p in scn.workload if p.at > 0})
        self.schedule = PhaseSchedule(
            scn.tick, scn.controller.period, scn.controller.bandwidth_period
        )
        n = self.engine.N
        st = self.run.stats
        st.tx_bits, st.rx_bits = np.zeros(n), np.zeros(n)
        st.host_tx_bits = np.zeros(self.engine.H)
        st.req_weight, st.req_time = np.zeros(n), np.zeros(n)
        st.guar_intervals, st.guar_met = np.zeros(n), np.zeros(n)
        k = max(1, int(round(scn.controller.period / scn.tick)))
        st.series_vm_tx_bps = deque(maxlen=k)
        st.host_net, st.host_cpu = HostSeries(self.engine.H, k), HostSeries(self.engine.H, k)
        g = np.array([v.sla.bandwidth.minimum for v in self.engine.vms], dtype=np.float64)
        tolerance = float(scn.metrics.get("guarantee_tolerance", 0.05))
        # the guaranteed VMs, found once a run (None: no VM has a guarantee)
        self._guarantees = Guarantees(g > 0, g, (1.0 - tolerance) * g) if g.any() else None
        # the statistics the core advances in place each tick (never replaced): one view
        self._sums = Sums(
            st.tx_bits,
            st.rx_bits,
            st.host_tx_bits,
            st.req_weight,
            st.req_time,
            st.resp_hist,
            st.guar_intervals,
            st.guar_met,
        )
        # Response times count only after this time (default 0: the whole run). A sweep point
        # that replays the history of a gradually raised load (Sova Fig. 7) measures the
        # point's own rate, not the warm-up that led to its placement.
        self._measure_from = float(scn.metrics.get("response_from_s", 0.0))

    @property
    def now(self) -> float:
        return self.engine.env.now

    @property
    def hosts(self) -> list[str]:
        return list(self.engine.host_names)

    def driver(self, host: str) -> SimDriver:
        return self.drivers[host]

    # ----------------------------------------------------------------- logging

    def _logger(self, host: str) -> Callable[[Outcome], None]:
        def log(o: Outcome) -> None:
            a = o.action
            if isinstance(a, Migrate) and self.manager is not None:
                self.manager.release(a.vm)
            if isinstance(a, SetGuestRateLimit) and self._bw is not None:
                self._bw.limit_set(self.engine, host, a, o.result)
            ev = outcome_event(o, policy=self.policy.name, host=host)
            if ev is not None:
                self.run.events.append(ev)

        return log

    def _on_submit(self, t: float, op: Op) -> None:
        self._submitted.add(op.host)
        if isinstance(op.action, Migrate):
            self.run.events.append(migration_start_event(self.policy.name, t, op.action, op.host))

    # ----------------------------------------------------------------- time

    def advance(self, progress: Callable[[int], None] | None = None) -> None:
        """One tick of the world and its controllers."""
        self.k += 1
        k = self.k
        t0, t1 = (k - 1) * self.tick_s, k * self.tick_s
        eng = self.engine
        while self._changes and self._changes[0] <= t0 + 1e-9:
            at = self._changes.pop(0)
            eng.set_workloads(
                (
                    (eng.vm_index[name], w)
                    for phase in self.scn.workload
                    if phase.at == at
                    for name, w in phase.vms.items()
                ),
                t0,
            )
        eng.tick(t0, t1)
        eng.env.run(until=t1)
        self._accumulate(t1)
        if self.agents:
            for due in self.schedule.phases(k):
                self._phase(due, t1)
        if progress is not None:
            progress(1)

    def _phase(self, phase: Phase, t: float) -> None:
        if self._bw is not None:
            if phase == BANDWIDTH:
                self._bw.step(self.engine)
                return
            if phase == POLL:
                self._bw.settle(self.engine)
        if phase == POLL:
            # an agent polls only to collect finished operations: one without any in
            # flight has nothing to do (HostAgent.poll returns at once)
            submitted = self._submitted
            for h in sorted(submitted, key=self._order.__getitem__):
                a = self.agents[h]
                if a.executor.in_flight:
                    a.poll()
                if not a.executor.in_flight:
                    submitted.discard(h)
            return
        if phase == STEP and self._sensing is not None:
            sensed = self._sensing.sense(self.engine)
            factors = self._sensing.factors
            settled = SettledMap.NONE
            if self._control is not None and factors is not None:
                # (the agents keep which of them act alone in the settling's array)
                alone = self._settling().alone
                sensed = self._control.decide(self.engine, self.agents, sensed, factors, alone)
                settled = self._control.settled
            # a settled host's rows come from the world's arrays (_decided_block): no
            # report; its agent takes the period as arrays when it next reads its records
            # (sim/fleet_settle.py), or by HostAgent.settle if its policy notes holders
            reports: dict[str, StepReport | None] = dict.fromkeys(self._host_tuple)
            if len(settled) < len(reports):
                agents = self._agent_list
                for hi, h in enumerate(self._host_tuple):
                    if h not in settled:
                        reports[h] = agents[hi].step(sensed[h])
            self._settling().publish(
                settled.hosts, sensed, settled, self._sensing.last_load, self._sensing.has_load
            )
            for h in settled.unrecorded:
                hi = self._order[h]
                self._agent_list[hi].settle(
                    sensed.measured_list()[hi], sensed.loads_at(hi), *settled[h]
                )
            self._record(t, reports)
            self._plan(t)
            return
        acted = {h: act(a, phase) for h, a in self.agents.items()}
        if phase == STEP:
            self._record(t, {h: r for h, r in acted.items() if r is not None})
            self._plan(t)

    def run_until(self, until: float, progress: Callable[[int], None] | None = None) -> PolicyRun:
        steps = int(round(until / self.tick_s))
        with _no_cycle_scans():
            while self.k < steps:
                self.advance(progress)
        if self._bw is not None:
            self._bw.save(self.engine)  # every agent's record of its limits complete
        self.run.events.extend(self._states.close(self.k * self.tick_s))
        self.run.engine = self.engine
        return self.run

    # ----------------------------------------------------------------- manager

    def _plan(self, t: float) -> None:
        if self.manager is None:
            return
        sensing = self._sensing
        if sensing is not None:
            # every agent's report as arrays: its last load is the sensing pass's (the
            # agents took theirs from it), its VM loads are built only when read
            self._ingest(sensing)
        else:
            # each agent's host_report as its parts: nothing here reads the report object
            parts = ((h, agent.report_parts()) for h, agent in self.agents.items())
            self.manager.ingest_many((h, *p) for h, p in parts if p is not None)
        before = len(self.manager.log)
        result = self.manager.plan(t)
        _log_round(self.run, self._states, self.manager.log[before:], t)
        for h in result.flagged:  # read without building every quiet host's signal
            sig = result.signals[h]
            self.agents[h].signal(True, sig.target, sig.vm)

    def _settling(self) -> SettledHosts:
        """The periods this world settled its hosts in (made at the first)."""
        known: SettledHosts | None = getattr(self, "_settled_hosts", None)
        if known is None:
            known = self._settled_hosts = SettledHosts(self._host_tuple, self._agent_list)
        return known

    def _ingest(self, sensing: FleetSensing) -> None:
        """What ``ingest_many`` of every agent's ``report_parts`` does (in the agents'
        order, the hosts' index order), through the manager's batch intake."""
        assert self.manager is not None
        agents = self._agent_list
        # the settled hosts' from the period's arrays, without touching their agents
        vms = self._settling().report_vms(agents)
        has = sensing.has_load
        if has.all() and not any(v is None for v in vms):
            hosts, caps, util = self._host_tuple, self._caps, sensing.last_load
        else:
            keep = [i for i in np.flatnonzero(has).tolist() if vms[i] is not None]
            hosts = tuple(self._host_tuple[i] for i in keep)
            caps = [self._caps[i] for i in keep]
            util = sensing.last_load[keep]
            vms = [vms[i] for i in keep]
        self.manager.ingest_arrays(hosts, util, vms, caps)  # type: ignore[arg-type]

    # ----------------------------------------------------------------- records

    def _accumulate(self, t: float) -> None:
        """The tick's statistics (one core call: :func:`sova.policy.tick.tally`; the
        readable form: tests/test_tick_forms.py ``ref_accumulate``) and the series."""
        eng, st = self.engine, self.run.stats
        st.ticks += 1
        by_host = eng.tx_by_host  # the tick's own sum, unless a VM moved since
        if by_host is None:  # (a weighted bincount is float64)
            by_host = np.bincount(eng.host, eng.tx, minlength=eng.H).astype(np.float64)
        tally(
            eng.tx,
            eng.rx,
            by_host,
            eng.served_req,
            eng.resp_s,
            eng.offered,
            self._guarantees,
            RESP_BINS,
            self._sums,
            self.tick_s,
            t > self._measure_from,
        )
        st.series_t.append(t)
        st.host_net.add(eng.host_net_util)
        st.host_cpu.add(eng.host_cpu_util)
        st.series_vm_tx_bps.append(eng.tx)  # each tick's is new; Mbit/s when a view reads

    def _record(self, t: float, reports: Mapping[str, StepReport | None]) -> None:
        """The period's timeline rows; a host without a report (settled: ``None``) is one
        the world decided for, whose rows come from its arrays."""
        if self._record_ticks and self.k % self._record_ticks:
            return
        eng = self.engine
        index = eng.vm_index
        # the engine's arrays read once per period, not once per row, and only when a
        # host's rows come from its report (most periods of a large world none does)
        read = cache(lambda: (eng.offered.tolist(), eng.resp_s.tolist(), eng.kind.tolist()))

        def world(vm: str) -> tuple[float | None, float | None]:
            offered, resp_s, kind = read()
            i = index[vm]
            return _world_columns(offered[i], resp_s[i], kind[i])

        timeline, policy = self.run.timeline, self.policy.name
        keep = self._record_vms

        def rows(values: Iterable[Values]) -> None:
            if keep is not None:
                values = (v for v in values if keep[index[v[VM_COLUMN]]])
            timeline.extend_values(values)

        decided = self._decided_block()
        if decided is None:
            for host, report in reports.items():
                assert report is not None
                rows(step_values(report, policy=policy, host=host, world=world))
            return
        at, cut, (_, numbers, texts) = decided

        def put(first: int, last: int) -> None:
            """The decided hosts first..last (consecutive in the block) into the timeline."""
            a, b = cut[first], cut[last + 1]
            part: slice | np.ndarray = slice(a, b)
            n = b - a
            if keep is not None:
                part = np.flatnonzero(keep[texts["vm"][1][a:b]]) + a
                n = int(part.size)
            timeline.extend_columns(
                n,
                {k: v[part] for k, v in numbers.items()},
                {k: (vocab, index[part]) for k, (vocab, index) in texts.items()},
            )

        if len(at) == len(reports) and list(at) == list(reports):
            put(0, len(at) - 1)  # the world decided for every host: one block
            return
        run: list[int] = []  # the decided hosts met in a row: one block
        for host, report in reports.items():
            k = at.get(host)
            if k is not None and (not run or k == run[1] + 1):
                run = [run[0] if run else k, k]
                continue
            if run:
                put(*run)
            run = []
            if k is not None:
                run = [k, k]
            else:
                assert report is not None  # (settled hosts are decided ones)
                rows(step_values(report, policy=policy, host=host, world=world))
        if run:
            put(*run)

    def _decided_block(self) -> tuple[dict[str, int], list[int], ColumnBlock] | None:
        """The timeline rows of the hosts the world decided for this period
        (``FleetControl.decided``) as columns, built from the arrays the agents' step
        reports came from: the period's sensing and the inventories' columns; with each
        host's place in the block by name and where its rows start. The rows are
        :func:`~sova.record.step_values` of those reports (tests/test_fleet_control.py
        holds the two equal)."""
        ctl, sensing = self._control, self._sensing
        rows = None if ctl is None else ctl.decided
        f = None if sensing is None else sensing.factors
        if rows is None or f is None:
            return None
        eng, m, cut = self.engine, rows.members, rows.cut
        request = eng.kind[m] == 2
        block = column_block(
            policy=self.policy.name,
            time_s=rows.time_s,
            host_names=eng.host_names,
            host=np.repeat(np.asarray(rows.hosts, dtype=np.int64), np.diff(cut)),
            vm_names=eng.vm_names,
            vm=m,
            on_vf=rows.on_vf,
            vf_max_bps=rows.vf_max,
            guest_limit_bps=rows.guest_limit,
            factors=[
                a[m]
                for a in (
                    f.tx_bps,
                    f.rx_bps,
                    f.cpu_usage,
                    f.io_degree,
                    f.net_factor,
                    f.net_degree,
                    f.io_factor,
                )
            ],
            offered_mbps=eng.offered[m] / 1e6,
            response_ms=np.where(request, eng.resp_s[m] * 1000, NONE),
        )
        at = {eng.host_names[h]: k for k, h in enumerate(rows.hosts)}
        return at, list(cut), block

    def complete(self, row: TimelineRow, host: str) -> TimelineRow:
        """An agent's row with what only the simulated cluster knows."""
        eng = self.engine
        i = eng.vm_index[row.vm]
        offered, response = _world_columns(
            float(eng.offered[i]), float(eng.resp_s[i]), int(eng.kind[i])
        )
        return complete_row(
            row, policy=self.policy.name, host=host, offered_mbps=offered, response_ms=response
        )


def _log_round(
    run: PolicyRun, states: HotspotStates, new: list[MigrationDecision], t: float
) -> None:
    """A manager round's new decisions (``ManagerCore.log`` entries) into the run: as the
    hotspot states' events (a repeated "still hot" is one state, not an event a round)
    and as decision records."""
    if new or states.open:
        run.events.extend(
            states.events(
                t,
                [
                    {
                        "host": d.host,
                        "flag": d.signal.flag,
                        "vm": d.signal.vm,
                        "target": d.signal.target,
                        "reason": d.signal.reason,
                        "inputs": d.inputs,
                    }
                    for d in new
                ],
            )
        )
    for d in new:
        sig = d.signal
        run.decisions.append(
            decision_record(
                t, d.host, flag=sig.flag, target=sig.target, vm=sig.vm, reason=sig.reason
            )
        )


def _world_columns(offered_bps: float, resp_s: float, kind: int) -> tuple[float, float | None]:
    """A VM's timeline columns only the world knows: offered Mbit/s, and the response time
    in ms of a request-serving VM (kind 2; others have none)."""
    return offered_bps / 1e6, resp_s * 1000 if kind == 2 else None


@contextmanager
def _no_cycle_scans() -> Iterator[None]:
    """Run without the cyclic garbage collector's automatic passes, restored after.

    A run keeps what it records (timeline rows, events) and allocates millions of
    short-lived objects that reference counting frees; the collector's passes found almost
    no cycles (about a thousand objects in a 300 s run of 1,000 hosts) but rescanned the
    growing records over and over: about a fifth of the run's CPU time. One full pass at
    the end collects whatever cycles the run made. The objects that were there before
    the run (the world's construction: a model per VM, the scenario) are set aside from
    that pass (``gc.freeze``, undone after it) unless something else in the process froze
    objects already: scanning them was most of the pass (0.09 of 0.12 CPU-s at 1,000 x 20).
    """
    was = gc.isenabled()
    gc.disable()
    freeze = was and gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    try:
        yield
    finally:
        if was:
            gc.enable()
            gc.collect()
        if freeze:
            gc.unfreeze()


def p99_from_hist(hist: np.ndarray) -> float | None:
    """99th percentile of response times from per-(VM, tick) means.

    Each bin holds requests whose tick mean fell in it; inside a tick response times are
    taken as exponential around that mean (an M/M/1 sojourn), so the tail is the mixture's.
    """
    total = hist.sum()
    if total <= 0:
        return None
    centers = np.sqrt(RESP_BINS[:-1] * RESP_BINS[1:])
    wts = hist / total
    lo, hi = 0.0, float(centers[-1]) * 10
    for _ in range(100):
        mid = (lo + hi) / 2
        tail = float((wts * np.exp(-mid / centers)).sum())
        lo, hi = (mid, hi) if tail > 0.01 else (lo, mid)
    return hi
