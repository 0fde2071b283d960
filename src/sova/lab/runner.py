"""``sova lab run``: one lab scenario against the lab that ``sova lab up`` left running.

The controller is the production one — :class:`~sova.agent.loop.HostAgent` over
:class:`~sova.driver.libvirt_driver.LibvirtDriver` with the ``lab-nic`` fast path and the
``guest-bond`` failover — acting on HV1's real guests while their own iperf3 and CPU
burners, started through the guest agent, change in phases. Each phase states which guests
must hold the fast slots, and the same policy run on the same phases in the simulator says
which it would give them to (:mod:`sova.lab_simulated`); the run checks the lab's holders
against both, the largest ping gap seen from outside, and that no guest's TCP stream
(iperf3) broke. The other experiments: :mod:`sova.lab.hotspot`, :mod:`sova.lab.guarantee`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sova.agent.config import ControllerConfig
from sova.agent.executor import Outcome
from sova.agent.loop import HostAgent
from sova.driver.libvirt_driver import LibvirtDriver
from sova.lab.lab import connect, load_state, shape_backups
from sova.lab.loads import Loads, Peer, ping_gaps
from sova.lab.scenario import LabScenario, Phase
from sova.lab.settings import LAB_HOTPLUG, LAB_MAX_GUESTS, LabSettings
from sova.model import DetachVF, NicKind
from sova.record import EventRow, TimelineRow, measured_rates, measured_row, outcome_event

POLL_S = 0.5
HOST = "HV1"


class LabRunError(RuntimeError):
    pass


@dataclass
class PhaseResult:
    name: str
    start_s: float
    end_s: float
    expected: list[str]
    holders: list[str]
    ok: bool
    simulated: list[str] | None = None  # what the same policy decides in the simulator


@dataclass
class LabRun:
    label: str
    timeline: list[TimelineRow] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)
    phases: list[PhaseResult] = field(default_factory=list)
    ping: dict[str, dict[str, float]] = field(default_factory=dict)
    streams: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # what one experiment alone measures


def driver_settings(s: LabSettings, scn: LabScenario, host: str) -> dict[str, Any]:
    """What each lab host's LibvirtDriver is configured with (also written for `sova agent`)."""
    return {
        "host_name": host,
        "fast_path": "lab-nic",
        "failover": "guest-bond",
        "lab_nic_bridge": s.fast_bridge,
        "lab_nic_taps": tuple(s.fast_tap(host, i) for i in range(scn.fast_slots)),
        "lab_nic_speed_mbit": int(scn.tier_mbit * scn.fast_slots),
        "migration_uri_template": s.uri_template(),
        "migration_unsafe": True,
        **LAB_HOTPLUG,
    }


def agent_config(scn: LabScenario) -> ControllerConfig:
    """The scenario's controller; top-q keeps every guest in the ranking."""
    c = scn.controller
    if c.scheduler.io_filter == "top-q" and c.scheduler.top_q == 0:
        c = c.model_copy(
            update={"scheduler": c.scheduler.model_copy(update={"top_q": LAB_MAX_GUESTS})}
        )
    return c


def run_scenario(
    s: LabSettings,
    scn: LabScenario,
    log_dir: Path,
    say: Callable[[str], None] = print,
    simulated: list[list[str]] | None = None,
) -> LabRun:
    """``simulated``: the holders per phase the same policy gives in the simulator
    (:mod:`sova.lab_simulated`, composed by the command line: a world does not import
    another); None checks the scenario's own list only."""
    st = load_state(s)
    if st is None:
        raise LabRunError("no lab is up: run `sova lab up` first")
    need = {f"g{n}" for n in range(1, scn.guests + 1)}
    _gather_guests(s, scn, set(st.guests), need, say)
    log_dir.mkdir(parents=True, exist_ok=True)
    label = "dsr-iov"
    out = LabRun(label)
    if simulated is not None:
        say(f"simulator, same policy and phases: holders per phase {simulated}")
    drv = LibvirtDriver.open(s.uri(HOST), **driver_settings(s, scn, HOST))
    out.notes.extend(drv.capabilities().notes)
    conn = connect(s, HOST)
    _check_running(drv, conn, need)
    doms = {g: conn.lookupByName(g) for g in sorted(need)}
    assert drv._agent is not None
    loads = Loads(s, drv._agent)
    peer = Peer(s, log_dir)
    t_wall0 = time.time()
    t0 = time.monotonic()

    def now() -> float:
        return round(time.monotonic() - t0, 3)

    def log(o: Outcome) -> None:
        ev = outcome_event(o, policy=label, host=HOST, time_s=now())
        if ev is not None:
            out.events.append(ev)
            say(f"t={ev.time_s:6.1f} {ev.event} {ev.vm}: {ev.detail}")

    agent = HostAgent(drv, agent_config(scn), on_outcome=log)
    shaped = shape_backups(s, scn.slow_mbit * 1e6)
    out.notes.append(f"slow path: {len(shaped)} backup taps shaped to {scn.slow_mbit:g} Mbit/s")
    try:
        _detach_all(drv)
        peer.servers(scn.guests)
        time.sleep(0.5)
        peer.pings(scn.guests, scn.ping_interval_s, scn.duration_s + 10)
        t_phase = 0.0
        last_sample = drv.sample()
        last_t = time.monotonic()
        for i, ph in enumerate(scn.phases):
            start = now()
            say(f"t={start:6.1f} phase {ph.name}: {ph.loads}")
            loads.start_phase(scn.phases, i, doms.__getitem__, scn.net_mbit)
            end = t_phase + ph.duration_s
            last_sample, last_t = _run_phase(
                drv, agent, scn.controller.period, out, label, now, end, last_sample, last_t
            )
            sim = simulated[i] if simulated is not None else None
            _end_phase(drv, ph, start, sim, out, now, say)
            t_phase = end
        time.sleep(3.0)  # let the last iperf3 report and exit
        loads.finish(doms)
    finally:
        peer.stop()
        drv.close()
        conn.close()
    t_wall1 = time.time()
    for g, path in sorted(peer.ping_logs.items()):
        out.ping[g] = ping_gaps(path, t_wall0 + 2.0, t_wall1 - 5.0, scn.ping_interval_s)
    stream_exits(out, loads)
    return out


