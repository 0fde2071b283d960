"""``sova lab run`` of a guarantee scenario: a DAQS-style minimum held on a real bottleneck.

Every guest sends to the peer namespace through one link the host shapes (HTB both ways
on the peer's veth: the shared uplink). A guest's minimum is declared where an operator
declares it, in its domain's ``<metadata>`` (``sova:sla min_bps``). Each phase runs the
production :class:`~sova.agent.loop.HostAgent` over ``LibvirtDriver`` with the scenario's
bandwidth policy, its limits reaching the guests one way:

* ``guest-side``: HTB inside the guests, applied through the real guest agent
  (``guest-exec``, exit status checked) — DAQS's place for it;
* ``host-side``: the same driver without a guest agent, so HTB on the guests' taps
  (never libvirt ``<bandwidth>``, which this kernel cannot run);
* ``none``: no bandwidth controller, the baseline in which TCP shares the link and the
  minimum is not held.

What each guest achieved is what its own iperf3 measured each second (``-J``), read back
through the guest agent when the stream ends.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sova.agent.config import ControllerConfig
from sova.agent.executor import Outcome
from sova.agent.loop import HostAgent
from sova.driver.libvirt_driver import LibvirtDriver
from sova.driver.libvirt_driver.tap_shaping import TapShaper
from sova.driver.libvirt_xml import SOVA_METADATA_NS
from sova.lab.lab import connect, load_state, shape_backups
from sova.lab.loads import GuestJob, Loads, Peer
from sova.lab.placement import SOURCE, PlacementError, gather_on_source, unplug_all
from sova.lab.runner import (
    LabRun,
    LabRunError,
    PhaseResult,
    _measure,
    agent_config,
    driver_settings,
    stream_exits,
)
from sova.lab.scenario import LabScenario
from sova.lab.settings import LabSettings
from sova.model import SetGuestRateLimit
from sova.record import outcome_event

HOST = SOURCE


def _declare_minimums(s: LabSettings, scn: LabScenario, doms: dict[str, Any]) -> None:
    """Each guest's ``<sova:sla min_bps>`` as the scenario gives it (removed for others)."""
    import libvirt

    flags = libvirt.VIR_DOMAIN_AFFECT_LIVE
    for g, dom in sorted(doms.items()):
        mbit = scn.guarantee.min_mbit.get(g)
        if mbit:
            dom.setMetadata(
                libvirt.VIR_DOMAIN_METADATA_ELEMENT,
                f"<sla min_bps='{int(mbit * 1e6)}'/>",
                "sova",
                SOVA_METADATA_NS,
                flags,
            )
        else:
            dom.setMetadata(
                libvirt.VIR_DOMAIN_METADATA_ELEMENT, None, None, SOVA_METADATA_NS, flags
            )


def iperf_seconds(job: GuestJob, t0: float) -> list[tuple[float, float]]:
    """(run time at the interval's end, Mbit/s) for each second iperf3 -J reported."""
    try:
        data = json.loads(job.stdout)
    except ValueError:
        return []
    out = []
    for iv in data.get("intervals", []):
        s = iv.get("sum", {})
        if "end" in s and "bits_per_second" in s:
            out.append((job.started_s - t0 + float(s["end"]), float(s["bits_per_second"]) / 1e6))
    return out


def run_guarantee(
    s: LabSettings, scn: LabScenario, log_dir: Path, say: Callable[[str], None] = print
) -> LabRun:
    if load_state(s) is None:
        raise LabRunError("no lab is up: run `sova lab up` first")
    need = {f"g{n}" for n in range(1, scn.guests + 1)}
    try:
        gather_on_source(s, scn, need, say)
    except PlacementError as e:
        raise LabRunError(str(e)) from None
    unplug_all(s, scn, say)
    log_dir.mkdir(parents=True, exist_ok=True)
    label = scn.controller.bandwidth_policy
    out = LabRun(label)
    conn = connect(s, HOST)
    doms = {g: conn.lookupByName(g) for g in sorted(need)}
    _declare_minimums(s, scn, doms)
    shape_backups(s, scn.slow_mbit * 1e6)
    link = TapShaper(f"{s.prefix}-peer", ifb=f"{s.prefix}ipeer")
    out.notes.append(link.apply(scn.guarantee.link_mbit * 1e6) + " (the shared link)")
    settings = driver_settings(s, scn, HOST) | {
        "lab_nic_speed_mbit": int(scn.guarantee.capacity)  # the capacity the policy divides
    }
    with_agent = LibvirtDriver.open(s.uri(HOST), **settings)
    bare = LibvirtDriver(with_agent.config)  # no guest agent: limits go on the host side
    ga = with_agent._agent
    assert ga is not None  # LibvirtDriver.open gives every driver a guest agent
    loads = Loads(s, ga, iperf_json=True)
    peer = Peer(s, log_dir)
    out.notes.extend(with_agent.capabilities().notes)
    t0 = time.monotonic()

    def now() -> float:
        return round(time.monotonic() - t0, 3)

    def log(o: Outcome) -> None:
        ev = outcome_event(o, policy=label, host=HOST, time_s=now(), rate_limits=True)
        if ev is not None:
            out.events.append(ev)
            say(f"t={ev.time_s:6.1f} {ev.event} {ev.vm}: {ev.detail}")

    try:
        peer.servers(scn.guests)
        time.sleep(0.5)
        t_phase = 0.0
        for i, ph in enumerate(scn.phases):
            drv = bare if ph.guarantee == "host-side" else with_agent
            cfg = agent_config(scn).model_copy(
                update={
                    "vf_policy": "default",  # every guest on virtio: the link is the point
                    "bandwidth_policy": "none" if ph.guarantee == "none" else label,
                }
            )
            agent = HostAgent(drv, cfg, on_outcome=log)
            start = now()
            say(f"t={start:6.1f} phase {ph.name} ({ph.guarantee}): {ph.loads}")
            loads.start_phase(scn.phases, i, doms.__getitem__, scn.net_mbit, scn.net_streams)
            end = t_phase + ph.duration_s
            _run_phase(drv, agent, cfg, out, label, now, end)
            _lift_limits(drv, agent, say)
            if ph.guarantee == "host-side":
                shape_backups(s, scn.slow_mbit * 1e6)  # the lab's slow-path cap, as before
            out.phases.append(PhaseResult(ph.name, start, now(), [], [], True))
            t_phase = end
        time.sleep(3.0)
        loads.finish(doms)
    finally:
        peer.stop()
        link.remove()
        shape_backups(s, scn.slow_mbit * 1e6)
        bare.close()
        with_agent.close()
        conn.close()
    _record_streams(scn, out, loads, t0)
    return out


