"""Faults of Sova's own daemons on real QEMU: the `sova agent` process killed with SIGKILL
in the middle of a plug, and the destination libvirtd killed in the middle of a migration
the manager asked for. Each is driven by the production processes (:mod:`sova.lab.sova_procs`)
and checked from outside (live domain XML, the guest's bond, the manager's cluster view).

Runs after test_lab_hotspot.py (file order; that run leaves one guest on HV2, gathered back
here) and before the crash test, which takes the lab down.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from .conftest import guest_sh
from .test_lab_driver import BOND, perm_macs

SCENARIO = """
name: daemon-faults
experiment: {experiment}
guests: 2
fast_slots: 2
net_mbit: 20
hosts: {{cpus: 2, memory_mib: 2048}}
plan_period_s: 3
controller:
  period: 3s
  vf_policy: {policy}
  sensing: {{window: 1}}
  scheduler: {{io_filter: top-q, min_dwell: 0s, cost_benefit: false}}
  {manager}
phases:
  - {{name: only, duration_s: 300, loads: {{g1: net}}}}
"""


def _scenario(tmp_path, **kw: str) -> Any:
    from sova.lab.scenario import load_lab_scenario

    p = tmp_path / "s.yaml"
    p.write_text(SCENARIO.format(**kw))
    return load_lab_scenario(p)


def _fast_nics(lab, conn) -> dict[str, list[str]]:
    """Guest -> the fast slots (taps) its live XML holds, on one host."""
    from sova.driver.libvirt_xml import parse_domain

    out: dict[str, list[str]] = {}
    for dom in conn.listAllDomains(1):
        info = parse_domain(dom.XMLDesc(0))
        out[info.name] = [n.target_dev for n in info.nics if n.alias == "ua-sova-vf"]
    return out


def _wait(cond, timeout_s: float, what: str, step: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"{what}: not within {timeout_s:g}s")


def _stop_loads(dom) -> None:
    """The guest's burner and stream end with the test (the next one starts clean)."""
    import contextlib

    with contextlib.suppress(Exception):
        guest_sh(
            dom, "systemctl stop sova-net-load 2>/dev/null; pkill stress-ng; pkill iperf3; true", 20
        )


def _agent_answers(dom) -> bool:
    from sova.lab.guests import agent_ping

    return agent_ping(dom)


def _start_net(lab, scn, dom, secs: float) -> None:
    from sova.driver.guest_agent import GuestAgent
    from sova.lab.loads import Loads

    Loads(lab, GuestAgent())._start_one(dom, "g1", "net", secs, scn.net_mbit)


def test_agent_daemon_killed_mid_plug_restarts_and_reconciles_from_the_live_xml(lab, tmp_path):
    """SIGKILL of `sova agent` once the fast NIC is in the live XML but before the plug is
    done; the restarted agent adopts it from the XML: one NIC, no slot twice, and the NIC
    that is there carries the guest's traffic (the bond's active slave) — none orphaned."""
    from sova.lab.lab import connect
    from sova.lab.loads import Peer
    from sova.lab.placement import gather_on_source, unplug_all
    from sova.lab.sova_procs import SovaDaemons, json_lines

    scn = _scenario(tmp_path, experiment="vf-scheduling", policy="dsr-iov", manager="")
    gather_on_source(lab, scn, {"g1", "g2"}, print)
    unplug_all(lab, scn, print)
    conn = connect(lab, "HV1")
    dom = conn.lookupByName("g1")
    peer = Peer(lab, tmp_path)
    daemons = SovaDaemons(lab, scn, tmp_path)
    try:
        peer.servers(1)
        # the stream runs in a unit of its own: stopping qemu-ga ends what guest-exec started
        guest_sh(
            dom,
            f"systemd-run --no-block --unit=sova-net-load iperf3 -c {lab.peer_ip} -p 5201 "
            f"-t 240 -b {scn.net_mbit:g}M",
        )
        # The guest agent goes away for 25 s (a transient unit, so stopping qemu-ga does
        # not kill the script): the agent's plug gets its NIC in (DEVICE_ADDED needs no
        # guest agent) but cannot enslave it, and the agent is killed right there.
        guest_sh(
            dom,
            "systemd-run --no-block --unit=sova-ga-away sh -c "
            "'sleep 1; systemctl stop qemu-guest-agent; sleep 25; "
            "systemctl start qemu-guest-agent'",
        )
        time.sleep(3)
        first = daemons.start_agent("HV1", standalone=True)
        _wait(lambda: _fast_nics(lab, conn).get("g1"), 120, "the agent plugging g1", 0.2)
        os.kill(first.proc.pid, signal.SIGKILL)  # the process we started, by its pid
        first.proc.wait(10)
        _wait(lambda: _agent_answers(dom), 90, "the guest agent back", step=1.0)
        at_kill = perm_macs(dom).get(guest_sh(dom, BOND).strip())
        assert at_kill == lab.guest_mac(1), "the plug was not left half-done"
        second = daemons.start_agent("HV1", standalone=True, log_name="agent-HV1-restarted")
        _wait(
            lambda: any("reconciled HV1" in r["msg"] for r in json_lines(second.log)),
            60,
            "the restarted agent reconciling",
        )
        rec = next(r["msg"] for r in json_lines(second.log) if "reconciled HV1" in r["msg"])
        assert "VF holders [g1]" in rec, rec  # adopted from the XML, not re-plugged

        def settled() -> bool:
            nics = _fast_nics(lab, conn)
            if len(nics.get("g1", [])) != 1:
                return False
            m = perm_macs(dom)
            return m.get(guest_sh(dom, BOND).strip()) != lab.guest_mac(1)  # not the backup

        _wait(settled, 90, "g1's one fast NIC carrying its traffic", step=2.0)
        taps = [t for v in _fast_nics(lab, conn).values() for t in v]
        assert len(taps) == len(set(taps)), taps  # no slot double-assigned
        assert second.proc.poll() is None, "the restarted agent died"
    finally:
        daemons.stop_all()
        peer.stop()
        _stop_loads(dom)
        conn.close()
        unplug_all(lab, scn, print)


