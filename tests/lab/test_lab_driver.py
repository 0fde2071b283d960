"""The production LibvirtDriver on real QEMU guests: guest-bond failover on a lab-nic.

Figures measured on the 2-core machine kind under TCG, with other processes loading it
(load average 13–16), over 3 sessions: attach (plug + netdev appears + enslaved + made
active) 9–12 s, detach (bond moved to the backup and confirmed, unplug, DEVICE_REMOVED)
4.5–5.5 s. Pings at 10/s over a plug and an unplug: largest gap between reply *arrivals*
0.52–0.67 s, longest time without an answered request (send time, what is asserted) ≤ 0.2 s
in the scenario runs; the 1 s bound is the experiment's acceptance figure. Migration of an idle 320 MiB guest: 12.4 s
wall 9.3–14.9 s, libvirt job 6.9–8.3 s, downtime 310–468 ms (4 runs).
"""

from __future__ import annotations

import re
import subprocess
import time
from typing import Any

import pytest

from .conftest import guest_sh, wait_op

BOND = "cat /sys/class/net/bond0/bonding/active_slave"


def open_driver(s: Any, host: str = "HV1", **kw: Any) -> Any:
    from sova.driver.libvirt_driver import LibvirtDriver
    from sova.lab.settings import LAB_HOTPLUG

    settings = {
        "host_name": host,
        "fast_path": "lab-nic",
        "failover": "guest-bond",
        "lab_nic_bridge": s.fast_bridge,
        "lab_nic_taps": (s.fast_tap(host, 0), s.fast_tap(host, 1)),
        "migration_uri_template": s.uri_template(),
        "migration_unsafe": True,
        **LAB_HOTPLUG,
    } | kw
    return LibvirtDriver.open(s.uri(host), **settings)


def dom_of(drv: Any, name: str) -> Any:
    return drv._conn.lookupByName(name)


def perm_macs(dom: Any) -> dict[str, str]:
    """Guest netdev -> permanent MAC (a bond slave's address is the bond's)."""
    out = guest_sh(
        dom,
        'for d in /sys/class/net/*; do [ -e "$d/device" ] || continue; '
        'echo "${d##*/} $(cat $d/bonding_slave/perm_hwaddr 2>/dev/null || cat $d/address)"; done',
    )
    return dict(line.split() for line in out.strip().splitlines())


class Pinger:
    def __init__(self, s: Any, ip: str) -> None:
        self.p = subprocess.Popen(
            ["ip", "netns", "exec", s.peer_ns, "ping", "-D", "-n", "-i", "0.1", ip],
            stdout=subprocess.PIPE,
            text=True,
        )

    def stop(self) -> tuple[float, int]:
        """(longest time without an answered request, in send time; replies).

        Send time, not reply arrival: on a loaded host a TCG guest's replies can arrive
        seconds late in a burst with nothing lost, which is not what a failover costs.
        """
        self.p.terminate()
        out = self.p.communicate(timeout=10)[0]
        seqs = sorted({int(q) for q in re.findall(r"bytes from \S+ icmp_seq=(\d+)", out)})
        gaps = [(b - a) * 0.1 for a, b in zip(seqs, seqs[1:], strict=False)]
        return (max(gaps) if gaps else float("inf")), len(seqs)


def test_probing_reports_the_strategies_and_that_bandwidth_is_not_used(lab):
    drv = open_driver(lab)
    try:
        caps = drv.capabilities()
        assert drv.strategies == ("lab-nic", "guest-bond")
        assert caps.vf_pool == 2 and caps.nic.max_rate and caps.guest_agent
        text = " | ".join(caps.notes)
        assert "strategies: fast path lab-nic, failover guest-bond" in text
        # This kernel has no sfq/police: the probe must say <bandwidth> is not relied on.
        assert "<bandwidth>" in text
        inv = drv.inventory()
        assert {"g1", "g2"} <= set(inv.vms) and all(v.failover_ready for v in inv.vms.values())
    finally:
        drv.close()


