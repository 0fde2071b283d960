"""``sova lab run`` of a hotspot-migration scenario: the production daemons on real guests.

One ``sova manager`` and one ``sova agent --driver libvirt`` per lab hypervisor run as
processes (:mod:`sova.lab.sova_procs`); they decide and act, nothing here does. The guests'
own loads (iperf3, stress-ng through the guest agent) change in phases; HV1's agent reports
its domains' load over the capacity the scenario declares (``host_totals = "domains"``),
the manager's detector (k of n over alpha) flags HV1, its directive reaches HV1's agent,
which unplugs the chosen guest's fast NIC (bond moved first) and live-migrates it to HV2,
whose agent plugs a fast NIC once the guest earns one there.

This module only watches, from outside: each second both daemons' inventories and counters
through read-only connections (the timeline), each domain's migration job and, on arrival,
libvirt's completed-job statistics on the destination (migration time and downtime), pings
from the peer namespace, and, at the end, the agents' logged outcomes and the manager's
decision log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from sova.driver.libvirt_driver import LibvirtDriver
from sova.lab.lab import connect, load_state, shape_backups
from sova.lab.loads import Loads, Peer, ping_gaps
from sova.lab.placement import SOURCE, TARGET, PlacementError, gather_on_source, unplug_all
from sova.lab.runner import LabRun, LabRunError, PhaseResult, stream_exits
from sova.lab.scenario import LabScenario
from sova.lab.settings import LabSettings
from sova.lab.sova_procs import SovaDaemons, agent_events, libvirt_section
from sova.model import HostSample, NicKind
from sova.policy.sensing import host_load
from sova.record import EventRow, measured_rates, measured_row

POLICY = "sova"


def _observer(s: LabSettings, scn: LabScenario, host: str) -> LibvirtDriver:
    """A read-only view of ``host`` with the same host totals its agent reports."""
    opts = libvirt_section(s, scn, host)
    opts["lab_nic_taps"] = tuple(opts["lab_nic_taps"])
    return LibvirtDriver.open(s.uri(host), read_only=True, **opts)


def run_hotspot(
    s: LabSettings, scn: LabScenario, log_dir: Path, say: Callable[[str], None] = print
) -> LabRun:
    st = load_state(s)
    if st is None:
        raise LabRunError("no lab is up: run `sova lab up` first")
    need = {f"g{n}" for n in range(1, scn.guests + 1)}
    try:
        gather_on_source(s, scn, need, say)
    except PlacementError as e:
        raise LabRunError(str(e)) from None
    conns = _connect_hosts(s, scn, need)
    log_dir.mkdir(parents=True, exist_ok=True)
    out = LabRun(POLICY)
    unplug_all(s, scn, say)
    shaped = shape_backups(s, scn.slow_mbit * 1e6)
    out.notes.append(f"slow path: {len(shaped)} backup taps shaped to {scn.slow_mbit:g} Mbit/s")
    out.notes.append(
        f"each hypervisor reports its own domains over {scn.hosts.cpus} CPUs and "
        f'{scn.hosts.memory_mib} MiB (host_totals = "domains")'
    )
    obs = {h: _observer(s, scn, h) for h in s.hosts}
    ga = obs[SOURCE]._agent
    assert ga is not None  # LibvirtDriver.open gives every driver a guest agent
    loads = Loads(s, ga)
    peer = Peer(s, log_dir)
    daemons = SovaDaemons(s, scn, log_dir)
    t_wall0 = time.time()
    t0 = time.monotonic()

    def now() -> float:
        return round(time.monotonic() - t0, 3)

    def dom_of(g: str) -> Any:
        for h in (TARGET, SOURCE):
            try:
                d = conns[h].lookupByName(g)
                if d.isActive():
                    return d
            except Exception:
                continue
        raise LabRunError(f"guest {g} runs on neither host")

    migrations: dict[str, dict[str, Any]] = {}  # guest -> what was seen of its migration
    hosts_rows: list[dict[str, Any]] = []
    prev: dict[str, HostSample] = {}
    try:
        _start_daemons(s, daemons, now, say)
        peer.servers(scn.guests)
        time.sleep(0.5)
        peer.pings(scn.guests, scn.ping_interval_s, scn.duration_s + 30)
        measure = partial(_measure, s, obs, conns, out, hosts_rows, prev, migrations)
        _run_phases(scn, loads, dom_of, daemons, obs, out, measure, now, say)
        time.sleep(3.0)  # let the last iperf3 report and exit
        loads.finish(dom_of)
        try:
            out.extra["cluster"] = daemons.get("/v1/cluster")
            out.extra["decisions"] = daemons.get("/v1/decisions")
        except OSError as e:
            out.notes.append(f"manager's cluster view unavailable at the end: {e}")
    finally:
        daemons.stop_all()
        peer.stop()
        for d in obs.values():
            d.close()
        for c in conns.values():
            c.close()
    t_wall1 = time.time()
    out.extra["t_wall0"] = t_wall0
    out.extra["exit_codes"] = {n: p.proc.returncode for n, p in daemons.procs.items()}
    _daemon_events(s, out, log_dir, t_wall0)
    for g, path in sorted(peer.ping_logs.items()):
        out.ping[g] = ping_gaps(path, t_wall0 + 2.0, t_wall1 - 5.0, scn.ping_interval_s)
    _migration_pings(scn, out, peer, migrations, t_wall0)
    out.extra["migrations"] = migrations
    out.extra["hosts"] = hosts_rows
    stream_exits(out, loads)
    return out


def _run_phases(
    scn: LabScenario,
    loads: Loads,
    dom_of: Callable[[str], Any],
    daemons: SovaDaemons,
    obs: dict[str, LibvirtDriver],
    out: LabRun,
    measure: Callable[[float, Callable[[str], None]], None],
    now: Callable[[], float],
    say: Callable[[str], None],
) -> None:
    """Each phase's loads for its duration, a measurement every second, while the Sova
    daemons run (a daemon that dies ends the run)."""
    t_phase = 0.0
    next_measure = time.monotonic()
    for i, ph in enumerate(scn.phases):
        start = now()
        say(f"t={start:6.1f} phase {ph.name}: {ph.loads}")
        loads.start_phase(scn.phases, i, dom_of, scn.net_mbit)
        end = t_phase + ph.duration_s
        while now() < end:
            if dead := daemons.check_alive():
                raise LabRunError(f"a Sova daemon died: {dead}")
            if time.monotonic() >= next_measure:
                measure(now(), say)
                next_measure += 1.0
            time.sleep(0.2)
        out.phases.append(PhaseResult(ph.name, start, now(), [], _holders(obs), True))
        t_phase = end


def _connect_hosts(s: LabSettings, scn: LabScenario, need: set[str]) -> dict[str, Any]:
    """A libvirt connection per hypervisor, once every guest the scenario needs runs on
    the source; else they are closed and the run refused."""
    conns = {h: connect(s, h) for h in s.hosts}
    on_src = {d.name() for d in conns[SOURCE].listAllDomains(1)}
    if not need <= on_src:
        for c in conns.values():
            c.close()
        missing = ", ".join(sorted(need - on_src))
        raise LabRunError(
            f"guest(s) {missing} not running on {SOURCE} or {TARGET}: "
            f"`sova lab down && sova lab up --guests {scn.guests}` restores the lab"
        )
    return conns


def _start_daemons(
    s: LabSettings, daemons: SovaDaemons, now: Callable[[], float], say: Callable[[str], None]
) -> None:
    """The manager, then an agent per hypervisor, until both have reported."""
    daemons.start_manager()
    say(f"t={now():6.1f} sova manager up at {daemons.url}")
    for h in s.hosts:
        p = daemons.start_agent(h)
        say(f"t={now():6.1f} sova agent for {h}: pid {p.proc.pid}")
    took = daemons.wait_reported(list(s.hosts))
    say(f"t={now():6.1f} both agents reported to the manager ({took:.1f} s)")


def _daemon_events(s: LabSettings, out: LabRun, log_dir: Path, t_wall0: float) -> None:
    """What the daemons did, from their own logs (epoch times -> run time)."""
    for host in s.hosts:
        for ev in agent_events(log_dir / f"agent-{host}.log"):
            out.events.append(
                EventRow(
                    POLICY,
                    round(ev["ts"] - t_wall0, 3),
                    ev["event"],
                    ev["vm"],
                    host,
                    ev["dst"],
                    ev["detail"],
                )
            )
    out.events.sort(key=lambda r: (r.time_s, r.event))


def _migration_pings(
    scn: LabScenario,
    out: LabRun,
    peer: Peer,
    migrations: dict[str, dict[str, Any]],
    t_wall0: float,
) -> None:
    """The ping gap around each migration: from its start as the agent logged it to 10 s
    after the guest was seen running on the target."""
    for g, m in migrations.items():
        starts = [r.time_s for r in out.events if r.event == "migrate_start" and r.vm == g]
        t_start = starts[0] if starts else m.get("job_seen_s", m["arrived_s"] - 30)
        m["started_s"] = t_start
        m["ping"] = ping_gaps(
            peer.ping_logs[g],
            t_wall0 + t_start - 1.0,
            t_wall0 + m["arrived_s"] + 10.0,
            scn.ping_interval_s,
        )


def _holders(obs: dict[str, LibvirtDriver]) -> list[str]:
    out = []
    for h, d in sorted(obs.items()):
        out += [f"{g}@{h}" for g, v in d.inventory().vms.items() if v.nic is NicKind.VF]
    return sorted(out)


def _measure(
    s: LabSettings,
    obs: dict[str, LibvirtDriver],
    conns: dict[str, Any],
    out: LabRun,
    hosts_rows: list[dict[str, Any]],
    prev: dict[str, HostSample],
    migrations: dict[str, dict[str, Any]],
    t: float,
    say: Callable[[str], None],
) -> None:
    for host, drv in sorted(obs.items()):
        _measure_host(host, drv, conns, out, hosts_rows, prev, migrations, t)
    _note_arrivals(obs, conns, out, migrations, t, say)


def _measure_host(
    host: str,
    drv: LibvirtDriver,
    conns: dict[str, Any],
    out: LabRun,
    hosts_rows: list[dict[str, Any]],
    prev: dict[str, HostSample],
    migrations: dict[str, dict[str, Any]],
    t: float,
) -> None:
    """One hypervisor's load and its running guests' rates since the last sample; on the
    source, a migration job seen starts that guest's migration record."""
    import libvirt

    try:
        inv = drv.inventory()
        sample = drv.sample()
    except Exception as e:
        out.notes.append(f"t={t:.0f} {host} unreadable: {e}")
        return
    p = prev.get(host)
    prev[host] = sample
    h = inv.host
    if p is not None:
        load = host_load(p, sample, h.cores, h.memory_bytes, h.nic.capacity_bps)
        if load is not None:
            hosts_rows.append(
                {
                    "time_s": t,
                    "host": host,
                    "cpu": round(load.cpu, 4),
                    "mem": round(load.mem, 4),
                    "net": round(load.net, 4),
                }
            )
    dt = max(1e-3, sample.time_s - p.time_s) if p else 1.0
    for name, state in sorted(inv.vms.items()):
        if not state.running:
            continue
        try:
            if conns[host].lookupByName(name).state()[0] != libvirt.VIR_DOMAIN_RUNNING:
                continue  # an incoming guest, paused on the target until it arrives
        except libvirt.libvirtError:
            continue
        c = sample.vms.get(name)
        if c is None:
            continue
        q = p.vms.get(name) if p else None
        tx, rx, cpu = measured_rates(q, c, dt)
        out.timeline.append(
            measured_row(
                policy=POLICY,
                time_s=t,
                host=host,
                vm=name,
                state=state,
                tx_mbps=tx,
                rx_mbps=rx,
                cpu_usage=cpu,
                factors=None,
            )
        )
        if host == SOURCE:
            try:
                job = conns[host].lookupByName(name).jobInfo()
            except libvirt.libvirtError:
                continue
            if job[0] != libvirt.VIR_DOMAIN_JOB_NONE:
                m = migrations.setdefault(name, {"source": SOURCE, "target": TARGET})
                m.setdefault("job_seen_s", t)