def stream_exits(out: LabRun, loads: Loads) -> None:
    """Each network load's exit code and the tail of its stderr, into ``out``."""
    for j in loads.jobs:
        if j.load == "net":
            out.streams.append(
                {"guest": j.guest, "exitcode": j.exitcode, "stderr": j.stderr.strip()[-200:]}
            )


def _check_running(drv: LibvirtDriver, conn: Any, need: set[str]) -> None:
    """Every guest the scenario needs runs on the source host; else both connections are
    closed and the run refused."""
    on_hv1 = {d.name() for d in conn.listAllDomains(1)}  # VIR_CONNECT_LIST_DOMAINS_ACTIVE
    if not need <= on_hv1:
        missing = ", ".join(sorted(need - on_hv1))
        drv.close()
        conn.close()
        raise LabRunError(
            f"guest(s) {missing} not running on {HOST} (migrated away?): "
            "`sova lab down && sova lab up` restores the lab"
        )


def _gather_guests(
    s: LabSettings, scn: LabScenario, guests: set[str], need: set[str], say: Callable[[str], None]
) -> None:
    """The scenario's guests back on the source host; refused when the lab lacks some."""
    from sova.lab.placement import PlacementError, gather_on_source

    if need <= guests:
        try:
            gather_on_source(s, scn, need, say)  # a guest an earlier run left on HV2
        except PlacementError as e:
            raise LabRunError(str(e)) from None
    if not need <= guests:
        raise LabRunError(
            f"the lab has guests {sorted(guests)}, the scenario needs {sorted(need)} "
            f"(sova lab up --guests {scn.guests})"
        )


def _detach_all(drv: LibvirtDriver) -> None:
    """Start clean: nobody holds a fast slot (a previous run may have left some)."""
    for g, vm in drv.inventory().vms.items():
        if vm.nic is NicKind.VF:
            op = drv.submit(DetachVF(g))
            while not drv.poll(op).done:
                time.sleep(0.2)


def _run_phase(
    drv: LibvirtDriver,
    agent: HostAgent,
    period: float,
    out: LabRun,
    label: str,
    now: Callable[[], float],
    end: float,
    last_sample: Any,
    last_t: float,
) -> tuple[Any, float]:
    """One phase: the agent's turns on its period, a measurement every second, until
    ``end``; returns the last sample and when it was read (the next phase's start)."""
    next_step = time.monotonic()
    next_measure = time.monotonic() + 1.0
    while now() < end:
        agent.poll()
        if time.monotonic() >= next_step:
            agent.step()
            next_step += period
        if time.monotonic() >= next_measure:
            last_sample, last_t = _measure(drv, agent, out, label, now(), last_sample, last_t)
            next_measure += 1.0
        time.sleep(POLL_S)
    return last_sample, last_t


def _end_phase(
    drv: LibvirtDriver,
    ph: Phase,
    start: float,
    sim: list[str] | None,
    out: LabRun,
    now: Callable[[], float],
    say: Callable[[str], None],
) -> None:
    """The phase's VF holders against the expected ones (and the simulator's)."""
    holders = sorted(g for g, v in drv.inventory().vms.items() if v.nic is NicKind.VF)
    ok = holders == sorted(ph.expect_holders) and (sim is None or holders == sim)
    out.phases.append(
        PhaseResult(ph.name, start, now(), sorted(ph.expect_holders), holders, ok, sim)
    )
    say(
        f"t={now():6.1f} phase {ph.name} ends: holders {holders}, expected "
        f"{sorted(ph.expect_holders)}, simulated {sim} {'ok' if ok else 'MISMATCH'}"
    )


def _measure(
    drv: LibvirtDriver,
    agent: HostAgent,
    out: LabRun,
    label: str,
    t: float,
    prev: Any,
    prev_t: float,
) -> tuple[Any, float]:
    sample = drv.sample()
    inv = drv.inventory()
    now = time.monotonic()
    dt = max(1e-3, now - prev_t)
    factors = agent.sensor.factors()
    for name, state in sorted(inv.vms.items()):
        c, p = sample.vms.get(name), prev.vms.get(name)
        if c is None:
            continue
        tx, rx, cpu = measured_rates(p, c, dt)
        f = factors.get(name)
        out.timeline.append(
            measured_row(
                policy=label,
                time_s=t,
                host=HOST,
                vm=name,
                state=state,
                tx_mbps=tx,
                rx_mbps=rx,
                cpu_usage=cpu,
                factors=f,
            )
        )
    return sample, now