def test_destination_killed_mid_migration_lease_released_and_fast_path_back(lab, tmp_path):
    """The manager's migration is killed at its destination: the guest stays on HV1, the
    agent reports the failure, the manager releases the lease, and the guest gets its fast
    NIC back on HV1 from its own agent."""
    from sova.driver.guest_agent import GuestAgent
    from sova.lab.daemons import ensure_daemon
    from sova.lab.lab import connect
    from sova.lab.loads import Loads, Peer
    from sova.lab.placement import gather_on_source, unplug_all
    from sova.lab.sova_procs import SovaDaemons, agent_events

    # alpha low so one burner makes HV1 hot; the migration is capped (the agent's
    # controller.manager.migration_bandwidth) so there is time to kill HV2 mid-way
    scn = _scenario(
        tmp_path,
        experiment="hotspot-migration",
        policy="sova",
        manager="manager: {alpha: 0.2, k: 2, n: 3, ceiling: 0.95, migration_bandwidth: 64Mbit}",
    )
    gather_on_source(lab, scn, {"g1", "g2"}, print)
    unplug_all(lab, scn, print)
    conn = connect(lab, "HV1")
    dom = conn.lookupByName("g1")
    peer = Peer(lab, tmp_path)
    daemons = SovaDaemons(lab, scn, tmp_path)
    try:
        peer.servers(1)
        _start_net(lab, scn, dom, 280)
        Loads(lab, GuestAgent())._start_one(dom, "g1", "cpu", 280, 0)
        daemons.start_manager()
        daemons.start_agent("HV1")
        daemons.start_agent("HV2")
        job = _wait(
            lambda: dom.jobInfo()[0] != 0, 180, "the manager sending a guest from HV1", step=0.5
        )
        assert job
        time.sleep(3)
        from sova.lab.daemons import daemon_pid

        pid = daemon_pid(lab, "HV2")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the lab's own HV2 libvirtd, by the pid it recorded
        failed = _wait(
            lambda: [
                e
                for e in agent_events(tmp_path / "agent-HV1.log")
                if e["event"] == "migrate_failed"
            ],
            240,
            "the agent reporting the failed migration",
            step=1.0,
        )
        vm = failed[0]["vm"]
        assert "VM stays on this host" in failed[0]["detail"], failed
        assert conn.lookupByName(vm).isActive()  # still running on HV1
        # the lease the manager held for it is released through the real manager
        _wait(lambda: daemons.get("/v1/cluster")["leases"] == [], 60, "the lease released")
        # the guest earns its fast NIC again on HV1, from its own agent
        _wait(lambda: _fast_nics(lab, conn).get(vm), 120, f"{vm}'s fast NIC back on HV1")
    finally:
        daemons.stop_all()
        peer.stop()
        _stop_loads(dom)
        conn.close()
        ensure_daemon(lab, "HV2", 1)  # the lab's HV2 again if it was killed
        unplug_all(lab, scn, print)