def test_plug_makes_the_fast_nic_active_and_unplug_moves_back_first(lab):
    """Plug → enslaved and active; unplug → backup confirmed active before the NIC goes."""
    from sova.model import AttachVF, DetachVF, NicKind

    drv = open_driver(lab)
    dom = dom_of(drv, "g1")
    ping = Pinger(lab, lab.guest_ip(1))
    started = time.monotonic()
    try:
        st = wait_op(drv, drv.submit(AttachVF("g1", max_bps=200e6)))
        assert st.state.value == "succeeded", st
        assert "active slave" in st.detail
        macs = perm_macs(dom)
        active = guest_sh(dom, BOND).strip()
        fast_tap = lab.fast_tap("HV1", 0)
        from sova.driver.libvirt_driver.fastpath import slot_mac

        assert macs[active] == slot_mac(fast_tap)  # the hot-plugged NIC carries the traffic
        inv = drv.inventory()
        assert inv.vms["g1"].nic is NicKind.VF and inv.vms["g1"].vf_index == 0
        tc = subprocess.run(
            ["tc", "class", "show", "dev", fast_tap], capture_output=True, text=True, check=True
        ).stdout
        assert "rate 200Mbit" in tc  # the tier, enforced on the host side of the tap
        time.sleep(2)
        st = wait_op(drv, drv.submit(DetachVF("g1")))
        assert st.state.value == "succeeded", st
        active = guest_sh(dom, BOND).strip()
        assert macs[active] == lab.guest_mac(1)  # back on the virtio backup
        assert drv.inventory().vms["g1"].nic is NicKind.VIRTIO
    finally:
        gap, n = ping.stop()
        window = time.monotonic() - started
        drv.close()
    # Pings go out every 0.1 s; at least 30 % must be answered over the plug and unplug
    # (measured: 46 answers in a ~5 s window on a quiet machine, 150+ over ~15 s loaded).
    assert n >= max(10, 0.3 * window / 0.1), (n, window)
    assert gap < 1.0, f"ping gap {gap:.2f} s over plug + unplug"