def _run_phase(
    drv: LibvirtDriver,
    agent: HostAgent,
    cfg: ControllerConfig,
    out: LabRun,
    label: str,
    now: Callable[[], float],
    end: float,
) -> None:
    """One phase: the agent's turns and bandwidth steps on their periods, a measurement
    every second, until ``end``."""
    next_step = next_bw = time.monotonic()
    next_measure = time.monotonic() + 1.0
    last_sample, last_t = drv.sample(), time.monotonic()
    while now() < end:
        agent.poll()
        if time.monotonic() >= next_step:
            agent.step()
            next_step += cfg.period
        if cfg.bandwidth_policy != "none" and time.monotonic() >= next_bw:
            agent.bandwidth_step()
            next_bw += cfg.bandwidth_period
        if time.monotonic() >= next_measure:
            last_sample, last_t = _measure(drv, agent, out, label, now(), last_sample, last_t)
            next_measure += 1.0
        time.sleep(0.1)


def _record_streams(scn: LabScenario, out: LabRun, loads: Loads, t0: float) -> None:
    """The iperf streams' exits, their per-second goodput, and the guarantee's verdict."""
    stream_exits(out, loads)
    per_second = {j.guest: iperf_seconds(j, t0) for j in loads.jobs if j.load == "net"}
    out.extra["guarantee"] = _judge(scn, out.phases, per_second)
    out.extra["iperf_seconds"] = {g: len(v) for g, v in per_second.items()}
    out.extra["goodput"] = [
        {"time_s": round(t, 1), "vm": g, "mbps": round(v, 3)}
        for g, secs in sorted(per_second.items())
        for t, v in secs
    ]


def _lift_limits(drv: LibvirtDriver, agent: HostAgent, say: Callable[[str], None]) -> None:
    """A phase's limits end with it (the next phase enforces its own way, or not at all)."""
    for vm in sorted(agent.limits):
        op = drv.submit(SetGuestRateLimit(vm, None))
        deadline = time.monotonic() + 60
        while not (st := drv.poll(op)).done and time.monotonic() < deadline:
            time.sleep(0.2)
        if st.state.value != "succeeded":
            say(f"lifting {vm}'s limit: {st.detail}")


def _judge(
    scn: LabScenario, phases: list[PhaseResult], per_second: dict[str, list[tuple[float, float]]]
) -> list[dict[str, Any]]:
    g = scn.guarantee
    out = []
    for spec, ph in zip(scn.phases, phases, strict=True):
        lo, hi = ph.start_s + g.settle_s, ph.end_s
        means: dict[str, float | None] = {}
        for vm, secs in sorted(per_second.items()):
            vals = [v for t, v in secs if lo <= t <= hi]
            means[vm] = round(sum(vals) / len(vals), 2) if vals else None
        held = {
            vm: means.get(vm) is not None and means[vm] >= (1 - g.tolerance) * m  # type: ignore[operator]
            for vm, m in sorted(g.min_mbit.items())
        }
        total = sum(v for v in means.values() if v is not None)
        out.append(
            {
                "phase": spec.name,
                "enforcement": spec.guarantee,
                "from_s": round(lo, 1),
                "to_s": round(hi, 1),
                "mean_mbps": means,
                "total_mbps": round(total, 2),
                "min_mbps": dict(g.min_mbit),
                "held": held,
            }
        )
    return out
