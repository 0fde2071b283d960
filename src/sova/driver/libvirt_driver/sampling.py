"""Cumulative counters per domain and per host (black box, or gray box via the guest agent)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sova.driver.base import DriverError
from sova.driver.guest_agent import GuestAgent, GuestAgentError
from sova.driver.libvirt_driver.connection import require_libvirt
from sova.driver.libvirt_driver.context import DriverContext
from sova.driver.libvirt_driver.inventory import HostInventory
from sova.driver.libvirt_driver.pf import PFView, held_vf
from sova.driver.libvirt_xml import DomainInfo, parse_domain
from sova.driver.netlink_vf import VFInfo
from sova.model import HostCounters, HostSample, VMCounters

STATS_WANTED = (
    "VIR_DOMAIN_STATS_STATE",
    "VIR_DOMAIN_STATS_CPU_TOTAL",
    "VIR_DOMAIN_STATS_VCPU",
    "VIR_DOMAIN_STATS_INTERFACE",
    "VIR_DOMAIN_STATS_BALLOON",
)


def domain_stats(conn: Any) -> list[tuple[Any, dict[str, Any]]]:
    """One ``getAllDomainStats`` call; per-domain fallback where the server lacks it."""
    lv = require_libvirt()
    want = 0
    for name in STATS_WANTED:
        want |= getattr(lv, name)
    try:
        records = conn.getAllDomainStats(want, lv.VIR_CONNECT_GET_ALL_DOMAINS_STATS_ACTIVE)
    except lv.libvirtError:
        try:
            records = [(d, {}) for d in conn.listAllDomains(lv.VIR_CONNECT_LIST_DOMAINS_ACTIVE)]
        except lv.libvirtError as e:
            raise DriverError(f"cannot list domains: {e}") from e
    return [(dom, dict(st)) for dom, st in records]


log = logging.getLogger("sova.driver.libvirt")


def sample_domain(
    dom: Any,
    st: dict[str, Any],
    pf: PFView,
    vf_table: dict[int, VFInfo],
    agent: GuestAgent | None,
    silent: set[str] | None = None,
) -> VMCounters:
    """Counters of one domain; ``agent`` given = gray box (the guest's own netdev counters).

    A guest agent that does not answer degrades that VM to black-box (host-side) counters,
    logged once when it starts and once when it ends; ``silent`` remembers which VMs are.
    """
    info = parse_domain(dom.XMLDesc(0))
    dinfo: list[Any] | None = None

    def domain_info() -> list[Any]:
        nonlocal dinfo
        if dinfo is None:
            dinfo = list(dom.info())
        return dinfo

    cpu_time = st.get("cpu.time")
    if cpu_time is None:
        cpu_time = domain_info()[4]
    vcpus = int(st.get("vcpu.current") or info.vcpus or domain_info()[3])
    # vcpu.N.delay is time runnable but not running: steal, needed for Sova's IF (§2).
    steal = sum(
        int(st.get(f"vcpu.{i}.delay", 0)) for i in range(int(st.get("vcpu.maximum", vcpus)))
    )

    per_mac = _tap_counters(dom, st, info)
    vf_idx, _ = held_vf(info, pf)
    vf = vf_table.get(vf_idx) if vf_idx is not None else None
    if vf is not None and vf.rx_bytes is not None:
        # The VF's traffic bypasses the tap; the PF counts it for us. Added to the
        # virtio MAC's counters: the sensing layer sees one VM NIC that never moved.
        held = info.sova_vf()
        nic_mac = vf.mac or (held.mac if held is not None else "")
        acc = per_mac.setdefault(nic_mac, [0, 0, 0, 0])
        acc[0] += vf.rx_bytes or 0
        acc[1] += vf.tx_bytes or 0
        acc[2] += vf.rx_packets or 0
        acc[3] += vf.tx_packets or 0
    if agent is not None:
        per_mac = _gray_box(agent, dom, info, silent, per_mac)
    totals = [sum(v[k] for v in per_mac.values()) for k in range(4)]
    mem_used = 0
    if "balloon.rss" in st:
        mem_used = int(st["balloon.rss"]) * 1024
    elif "balloon.current" in st:
        mem_used = int(st["balloon.current"]) * 1024
    else:
        with contextlib.suppress(Exception):
            mem_used = int(domain_info()[2]) * 1024
    return VMCounters(
        vm=info.name,
        vcpus=vcpus,
        cpu_time_ns=int(cpu_time),
        steal_ns=steal,
        rx_bytes=totals[0],
        tx_bytes=totals[1],
        rx_packets=totals[2],
        tx_packets=totals[3],
        memory_used_bytes=mem_used,
    )


def _tap_counters(dom: Any, st: dict[str, Any], info: DomainInfo) -> dict[str, list[int]]:
    """Host-side counters per virtio MAC (taps are matched by MAC: their names change):
    [rx_bytes, tx_bytes, rx_pkts, tx_pkts]."""
    lv = require_libvirt()
    per_mac: dict[str, list[int]] = {}  # mac -> rx_bytes, tx_bytes, rx_pkts, tx_pkts
    tap_to_mac = {n.target_dev: n.mac for n in info.nics if n.target_dev}
    if "net.count" in st:
        for i in range(int(st["net.count"])):
            tap = str(st.get(f"net.{i}.name", ""))
            key = tap_to_mac.get(tap, tap)
            acc = per_mac.setdefault(key, [0, 0, 0, 0])
            acc[0] += int(st.get(f"net.{i}.rx.bytes", 0))
            acc[1] += int(st.get(f"net.{i}.tx.bytes", 0))
            acc[2] += int(st.get(f"net.{i}.rx.pkts", 0))
            acc[3] += int(st.get(f"net.{i}.tx.pkts", 0))
    else:
        for n in info.nics:
            if n.is_hostdev or not (n.target_dev or n.mac):
                continue
            try:
                s = dom.interfaceStats(n.target_dev or n.mac)
            except lv.libvirtError:
                continue
            acc = per_mac.setdefault(n.mac, [0, 0, 0, 0])
            acc[0] += int(s[0])
            acc[1] += int(s[4])
            acc[2] += int(s[1])
            acc[3] += int(s[5])
    return per_mac


def _gray_box(
    agent: GuestAgent,
    dom: Any,
    info: DomainInfo,
    silent: set[str] | None,
    per_mac: dict[str, list[int]],
) -> dict[str, list[int]]:
    """The guest's own counters, or ``per_mac`` (host side) while its agent is silent."""
    quiet = silent if silent is not None else set()
    try:
        per_mac = guest_counters(agent, dom, info) or per_mac
    except GuestAgentError as e:
        if info.name not in quiet:
            log.warning(
                "guest agent of %s not answering (%s): sampling it black-box "
                "(host-side counters) until it answers",
                info.name,
                e,
            )
            quiet.add(info.name)
    else:
        if info.name in quiet:
            log.info("guest agent of %s answers again: gray-box counters", info.name)
            quiet.discard(info.name)
    return per_mac


def guest_counters(agent: GuestAgent, dom: Any, info: DomainInfo) -> dict[str, list[int]]:
    """Gray-box counters: per MAC, the guest netdev with the most traffic.

    Under net_failover the master, its standby and the VF primary share one MAC, and
    the master's counters include both slaves': taking the largest avoids double counting.
    """
    macs = {n.mac for n in info.nics if n.mac}
    out: dict[str, list[int]] = {}
    for gi in agent.interfaces(dom):
        if gi.mac not in macs:
            continue
        cur = out.get(gi.mac)
        vals = [gi.rx_bytes, gi.tx_bytes, gi.rx_packets, gi.tx_packets]
        if cur is None or vals[0] + vals[1] > cur[0] + cur[1]:
            out[gi.mac] = vals
    return out


def host_totals(conn: Any, pf: PFView, sysfs_root: str) -> HostCounters:
    lv = require_libvirt()
    busy = 0
    with contextlib.suppress(lv.libvirtError):
        cpu = conn.getCPUStats(lv.VIR_NODE_CPU_STATS_ALL_CPUS, 0)
        busy = int(cpu.get("kernel", 0)) + int(cpu.get("user", 0))
    mem_used = 0
    with contextlib.suppress(lv.libvirtError):
        m = conn.getMemoryStats(lv.VIR_NODE_MEMORY_STATS_ALL_CELLS, 0)
        free = m.get("free", 0) + m.get("buffers", 0) + m.get("cached", 0)
        mem_used = int(m.get("total", 0) - free) * 1024
    rx = tx = 0
    if pf.name:
        stats = Path(sysfs_root) / "class" / "net" / pf.name / "statistics"
        with contextlib.suppress(OSError, ValueError):
            rx = int((stats / "rx_bytes").read_text())
            tx = int((stats / "tx_bytes").read_text())
    return HostCounters(busy, rx, tx, mem_used)


class DomainTotals:
    """Host totals as the sum of this daemon's domains (``host_totals = "domains"``).

    The counters are cumulative like a node's, but only over work done *here*: each period
    adds the growth of every domain seen in the previous sample too. A domain that arrives
    (migrated in) adds nothing for its past, and one that leaves takes nothing back, so
    the host's busy counter never jumps or runs backwards when a VM moves. Memory is a
    level: what the running domains use now.
    """

    def __init__(self) -> None:
        self._prev: dict[str, VMCounters] = {}
        self._acc = [0, 0, 0]  # cpu ns, rx bytes, tx bytes

    def update(self, vms: dict[str, VMCounters]) -> HostCounters:
        for name, c in vms.items():
            p = self._prev.get(name)
            if p is None:
                continue
            # a counter that went back (reboot, re-plugged NIC) restarts from its new value
            self._acc[0] += max(0, c.cpu_time_ns - p.cpu_time_ns)
            self._acc[1] += max(0, c.rx_bytes - p.rx_bytes)
            self._acc[2] += max(0, c.tx_bytes - p.tx_bytes)
        self._prev = dict(vms)
        mem = sum(c.memory_used_bytes for c in vms.values())
        return HostCounters(self._acc[0], self._acc[1], self._acc[2], mem)


class Sampler:
    """One host sample: every domain's counters (black box on the host, or gray box inside
    the guest) and the host's totals, stamped with the driver's clock."""

    def __init__(
        self, ctx: DriverContext, inventory: HostInventory, now: Callable[[], float]
    ) -> None:
        self._ctx = ctx
        self._inventory = inventory
        self._now = now
        self._agent_silent: set[str] = set()  # VMs sampled black-box: their agent is silent
        self._domain_totals = DomainTotals()  # host_totals = "domains"

    def sample(self) -> HostSample:
        ctx = self._ctx
        ctx.connected()
        t = self._now()
        pf = ctx.pf_view()
        vf_table = ctx.fast.rates()
        lv = require_libvirt()
        gray = ctx.agent if self._gray_box() else None
        if not self._inventory.capabilities().nic.vf_stats:
            vf_table = {}  # zeros from a driver that does not count per VF are no counters
        vms: dict[str, VMCounters] = {}
        for dom, st in domain_stats(ctx.conn):
            try:
                c = sample_domain(dom, st, pf, vf_table, gray, self._agent_silent)
            except lv.libvirtError:
                continue  # domain went away between listing and reading
            vms[c.vm] = c
        totals = (
            self._domain_totals.update(vms)
            if ctx.config.host_totals == "domains"
            else host_totals(ctx.conn, pf, ctx.config.sysfs_root)
        )
        return HostSample(ctx.host_name(), t, vms, totals)

    def _gray_box(self) -> bool:
        """Sample inside the guests: when configured, or when the PF's VF counters are
        unusable (igb) so that a VF-holding VM is not seen as idle. All VMs switch
        together, from the first sample: one VM's counters never change source mid-run."""
        if self._ctx.config.sampling == "guest-agent":
            return True
        return self._ctx.fast.name == "sriov-vf" and not self._inventory.capabilities().nic.vf_stats