def test_guest_counters_agree_with_the_driver_within_one_percent(lab):
    """The driver's per-guest bytes (taps) against the guest's own /proc/net/dev."""
    drv = open_driver(lab)
    dom = dom_of(drv, "g2")
    read = "cat /sys/class/net/bond0/statistics/tx_bytes /sys/class/net/bond0/statistics/rx_bytes"
    try:
        g0 = [int(x) for x in guest_sh(dom, read).split()]
        d0 = drv.sample().vms["g2"]
        srv = subprocess.Popen(
            ["ip", "netns", "exec", lab.peer_ns, "iperf3", "-s", "-1", "-p", "5299"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(0.5)
            guest_sh(dom, f"iperf3 -c {lab.peer_ip} -p 5299 -t 8 -b 40M >/dev/null", 60)
        finally:
            srv.wait(20)
        d1 = drv.sample().vms["g2"]
        g1 = [int(x) for x in guest_sh(dom, read).split()]
    finally:
        drv.close()
    guest_tx, guest_rx = g1[0] - g0[0], g1[1] - g0[1]
    drv_tx, drv_rx = d1.tx_bytes - d0.tx_bytes, d1.rx_bytes - d0.rx_bytes
    assert guest_tx > 20e6  # ~40 Mbit/s for 8 s really went out
    assert abs(drv_tx - guest_tx) <= 0.01 * guest_tx, (drv_tx, guest_tx)
    assert abs(drv_rx - guest_rx) <= 0.01 * max(guest_rx, 1e6), (drv_rx, guest_rx)


def test_paused_guest_ignores_the_unplug_detach_times_out_bond_stays_on_backup(lab):
    """vCPUs paused after the bond moved: the unplug is never acknowledged (bounded retries,
    the op fails and says so); the guest keeps working on its backup; once it runs again the
    removal completes and the next detach confirms it."""
    from sova.driver.libvirt_driver import driver as drvmod
    from sova.driver.libvirt_driver.failover import GuestBond
    from sova.model import AttachVF, DetachVF

    class PauseAfterMove(GuestBond):
        def before_unplug(self, dom: Any, fast: Any, backup: Any) -> str:
            done = super().before_unplug(dom, fast, backup)
            dom.suspend()
            return done

    class Driver(drvmod.LibvirtDriver):
        @property
        def _failover(self) -> Any:
            return PauseAfterMove(self._agent)

    from sova.lab.lab import connect  # noqa: F401 - same URI the lab uses

    base = open_driver(lab, hotplug_timeout_s=4.0, hotplug_attempts=2, retry_backoff_s=0.5)
    base.close()
    drv = Driver(base.config)
    from sova.driver.guest_agent import GuestAgent

    drv._agent = GuestAgent(exec_timeout_s=30)
    dom = dom_of(drv, "g2")
    try:
        st = wait_op(drv, drv.submit(AttachVF("g2")))
        assert st.state.value == "succeeded", st
        slot = drv.inventory().vms["g2"].vf_index
        assert slot is not None
        t0 = time.monotonic()
        st = wait_op(drv, drv.submit(DetachVF("g2")), 120)
        took = time.monotonic() - t0
        assert st.state.value == "failed", st
        assert "after 2 attempts" in st.detail and "not completed within 4s" in st.detail
        assert took < 60  # bounded: 2 attempts x (detach call + 4 s wait) + back-off
        assert drv.inventory().vms["g2"].vf_index == slot  # reported as still plugged
        dom.resume()
        assert guest_sh(dom, BOND).strip() in perm_macs(dom)  # guest alive, bond answers
        macs = perm_macs(dom)
        assert macs[guest_sh(dom, BOND).strip()] == lab.guest_mac(2)  # on the backup
        st = wait_op(drv, drv.submit(DetachVF("g2")), 120)
        assert st.state.value == "succeeded", st
    finally:
        if dom.info()[0] == 3:  # VIR_DOMAIN_PAUSED
            dom.resume()
        drv.close()


def test_agent_killed_during_a_plug_reconciles_from_the_live_xml(lab, tmp_path):
    """kill -9 of the process plugging a NIC; a fresh driver sees the truth in the XML,
    hands out no slot twice and can unplug what the dead one left."""
    import sys

    from sova.model import AttachVF, DetachVF

    code = f"""
import time
from pathlib import Path
from sova.driver.libvirt_driver import LibvirtDriver
from sova.lab.settings import LabSettings
from sova.model import AttachVF
s = LabSettings(root=Path({str(lab.root)!r}), prefix={lab.prefix!r})
drv = LibvirtDriver.open(s.uri('HV1'), host_name='HV1', fast_path='lab-nic',
    failover='guest-bond', lab_nic_bridge=s.fast_bridge,
    lab_nic_taps=(s.fast_tap('HV1', 0), s.fast_tap('HV1', 1)))
drv.submit(AttachVF('g1'))
print('submitted', flush=True)
time.sleep(60)
"""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "submitted"
    time.sleep(1.5)  # the attach is in flight (plug sent, guest enslaving)
    p.kill()
    p.wait(10)
    drv = open_driver(lab)
    try:
        time.sleep(3)
        inv = drv.inventory()
        holders = {v.vf_index for v in inv.vms.values() if v.vf_index is not None}
        assert len(holders) == sum(1 for v in inv.vms.values() if v.vf_index is not None)
        st = wait_op(drv, drv.submit(AttachVF("g2")))
        assert st.state.value == "succeeded", st
        inv = drv.inventory()
        idx = [v.vf_index for v in inv.vms.values() if v.vf_index is not None]
        assert len(idx) == len(set(idx))  # no slot double-assigned
        for g in ("g1", "g2"):
            st = wait_op(drv, drv.submit(DetachVF(g)))
            assert st.state.value == "succeeded", st
        assert all(v.vf_index is None for v in drv.inventory().vms.values())  # no orphan
    finally:
        drv.close()


@pytest.mark.parametrize("guest", ["g2"])
def test_live_migration_between_the_two_daemons(lab, guest):
    """HV1 → HV2 through the driver's production migration path; job stats on HV2."""
    import libvirt

    from sova.model import AttachVF, Migrate

    drv = open_driver(lab)
    ping = Pinger(lab, lab.guest_ip(2))
    try:
        st = wait_op(drv, drv.submit(AttachVF(guest)))
        assert st.state.value == "succeeded", st
        t0 = time.monotonic()
        st = wait_op(drv, drv.submit(Migrate(guest, "HV2")), 300)
        wall = time.monotonic() - t0
        assert st.state.value == "succeeded", st
    finally:
        gap, n = ping.stop()
        drv.close()
    from sova.lab.lab import connect

    c2 = connect(lab, "HV2")
    try:
        d2 = c2.lookupByName(guest)
        assert d2.isActive()
        js = d2.jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)
        print(
            f"migration wall {wall:.1f} s, libvirt time {js.get('time_elapsed')} ms, "
            f"downtime {js.get('downtime')} ms, ping gap {gap:.2f} s"
        )
        assert js.get("downtime", 10**6) < 5000
        from sova.driver.libvirt_xml import parse_domain

        assert not any(n.alias == "ua-sova-vf" for n in parse_domain(d2.XMLDesc(0)).nics)
        assert guest_sh(d2, BOND).strip() in perm_macs(d2)
    finally:
        c2.close()
    assert gap < 5.0
