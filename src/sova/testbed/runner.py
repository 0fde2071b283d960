"""Run a testbed scenario: once per compared policy, on a freshly built testbed each time.

Every run gets a new topology (so no qdisc, route or counter of one policy leaks into the
next), the same agent code as on a real host (:class:`~sova.agent.loop.HostAgent` over
the :class:`~sova.testbed.netns_driver.NetnsDriver`), and the same traffic schedule. The loop is
driven by the wall clock (:class:`~sova.clock.RealtimeEnvironment`): the agent takes its
turns from the same phase schedule as in every world (:mod:`sova.agent.schedule`) at
100 ms ticks — ``poll`` each tick, ``bandwidth`` every bandwidth period (DAQS: its
published 200 ms), ``step`` every VF-scheduling period — and between them the clock runs
the testbed's own events: ``measure`` every second from t = 0 (kernel counters -> one row
per VM) and the scenario's flow starts and stops.

Time 0 is when traffic may start; the agent runs ``warmup`` seconds before it so that its
rate meter has a baseline. Whatever happens, ``finally`` stops every process and removes
every namespace of the run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from sova.agent.config import ControllerConfig
from sova.agent.executor import Outcome
from sova.agent.loop import HostAgent
from sova.agent.schedule import PhaseSchedule, act
from sova.clock import RealtimeEnvironment
from sova.model import HostSample, NicKind
from sova.policy.bandwidth import DaqsController
from sova.policy.metering import RateMeter
from sova.record import RunRecord, measured_rates, measured_row, outcome_event
from sova.testbed.netns_driver import LimitSide, NetnsDriver
from sova.testbed.probing import RealTrafficAllocator
from sova.testbed.scenario import RunSpec, TestbedScenario
from sova.testbed.topology import Topology, exclusive, teardown
from sova.testbed.traffic import GapRecorder, SinkMeter, Traffic

POLL_S = 0.1
SWITCH_WINDOW_S = 2.0  # look this far around a VF switch for a connectivity break


@dataclass(frozen=True)
class TestbedRow:
    """One VM over one second of one run, as the kernel counted it."""

    __test__ = False  # not a pytest test class, despite the name

    policy: str
    time_s: float
    vm: str
    nic: str
    limit_mbps: float | None  # the rate limit the policy set (guest or host side)
    vf_rate_mbps: float | None  # the VF's max_tx_rate tier
    delivered_mbps: float  # at the sink, wire bytes
    tx_mbps: float  # what left the VM's paths, host side
    offered_mbps: float  # the scenario's offered load over the whole second
    guarantee_mbps: float
    cpu_usage: float


@dataclass(frozen=True)
class SwitchCheck:
    policy: str
    time_s: float
    vm: str
    event: str
    ping_gap_s: float | None  # longest time without an echo reply around the switch
    tcp_gap_s: float | None  # longest time without delivered bytes (VM had a flow)


@dataclass
class TestbedRun:
    __test__ = False  # not a pytest test class, despite the name

    spec: RunSpec
    run: RunRecord
    rows: list[TestbedRow] = field(default_factory=list)
    switches: list[SwitchCheck] = field(default_factory=list)
    host_cpu: float = 0.0  # mean busy share of all cores
    relay_cpu_s: float = 0.0  # CPU seconds the virtio backend used


def agent_config(scn: TestbedScenario, spec: RunSpec) -> ControllerConfig:
    c = scn.controller
    bw_period = c.daqs_period if spec.bandwidth_policy == "daqs" else c.bandwidth_period
    return c.model_copy(
        update={
            "vf_policy": spec.vf_policy,
            "bandwidth_policy": spec.bandwidth_policy,
            "bandwidth_period": bw_period,
            "op_timeout": scn.profile.op_timeout,
            "static_caps": scn.static_caps_for(spec.variant),
        }
    )


def install_allocator(agent: HostAgent, scn: TestbedScenario, spec: RunSpec) -> None:
    """Scale DAQS to this link; give rate-fed allocators real-traffic demand estimation."""
    c = scn.controller
    link = scn.link.capacity
    if spec.bandwidth_policy == "daqs":
        # DAQS's thresholds are absolute Gbit/s for a 40 GbE port; scaled by link ratio so
        # its controller behaves on 1 Gbit/s as it did there (0.3 Gbit/s step -> 0.75 %).
        k = link / c.daqs_reference_link
        agent.allocator = DaqsController(
            period_s=c.daqs_period,
            step_bps=0.3e9 * k,
            active_bps=1.0e9 * k,
            floor_bps=1.0e9 * k,
            marginal_offset_bps=1.15e9 * k,
        )
    elif spec.bandwidth_policy in ("sova", "dba-vm", "equal-share") and agent.allocator:
        meter = RateMeter()

        def rates() -> dict[str, float]:
            return {vm: bps for vm, (bps, _) in meter.observe(agent.driver.sample()).items()}

        agent.allocator = RealTrafficAllocator(
            agent.allocator,
            probe=c.probe,
            floor_fraction=c.probe_floor,
            limits=agent.limits,
            active_bps=max(c.sensing.traffic_threshold, 1e-3 * link),
            rates=rates,
        )


def run_policy(
    scn: TestbedScenario,
    spec: RunSpec,
    prefix: str,
    log_dir: Path,
    progress: Callable[[str], None] | None = None,
) -> TestbedRun:
    topo = Topology(scn, prefix)
    topo.up()
    out = TestbedRun(spec, RunRecord(spec.label))
    vms = scn.model_vms(spec.variant)
    limit_side: LimitSide = "guest" if spec.bandwidth_policy == "daqs" else "host"
    driver = NetnsDriver(
        topo,
        vms,
        scn.model_host(),
        limit_side=limit_side,
        hotplug_attach_s=scn.profile.hotplug_attach,
        hotplug_detach_s=scn.profile.hotplug_detach,
        op_timeout_s=scn.profile.op_timeout,
    )
    traffic = Traffic(topo, scn, log_dir / spec.label.replace("@", "-"))
    meter = SinkMeter(topo)
    gaps = GapRecorder(topo, scn.probes.gap_resolution) if scn.probes.gap_resolution else None
    epoch = [time.monotonic()]  # wall-clock time of t = 0; fixed once traffic is ready
    switches: list[tuple[float, str, str]] = []

    def run_time(driver_t: float) -> float:
        return driver_t + driver.epoch - epoch[0]

    def log(o: Outcome) -> None:
        ev = outcome_event(
            o, policy=spec.label, host="testbed", time_s=run_time(o.time_s), rate_limits=True
        )
        assert ev is not None  # rate_limits=True: every outcome is an event here
        out.run.events.append(ev)
        if ev.event in ("vf_attach", "vf_detach"):
            switches.append((ev.time_s, ev.vm, ev.event))

    relay_before = _relay_cpu(topo)
    cpu_before = _busy_idle()
    try:
        for v in scn.vms:
            if v.vf:
                driver.attach_now(v.name)
        agent = HostAgent(driver, agent_config(scn, spec), on_outcome=log)
        install_allocator(agent, scn, spec)
        traffic.start_servers()
        if scn.probes.ping_interval:
            traffic.start_pings(scn.probes.ping_interval)
        if gaps is not None:
            gaps.start()
        start = time.monotonic()
        epoch[0] = start + scn.warmup
        _loop(scn, spec, agent, driver, traffic, meter, out, epoch[0], start, progress)
    finally:
        traffic.stop_all()
        if gaps is not None:
            gaps.stop()
        out.relay_cpu_s = max(0.0, _relay_cpu(topo) - relay_before)
        out.host_cpu = _busy_share(cpu_before, _busy_idle())
        meter.close()
        driver.close()
        teardown(prefix)
    out.switches = _check_switches(scn, spec, switches, traffic, gaps, epoch[0])
    return out


def _loop(
    scn: TestbedScenario,
    spec: RunSpec,
    agent: HostAgent,
    driver: NetnsDriver,
    traffic: Traffic,
    meter: SinkMeter,
    out: TestbedRun,
    t0: float,
    start: float,
    progress: Callable[[str], None] | None,
) -> None:
    # The loop's clock reads 0 at ``start``; traffic's time 0 (``t0``) is after the warm-up.
    env = RealtimeEnvironment(time.monotonic() - start)
    warmup = t0 - start
    last = [(time.monotonic(), meter.read(), driver.sample())]

    def at(t: float, fn: Callable[[], None]) -> None:
        env.schedule(max(0.0, t - env.now), fn)

    def measure(n: int) -> None:
        last[0] = _measure(scn, spec, agent, driver, meter, out, float(n), last[0])
        if progress is not None:
            progress(_progress_line(spec.label, out, n, scn.duration))
        if n < int(scn.duration):
            at(warmup + n + 1.0, lambda: measure(n + 1))

    at(warmup + 1.0, lambda: measure(1))
    for k, f in enumerate(scn.traffic):
        at(
            warmup + f.start,
            partial(traffic.start_flow, k, f, scn.duration if f.stop is None else f.stop),
        )
        if f.stop is not None:
            at(warmup + f.stop, partial(traffic.stop_flow, k))
    bw = agent.config.bandwidth_period if agent.allocator is not None else None
    schedule = PhaseSchedule(POLL_S, scn.controller.period, bw)
    end = warmup + scn.duration + 1e-3
    for _, phases in schedule.turns(env, until=end):
        for phase in phases:
            act(agent, phase)
    env.run(until=end)  # what is due after the last tick: the final measurement


def _measure(
    scn: TestbedScenario,
    spec: RunSpec,
    agent: HostAgent,
    driver: NetnsDriver,
    meter: SinkMeter,
    out: TestbedRun,
    t: float,
    last: tuple[float, dict[str, int], HostSample],
) -> tuple[float, dict[str, int], HostSample]:
    now = time.monotonic()
    delivered = meter.read()
    sample = driver.sample()
    inv = driver.inventory()
    t_prev, d_prev, s_prev = last
    dt = max(1e-3, now - t_prev)
    factors = agent.sensor.factors()
    prev_vms = s_prev.vms
    for name, state in sorted(inv.vms.items()):
        c, p = sample.vms[name], prev_vms.get(name)
        tx, rx, cpu = measured_rates(p, c, dt)
        got = max(0, delivered[name] - d_prev.get(name, 0)) * 8 / dt / 1e6
        offered = scn.offered_bps(name, t - 1.0, t) / 1e6
        on_vf = state.nic is NicKind.VF
        vf_rate = state.vf_max_bps / 1e6 if on_vf and state.vf_max_bps else None
        limit = state.guest_limit_bps / 1e6 if state.guest_limit_bps is not None else None
        f = factors.get(name)
        out.rows.append(
            TestbedRow(
                policy=spec.label,
                time_s=t,
                vm=name,
                nic=state.nic.value,
                limit_mbps=limit,
                vf_rate_mbps=vf_rate,
                delivered_mbps=got,
                tx_mbps=tx,
                offered_mbps=offered,
                guarantee_mbps=state.vm.sla.bandwidth.minimum / 1e6,
                cpu_usage=min(1.0, cpu),
            )
        )
        out.run.timeline.append(
            measured_row(
                policy=spec.label,
                time_s=t,
                host="testbed",
                vm=name,
                state=state,
                tx_mbps=tx,
                rx_mbps=rx,
                cpu_usage=cpu,
                factors=f,
                offered_mbps=offered,
                limit_mbps=limit,
            )
        )
    return now, delivered, sample


def _progress_line(label: str, out: TestbedRun, t: int, duration: float) -> str:
    rows = [r for r in out.rows if r.time_s == t]
    parts = []
    for r in rows:
        tag = "VF" if r.nic == "vf" else "vio"
        lim = f" cap {r.limit_mbps:.0f}" if r.limit_mbps is not None else ""
        parts.append(f"{r.vm}[{tag}] {r.delivered_mbps:6.1f}{lim}")
    total = sum(r.delivered_mbps for r in rows)
    return f"{label:>22} t={t:3d}/{duration:g}s total {total:6.1f} Mbit/s | " + "  ".join(parts)


def _check_switches(
    scn: TestbedScenario,
    spec: RunSpec,
    switches: list[tuple[float, str, str]],
    traffic: Traffic,
    gaps: GapRecorder | None,
    t0: float,
) -> list[SwitchCheck]:
    """Connectivity around every VF switch: longest ping silence and TCP stall."""
    wall0 = time.time() - (time.monotonic() - t0)  # ping stamps are wall-clock
    out = []
    for t, vm, event in switches:
        lo, hi = t - SWITCH_WINDOW_S, t + SWITCH_WINDOW_S
        ping_gap = None
        replies = [ts - wall0 for ts, _ in traffic.ping_replies(vm)]
        inside = [x for x in replies if lo <= x <= hi]
        if scn.probes.ping_interval and replies:
            before = [x for x in replies if x < lo]
            after = [x for x in replies if x > hi]
            pts = ([before[-1]] if before else []) + inside + ([after[0]] if after else [])
            if len(pts) >= 2:
                ping_gap = max(b - a for a, b in zip(pts, pts[1:], strict=False))
        tcp_gap = None
        has_flow = scn.offered_bps(vm, max(0.0, lo), min(scn.duration, hi)) > 0
        if gaps is not None and has_flow:
            tcp_gap = gaps.longest_gap(vm, t0 + lo, t0 + hi)
        out.append(SwitchCheck(spec.label, t, vm, event, ping_gap, tcp_gap))
    return out


def _relay_cpu(topo: Topology) -> float:
    import os

    total = 0.0
    for pid in topo.relay_pids():
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _busy_idle() -> tuple[int, int]:
    with open("/proc/stat") as fh:
        f = [int(x) for x in fh.readline().split()[1:9]]
    idle = f[3] + f[4]
    return sum(f) - idle, idle


def _busy_share(a: tuple[int, int], b: tuple[int, int]) -> float:
    busy, idle = b[0] - a[0], b[1] - a[1]
    return busy / (busy + idle) if busy + idle > 0 else 0.0


def run_scenario(
    scn: TestbedScenario,
    prefix: str,
    log_dir: Path,
    progress: Callable[[str], None] | None = None,
    only: list[str] | None = None,
) -> list[TestbedRun]:
    """Every (variant, policy) run in order, one testbed at a time."""
    runs = []
    with exclusive(prefix):
        try:
            for spec in scn.runs():
                if only and spec.policy not in only:
                    continue
                if progress is not None:
                    progress(f"--- {scn.name}: {spec.label} ---")
                runs.append(run_policy(scn, spec, prefix, log_dir, progress))
        finally:
            teardown(prefix)
    return runs
