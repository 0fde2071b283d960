"""Run a testbed scenario: once per compared policy, on a freshly built testbed each time.

Every run gets a new topology (so no qdisc, route or counter of one policy leaks into the
next), the same agent code as on a real host (:class:`~sova.agent.loop.HostAgent` over
the :class:`~sova.driver.netns.NetnsDriver`), and the same traffic schedule. The loop is
driven by the wall clock: between events it sleeps; events are

* ``poll`` every 100 ms (collect finished operations, use a freed VF at once),
* ``bandwidth`` every bandwidth period (DAQS: its published 200 ms),
* ``step`` every VF-scheduling period,
* ``measure`` every second from t = 0: kernel counters -> one row per VM,
* flow starts and stops from the scenario.

Time 0 is when traffic may start; the agent runs ``warmup`` seconds before it so that its
rate meter has a baseline. Whatever happens, ``finally`` stops every process and removes
every namespace of the run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sova.agent.config import ControllerConfig
from sova.agent.executor import EVENT_KIND, Outcome
from sova.agent.loop import HostAgent
from sova.driver.netns import LimitSide, NetnsDriver
from sova.model import (
    AttachVF,
    HostSample,
    NicKind,
    SetGuestRateLimit,
    SetVFRate,
)
from sova.policy.bandwidth import DaqsController
from sova.policy.sensing import RateMeter
from sova.sim.runner import EventRow, PolicyRun, TimelineRow
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
    run: PolicyRun
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
    out = TestbedRun(spec, PolicyRun(spec.label))
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
        kind = EVENT_KIND.get(type(o.action), o.action.kind)
        event = kind if o.result == "succeeded" else f"{kind}_{o.result}"
        detail = o.detail
        a = o.action
        if isinstance(a, AttachVF | SetVFRate) and a.max_bps:
            detail = (detail + "; " if detail else "") + f"rate {a.max_bps / 1e6:.0f} Mbit/s"
        if isinstance(a, SetGuestRateLimit):
            limit = "none" if a.rate_bps is None else f"{a.rate_bps / 1e6:.1f} Mbit/s"
            detail = (detail + "; " if detail else "") + f"limit {limit}"
        t = round(run_time(o.time_s), 3)
        out.run.events.append(EventRow(spec.label, t, event, a.vm, "testbed", "", detail))
        if event in ("vf_attach", "vf_detach"):
            switches.append((t, a.vm, event))

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
    end = t0 + scn.duration
    seq = itertools.count()
    heap: list[tuple[float, int, str, int]] = []

    def at(t: float, kind: str, arg: int = 0) -> None:
        heapq.heappush(heap, (t, next(seq), kind, arg))

    bw_period = agent.config.bandwidth_period
    at(start + POLL_S, "poll")
    if agent.allocator is not None:
        at(start + bw_period, "bandwidth")
    at(start + scn.controller.period, "step")
    at(t0 + 1.0, "measure", 1)
    for k, f in enumerate(scn.traffic):
        at(t0 + f.start, "start", k)
        if f.stop is not None:
            at(t0 + f.stop, "stop", k)
    at(end + 1e-3, "end")

    last = (time.monotonic(), meter.read(), driver.sample())
    while heap:
        due, _, kind, arg = heapq.heappop(heap)
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if kind == "end":
            return
        if kind == "poll":
            agent.poll()
            at(due + POLL_S, "poll")
        elif kind == "bandwidth":
            agent.bandwidth_step()
            at(due + bw_period, "bandwidth")
        elif kind == "step":
            agent.step()
            at(due + scn.controller.period, "step")
        elif kind == "start":
            f = scn.traffic[arg]
            traffic.start_flow(arg, f, scn.duration if f.stop is None else f.stop)
        elif kind == "stop":
            traffic.stop_flow(arg)
        elif kind == "measure":
            last = _measure(scn, spec, agent, driver, meter, out, float(arg), last)
            if progress is not None:
                progress(_progress_line(spec.label, out, arg, scn.duration))
            if arg < int(scn.duration):
                at(t0 + arg + 1.0, "measure", arg + 1)


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
        tx = max(0, c.tx_bytes - p.tx_bytes) * 8 / dt / 1e6 if p else 0.0
        rx = max(0, c.rx_bytes - p.rx_bytes) * 8 / dt / 1e6 if p else 0.0
        cpu = max(0, c.cpu_time_ns - p.cpu_time_ns) / (dt * 1e9 * c.vcpus) if p else 0.0
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
            _timeline_row(
                policy=spec.label,
                time_s=t,
                host="testbed",
                vm=name,
                nic=state.nic.value,
                vf_rate_mbps=vf_rate,
                tx_mbps=tx,
                rx_mbps=rx,
                cpu_usage=min(1.0, cpu),
                io_degree=f.io_degree if f else 100.0,
                net_factor=f.net_factor if f else 0.0,
                net_degree=f.net_degree if f else 0.0,
                io_factor=f.io_factor if f else 0.0,
                offered_mbps=offered,
                limit_mbps=limit,
            )
        )
    return now, delivered, sample


def _timeline_row(**values: object) -> TimelineRow:
    """A standard timeline row; columns this world does not measure stay empty."""
    for f in dataclasses.fields(TimelineRow):
        values.setdefault(f.name, None)
    return TimelineRow(**values)  # type: ignore[arg-type]


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
