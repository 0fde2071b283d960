"""A manager-ordered live migration of a teamed guest with a real VF between two L1
hypervisors: `sova manager` on this machine, `sova agent` inside each L1 (sriov-vf +
teaming, as production runs it), the L2 guests on L1 1.

Opt-in (``SOVA_LAB_SRIOV=1``): two TCG L1s take both cores for many minutes. Skips, saying
why, where it cannot run. Times in docs/lab.md.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tests.lab.nested_helpers import StreamSink, guest_sh, wait_agent_started, wait_guest_agent

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def nested2() -> Any:
    if os.environ.get("SOVA_LAB_SRIOV") != "1":
        pytest.skip("nested SR-IOV lab is opt-in: SOVA_LAB_SRIOV=1 (minutes, both cores)")
    from sova.lab import nested as nested_mod

    why = nested_mod.unavailable()
    if why:
        pytest.skip(why)
    ns = nested_mod.NestedSettings(
        root=Path("/var/lib/sova-lab-sriov-mig"), prefix="svm", l1s=2, boot_timeout_s=420.0
    )
    nested_mod.down(ns)
    try:
        state = nested_mod.up(ns, ROOT, say=print)
        print(f"nested lab up: {state}")
        yield ns
    finally:
        print(f"nested lab down: {nested_mod.down(ns)}")


def _vf_of(dom: Any) -> Any:
    from sova.driver.libvirt_xml import parse_domain

    return parse_domain(dom.XMLDesc(0)).sova_vf()


def _running(conn: Any, name: str) -> Any:
    import libvirt

    try:
        dom = conn.lookupByName(name)
    except libvirt.libvirtError:
        return None
    return dom if dom.isActive() else None


def test_the_manager_moves_a_teamed_guest_between_l1s_and_the_vf_follows(nested2):
    """Both guests on L1 1 hold a VF (light TCP streams); CPU burners in both make L1 1 hot
    (host totals from its domains over 2 CPUs: two burners ~1.0, one ~0.5). The manager
    flags L1 1 and orders one guest to L1 2; L1 1's agent migrates it (QEMU unplugs the
    failover primary by itself), L1 2's agent gives it a VF of L1 2's own PF there.
    Checked: the guest runs on L1 2 holding a VF, L1 1's VF is back in its pool (no domain
    there holds it), libvirt's completed-job statistics on L1 2 (time, downtime), the ping
    gap from this machine at 20/s around the migration, and each guest's long-lived TCP
    stream never ended.
    """
    import libvirt

    from sova.driver.guest_agent import GuestAgent
    from sova.lab.loads import ping_gaps
    from sova.lab.nested import agent_toml, l2_guest_xml, start_agent
    from sova.lab.sova_procs import free_port, to_toml

    ns = nested2
    host = f"{ns.subnet}.1"
    conns = {n: libvirt.open(ns.l1_uri(n)) for n in (1, 2)}
    caps = conns[1].getCapabilities()
    dtype = "kvm" if "type='kvm'" in caps or 'type="kvm"' in caps else "qemu"
    names = ["g1", "g2"]
    ips = {g: ns.l2_ip(1, k) for k, g in enumerate(names, start=1)}
    doms = {}
    for k, g in enumerate(names, start=1):
        doms[g] = conns[1].defineXML(l2_guest_xml(ns, 1, k, dtype))
        doms[g].create()
    tokens = {f"l1-{n}": secrets.token_hex(16) for n in (1, 2)}
    admin = secrets.token_hex(16)
    port = free_port()
    url = f"http://{host}:{port}"
    mcfg = ns.root / "manager.toml"
    mcfg.write_text(
        to_toml(
            {
                "listen": host,
                "port": port,
                "database_url": f"sqlite:///{ns.root / 'manager.db'}",
                "plan_period_s": 5,
                "log_level": "info",
                "admin_token": admin,
                "planner": {"alpha": 0.5, "k": 2, "n": 3, "ceiling": 0.9},
                "hosts": {h: {"token": t} for h, t in tokens.items()},
            }
        )
        + "\n"
    )
    mlog = (ns.root / "manager.log").open("wb")
    manager = subprocess.Popen(
        [sys.executable, "-m", "sova.cli", "manager", "--config", str(mcfg)],
        stdout=mlog,
        stderr=subprocess.STDOUT,
        env={k: v for k, v in os.environ.items() if not k.startswith("SOVA_")},
    )
    ga = GuestAgent(command_timeout_s=10, exec_timeout_s=30.0)
    ticks = StreamSink(host, 5300)
    bulk = StreamSink(host, 5201)
    pings: dict[str, subprocess.Popen[bytes]] = {}
    logs = {g: ns.root / f"ping-{g}.log" for g in names}
    t_start = time.time()
    try:
        for g in names:
            wait_guest_agent(ga, doms[g])
            r = subprocess.run(["ping", "-c", "1", "-W", "60", ips[g]], capture_output=True)
            assert r.returncode == 0, f"{g} at {ips[g]}: {r.stdout.decode()[-200:]}"
            pings[g] = subprocess.Popen(
                ["ping", "-D", "-i", "0.05", ips[g]], stdout=logs[g].open("w")
            )
            guest_sh(
                ga,
                doms[g],
                f"(while :; do echo tick; usleep 50000; done | nc {host} 5300)"
                " >/dev/null 2>&1 </dev/null &",
            )
            guest_sh(ga, doms[g], f"nc {host} 5201 </dev/zero >/dev/null 2>&1 &")
        controller = {
            "period": "5s",
            "vf_policy": "sova",
            "sensing": {"window": 2},
            "scheduler": {"io_filter": "top-q", "top_q": 8, "min_dwell": "0s"},
            "op_timeout": "90s",
            "manager": {"alpha": 0.5, "k": 2, "n": 3, "ceiling": 0.9},
        }
        lv = {
            "migration_uri_template": "qemu+tcp://{host}/system",
            "host_totals": "domains",
            "host_cpus": 2,
            "host_memory_mib": 2048,
        }
        for n in (1, 2):
            h = f"l1-{n}"
            start_agent(ns, n, agent_toml(ns, n, controller, None, (url, tokens[h]), lv), ROOT)
        for n in (1, 2):
            wait_agent_started(ns.run_dir(n) / "agent.log")
        deadline = time.monotonic() + 400
        while not all(_vf_of(doms[g]) for g in names):
            assert time.monotonic() < deadline, "both guests should hold a VF before the burn"
            time.sleep(2)
        print(f"both guests hold a VF at +{time.time() - t_start:.0f} s")
        for g in names:
            guest_sh(ga, doms[g], "(while :; do :; done) >/dev/null 2>&1 </dev/null &")
        t_burn = time.time()
        moved = None
        deadline = time.monotonic() + 600
        while moved is None:
            assert manager.poll() is None, (ns.root / "manager.log").read_text()[-1500:]
            moved = next((g for g in names if _running(conns[2], g)), None)
            assert time.monotonic() < deadline, "no guest reached L1 2 in 600 s"
            time.sleep(1)
        t_arrived = time.time()
        print(f"{moved} running on L1 2 {t_arrived - t_burn:.0f} s after the burners started")
        dst = conns[2].lookupByName(moved)
        deadline = time.monotonic() + 300
        while _vf_of(dst) is None:
            assert time.monotonic() < deadline, f"{moved} has no VF on L1 2 after 300 s"
            time.sleep(1)
        t_vf = time.time()
        job = dst.jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)
        time.sleep(15)  # the stream resumes through the VF on L1 2
        stayed = [g for g in names if g != moved]
        src_held = [g for g in stayed if _running(conns[1], g) and _vf_of(doms[g])]
        assert _running(conns[1], moved) is None, "the source domain still runs"
        assert len(src_held) <= 1
        gap = ping_gaps(logs[moved], t_burn, t_vf + 15, 0.05)
        lost = {p: rec["ended"] for p, rec in ticks.conns.items() if rec["ended"]}
        silence = ticks.max_gap(ips[moved], t_burn, t_vf)
        req = urllib.request.Request(
            f"{url}/v1/decisions", headers={"Authorization": f"Bearer {admin}"}
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            decisions = json.loads(r.read())
        print(
            f"migration: job time_elapsed {job.get('time_elapsed')} ms, downtime "
            f"{job.get('downtime')} ms; arrived -> VF on L1 2 {t_vf - t_arrived:.1f} s; "
            f"ping {gap}; stream silence {silence:.2f} s; decisions {str(decisions)[:600]}"
        )
        assert not lost, f"long-lived TCP streams ended: {lost}"
        assert job.get("downtime") is not None, job
    finally:
        for p in pings.values():
            p.terminate()
        ticks.close()
        bulk.close()
        manager.terminate()
        manager.wait(20)
        for n in (1, 2):
            log = ns.run_dir(n) / "agent.log"
            if log.exists():
                print(f"agent l1-{n} log tail:", log.read_text(errors="replace")[-2000:])
        for c in conns.values():
            c.close()