def _note_arrivals(
    obs: dict[str, LibvirtDriver],
    conns: dict[str, Any],
    out: LabRun,
    migrations: dict[str, dict[str, Any]],
    t: float,
    say: Callable[[str], None],
) -> None:
    """Guests now running on the target and gone from the source: their arrival time and
    libvirt's statistics of the completed migration job."""
    import libvirt

    for name in sorted(obs[TARGET].inventory().vms):
        if "arrived_s" in migrations.get(name, {}):
            continue
        try:
            dom = conns[TARGET].lookupByName(name)
            # an incoming guest exists, paused, on the target from the migration's start
            if dom.state()[0] != libvirt.VIR_DOMAIN_RUNNING:
                continue
        except libvirt.libvirtError:
            continue
        try:
            if conns[SOURCE].lookupByName(name).isActive():
                continue
        except libvirt.libvirtError:
            pass  # undefined at the source: gone from there
        m = migrations.setdefault(name, {"source": SOURCE, "target": TARGET})
        m["arrived_s"] = t
        try:
            js = dom.jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)
        except libvirt.libvirtError as e:
            js = {}
            out.notes.append(f"{name}: no completed-job statistics on {TARGET}: {e}")
        m["job"] = {
            k: js[k]
            for k in (
                "time_elapsed",
                "downtime",
                "setup_time",
                "memory_total",
                "memory_transferred",
                "memory_iteration",
                "memory_dirty_rate",
            )
            if k in js
        }
        say(
            f"t={t:6.1f} {name} running on {TARGET}: libvirt job "
            f"{js.get('time_elapsed', '?')} ms, downtime {js.get('downtime', '?')} ms"
        )
