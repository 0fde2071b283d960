"""The production driver and the production agent on real VFs: one L1 hypervisor (QEMU 10,
emulated VT-d and igb) with libvirt 9.0 inside. First the driver from this machine plugs a
VF into one teamed L2 guest and takes it back; then `sova agent` running inside L1 moves a
pool of one VF between two teamed L2 guests as their loads swap.

Opt-in (``SOVA_LAB_SRIOV=1``): it takes both cores for many minutes (L1 under TCG) and must
not run beside the lab tier. Skips, saying why, where it cannot run (not root, tools or
libvirt-python missing). Times and what failed before in docs/lab.md#nested.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.lab.nested_helpers import (
    StreamSink,
    guest_sh,
    holder,
    module_lab,
    wait_agent_started,
    wait_guest_agent,
    wait_guest_agents,
)

from .conftest import wait_op

ROOT = Path(__file__).resolve().parents[2]
L2_MAC = "52:54:00:77:00:10"


@pytest.fixture(scope="module")
def nested(nested_lab: Any) -> Iterator[Any]:
    """L1 1 of the shared lab (tests/lab/conftest.py), clean before and after."""
    with module_lab(nested_lab) as ns:
        yield ns


@pytest.fixture(scope="module")
def prebooted(nested: Any) -> Iterator[dict[str, Any]]:
    """g1 and g2 of the agent test, defined and started at the module's start: their
    boots (minutes under load) overlap the driver test's instead of following it. Idle
    until the agent test starts their loads."""
    import libvirt

    from sova.lab.nested import l2_guest_xml

    conn = libvirt.open(nested.l1_uri(1))
    caps = conn.getCapabilities()
    dtype = "kvm" if "type='kvm'" in caps or 'type="kvm"' in caps else "qemu"
    doms = {}
    try:
        for k in (1, 2):
            doms[f"g{k}"] = conn.defineXML(l2_guest_xml(nested, 1, k, dtype))
            doms[f"g{k}"].create()
        yield doms
    finally:
        conn.close()


def test_a_real_teamed_vf_is_plugged_and_taken_back_by_the_production_driver(nested, prebooted):
    import libvirt  # type: ignore[import-untyped]

    from sova.driver.base import OpState
    from sova.driver.guest_agent import GuestAgent
    from sova.driver.libvirt_driver import LibvirtDriver, LibvirtDriverConfig, ensure_event_loop
    from sova.driver.libvirt_xml import detach_xml_for, parse_domain
    from sova.lab.nested import l2_xml
    from sova.model import AttachVF, DetachVF

    ensure_event_loop()  # before any connection opens, or the driver gets no events
    uri = nested.l1_uri(1)
    conn = libvirt.open(uri)
    caps = conn.getCapabilities()
    dtype = "kvm" if "type='kvm'" in caps or 'type="kvm"' in caps else "qemu"
    dom = conn.defineXML(l2_xml("l2", L2_MAC, dtype))
    dom.create()
    drv = LibvirtDriver(
        LibvirtDriverConfig(
            uri=uri,
            host_name="l1-1",
            sysfs_root="/nonexistent",  # the PF is L1's: its VFs come from libvirt
            hotplug_timeout_s=60.0,
            hotplug_attempts=3,
            retry_backoff_s=2.0,
        )
    )
    try:
        pf = drv.pf_view()
        assert len(pf.vfs) == nested.vfs, pf
        inv = drv.inventory()
        assert inv.vms["l2"].failover_ready, drv.vm_reports()
        # L2's kernel up (hot-plug needs its pciehp): its guest agent answers (was a fixed
        # 20 s, 90 s for a TCG L2)
        wait_guest_agent(GuestAgent(command_timeout_s=10), dom)
        t0 = time.monotonic()
        st = wait_op(drv, drv.submit(AttachVF("l2")), 300)
        plug_s = time.monotonic() - t0
        assert st.state is OpState.SUCCEEDED, st
        vf = parse_domain(dom.XMLDesc(0)).sova_vf()
        assert vf is not None and vf.alias == "ua-sova-vf" and vf.teaming_type == "transient"
        assert vf.mac == L2_MAC and vf.pci in pf.vfs.values()
        # what libvirt 9.0 does with a detach by XML of a teamed VF (the bug this fixes)
        with pytest.raises(libvirt.libvirtError, match="multiple devices matching MAC"):
            dom.detachDeviceFlags(detach_xml_for(vf), libvirt.VIR_DOMAIN_AFFECT_LIVE)
        t0 = time.monotonic()
        st = wait_op(drv, drv.submit(DetachVF("l2")), 300)
        unplug_s = time.monotonic() - t0
        assert st.state is OpState.SUCCEEDED, st
        live = ET.fromstring(dom.XMLDesc(0))
        assert not [i for i in live.iter("interface") if i.get("type") == "hostdev"]
        assert drv.inventory().vms["l2"].vf_index is None
        print(f"domain {dtype}: plug {plug_s:.1f} s ({st.detail}), unplug {unplug_s:.1f} s")
    finally:
        drv.close()
        with contextlib.suppress(libvirt.libvirtError):
            dom.destroy()
        with contextlib.suppress(libvirt.libvirtError):
            dom.undefine()
        conn.close()


def test_the_agent_in_l1_moves_a_real_vf_between_teamed_guests_as_loads_change(nested, prebooted):
    """`sova agent` inside L1 (sriov-vf + teaming, DSR-IOV top-q, standalone, a pool of one
    VF) gives the VF to the guest that sends, takes it back when the loads swap and gives it
    to the other guest. The guests' own traffic (busybox nc to this machine) and CPU burners
    make the loads; the agent counts inside the guests (igb's VF counters stay at zero).
    Checked at each switch: the live XML (one holder), the VF carrying the holder's bulk
    stream inside the guest (net_failover uses it), the ping gap from this machine at 20/s
    (send time), and a long-lived TCP stream per guest (20 small writes a second) that must
    not end and whose longest silence is reported.

    Measured (load average 17-25 from other sessions; one full pass, one run that moved the
    VF and failed only on a since-replaced byte threshold): agent start 176-210 s, VF to the
    sender 19-60 s after the agent's first sample, taken back 18-52 s and given 32-80 s after
    the loads swapped; ping gap of the guest being plugged 1.95-2.3 s, being unplugged 1.3 s,
    the other guest 0.05 s; stream silence <= 3.4 s. Hence gaps <= 5 s asserted. Run 7
    (docs/lab.md#nested, load average 4-8.5, L1 on single-threaded TCG): agent start 26 s,
    VF to g1 9.6 s, taken back 12.3 s and given to g2 22.3 s after the swap; plug gaps 2.4 s
    and 2.3 s, unplug 0.3 s, the other guest <= 0.1 s; stream silence <= 3.9 s.
    """
    import libvirt

    from sova.driver.guest_agent import GuestAgent
    from sova.lab.loads import ping_gaps
    from sova.lab.nested import agent_toml, start_agent

    uri = nested.l1_uri(1)
    conn = libvirt.open(uri)
    names = ["g1", "g2"]
    ips = {g: nested.l2_ip(1, k) for k, g in enumerate(names, start=1)}
    doms = {}
    ga = GuestAgent(command_timeout_s=10, exec_timeout_s=30.0)
    host = f"{nested.subnet}.1"
    ticks = StreamSink(host, 5300)
    bulk = StreamSink(host, 5201)
    pings: dict[str, subprocess.Popen[bytes]] = {}
    logs = {g: nested.root / f"ping-{g}.log" for g in names}
    controller = {
        "period": "5s",
        "sensing": {"window": 2},
        "scheduler": {"io_filter": "top-q", "top_q": 8, "min_dwell": "0s", "cost_benefit": False},
        "op_timeout": "90s",
    }
    t_start = time.time()
    try:
        # the agent first, its guests idle: its start took minutes beside busy guests and
        # under one in an idle L1 (docs/lab.md#nested)
        agent_log = start_agent(nested, 1, agent_toml(nested, 1, controller, vf_pool=1), ROOT)
        print(f"agent in L1 started after {wait_agent_started(agent_log):.0f} s")
        for g in names:  # booted with the module (idle so far)
            doms[g] = conn.lookupByName(prebooted[g].name())
        # guest agent up (the L2 kernel is: hot-plug needs its pciehp)
        print(f"guest agents up after {wait_guest_agents(ga, doms)} s")
        for g in names:
            r = subprocess.run(["ping", "-c", "1", "-W", "60", ips[g]], capture_output=True)
            assert r.returncode == 0, f"{g} at {ips[g]}: {r.stdout.decode()[-200:]}"
            log = logs[g].open("w")
            pings[g] = subprocess.Popen(["ping", "-D", "-i", "0.05", ips[g]], stdout=log)
            guest_sh(
                ga,
                doms[g],
                f"(while :; do echo tick; usleep 50000; done | nc {host} 5300)"
                " >/dev/null 2>&1 </dev/null &",
            )
        switches: list[tuple[str, float]] = []
        vf_kbps: dict[str, float] = {}

        def phase(net: str, cpu: str, timeout_s: float = 300.0) -> float:
            guest_sh(
                ga,
                doms[cpu],
                "kill $(cat /run/bulk.pid) 2>/dev/null; "
                "(while :; do :; done) >/dev/null 2>&1 </dev/null & echo $! > /run/cpu.pid",
            )
            guest_sh(
                ga,
                doms[net],
                "kill $(cat /run/cpu.pid) 2>/dev/null; "
                f"nc {host} 5201 </dev/zero >/dev/null 2>&1 & echo $! > /run/bulk.pid",
            )
            t0 = time.time()
            last = holder(conn, names)
            while True:
                now = holder(conn, names)
                if now != last:
                    switches.append((f"{last}->{now}", time.time()))
                    print(f"holder {last} -> {now} at +{time.time() - t0:.1f} s")
                    last = now
                if now == net:
                    break
                assert time.time() - t0 < timeout_s, (
                    f"{net} sends but holder is {now} after {timeout_s:g} s; agent log: "
                    + agent_log.read_text(errors="replace")[-1500:]
                )
                time.sleep(0.5)
            time.sleep(20)  # the switch settles; traffic flows through the VF
            script = (
                "for d in /sys/class/net/*; do echo ${d##*/} "
                "$(readlink $d/device/driver) $(cat $d/statistics/tx_bytes); done"
            )

            def tx() -> dict[str, int]:  # per member: igbvf (the VF), virtio_net (standby…)
                out: dict[str, int] = {}
                for ln in guest_sh(ga, doms[net], script).splitlines():
                    f = ln.split()
                    if len(f) == 3 and "lower" not in f[0]:
                        out[f[0]] = int(f[2])
                return out

            a = tx()
            time.sleep(10)
            b = tx()
            grew = {d: b[d] - a.get(d, 0) for d in b}
            vf = [
                d
                for d in b
                if "igbvf"
                in guest_sh(ga, doms[net], f"readlink /sys/class/net/{d}/device/driver || true")
            ]
            assert vf, f"{net}: no VF netdev: {b}"
            others = sorted(v for d, v in grew.items() if d not in vf and d != "lo")
            # the master counts what both members send: the standby is the smaller of the two
            standby = others[0] if others else 0
            assert grew[vf[0]] > 50_000 and standby * 10 <= grew[vf[0]], (
                f"{net}: the bulk stream is not on the VF over 10 s: {grew}"
            )
            vf_kbps[net] = grew[vf[0]] * 8 / 10 / 1000
            assert holder(conn, names) == net, "holder changed back while the load stayed"
            return time.time() - t0

        took1 = phase("g1", "g2")
        took2 = phase("g2", "g1")
        t_end = time.time()
        lost = {g: rec["ended"] for g, rec in ticks.conns.items() if rec["ended"]}
        assert set(ticks.conns) == set(ips.values()), ticks.conns.keys()
        assert not lost, f"long-lived TCP streams ended: {lost}"
        report = []
        for what, at in switches:
            for g in names:
                pg = ping_gaps(logs[g], at - 15, at + 15, 0.05)
                report.append(
                    f"{what} {g}: ping gap {pg['max_gap_s']} s ({pg['lost']} lost), "
                    f"stream silence {ticks.max_gap(ips[g], at - 15, at + 15):.2f} s"
                )
        print(f"phases {took1:.0f} s, {took2:.0f} s; switches {len(switches)}; VF kbit/s {vf_kbps}")
        print("\n".join(report))
        worst = {g: ping_gaps(logs[g], t_start, t_end, 0.05) for g in names}
        print(f"whole run: {worst}")
        assert [w for w, _ in switches][-2:] == ["g1->None", "None->g2"], switches
        for g in names:
            assert worst[g]["max_gap_s"] <= 5.0, (g, worst[g])
    finally:
        for p in pings.values():
            p.terminate()
        ticks.close()
        bulk.close()
        print(
            "agent log tail:",
            (nested.run_dir(1) / "agent.log").read_text(errors="replace")[-3000:]
            if (nested.run_dir(1) / "agent.log").exists()
            else "none",
        )
        conn.close()
