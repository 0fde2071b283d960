"""What the host holds, read from libvirt: its capabilities (probed on the NIC, not
assumed, once), the VMs with their SLAs and fast paths, and per-VM findings for the
operator."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from sova.driver.base import Capabilities, DriverError
from sova.driver.libvirt_driver.connection import require_libvirt
from sova.driver.libvirt_driver.context import DriverContext
from sova.driver.libvirt_driver.tap_shaping import libvirt_bandwidth_usable
from sova.driver.libvirt_xml import parse_domain
from sova.model import (
    NIC,
    SLA,
    VM,
    Host,
    Inventory,
    NicKind,
    ResourceTuple,
    VMState,
)


@dataclass(frozen=True)
class VMReport:
    """What the driver found about one VM that the operator should read."""

    name: str
    running: bool
    failover_ready: bool
    reason: str = ""
    vf_index: int | None = None
    vf_kind: str = ""  # "failover" | "plain-hostdev" | ""


class HostInventory:
    """Capabilities, inventory and the operator's per-VM report of one host."""

    def __init__(self, ctx: DriverContext) -> None:
        self._ctx = ctx
        self._caps: Capabilities | None = None
        self._caps_lock = threading.Lock()

    def capabilities(self) -> Capabilities:
        # One probe at a time: probing writes to a free VF and restores it.
        with self._caps_lock:
            if self._caps is None:
                self._caps = self._probe()
            return self._caps

    def refresh_capabilities(self) -> Capabilities:
        self._caps = None
        return self.capabilities()

    def _probe(self) -> Capabilities:
        self._ctx.connected()
        pf = self._ctx.pf_view()
        notes = list(pf.notes)
        pool = (
            len(pf.vfs)
            if self._ctx.config.vf_pool is None
            else min(self._ctx.config.vf_pool, len(pf.vfs))
        )

        def free() -> int | None:
            held = self._ctx.fast.holders(pf)
            return next((i for i, a in sorted(pf.vfs.items()) if a not in held), None)

        nic, more = self._ctx.fast.probe(free, pf, self._ctx.config.read_only)
        notes.extend(more)
        fast, failover = self._ctx.fast.name, self._ctx.failover.name
        notes.append(f"strategies: fast path {fast}, failover {failover}")
        if fast == "lab-nic" and failover == "teaming":
            notes.append(
                "teaming needs a hostdev VF (libvirt refuses transient teaming on a virtio "
                "NIC): no VM is failover-ready; use failover = 'guest-bond'"
            )
        ok, why = libvirt_bandwidth_usable()
        self._ctx.bandwidth_usable = ok
        notes.append(why)
        if not nic.min_rate:
            fallback = (
                "guest-side HTB through the guest agent"
                if self._ctx.agent
                else "libvirt <bandwidth> on the virtio path (host side)"
                if ok
                else "HTB on the virtio tap (host side)"
            )
            notes.append(f"min_tx_rate not available at the VF; fallback: {fallback}")
        if fast == "sriov-vf" and not nic.vf_stats:
            notes.append(
                "VF counters unavailable; fallback: "
                + (
                    "every VM counted inside the guest (guest agent), a silent agent's VM on "
                    "its tap (which misses its VF traffic)"
                    if self._ctx.agent
                    else "none: a VM's VF traffic is invisible (taps carry only the virtio "
                    "path); run the agent with a guest agent channel"
                )
            )
        return Capabilities(
            host=self._ctx.host_name(),
            vf_total=len(pf.vfs),
            vf_pool=pool,
            nic=nic,
            can_migrate=not self._ctx.config.read_only,
            guest_agent=self._ctx.agent is not None,
            notes=tuple(notes),
        )

    def vm_reports(self) -> list[VMReport]:
        """Per-VM findings for the operator: failover readiness and the VF each holds."""
        lv = require_libvirt()
        self._ctx.connected()
        pf = self._ctx.pf_view()
        out: list[VMReport] = []
        for dom in self._ctx.conn.listAllDomains(0):
            try:
                info = parse_domain(dom.XMLDesc(0))
                running = bool(dom.isActive())
            except lv.libvirtError:
                continue
            r = self._ctx.failover.readiness(info)
            vf_idx, kind = self._ctx.fast.held(info, pf)
            reason = r.reason
            if kind == "plain-hostdev":
                reason = (reason + "; " if reason else "") + (
                    "holds a VF as plain hostdev (no teaming): cannot live-migrate"
                )
            out.append(VMReport(info.name, running, r.ready, reason, vf_idx, kind))
        return sorted(out, key=lambda r: r.name)

    def inventory(self) -> Inventory:
        lv = require_libvirt()
        self._ctx.connected()
        pf = self._ctx.pf_view()
        caps = self.capabilities()
        vf_table = self._ctx.fast.rates()
        migrating = self._ctx.migrating_now()
        vms: dict[str, VMState] = {}
        try:
            doms = self._ctx.conn.listAllDomains(0)
        except lv.libvirtError as e:
            raise DriverError(f"cannot list domains: {e}") from e
        for seq, dom in enumerate(doms):
            try:
                info = parse_domain(dom.XMLDesc(0))
                running = bool(dom.isActive())
            except lv.libvirtError:
                continue
            vf_idx, _kind = self._ctx.fast.held(info, pf)
            ready = self._ctx.failover.readiness(info)
            backup = self._ctx.failover.backup(info)
            rates = vf_table.get(vf_idx) if vf_idx is not None else None
            sla = SLA()
            if info.sla is not None:
                s = info.sla
                sla = SLA(
                    bandwidth=ResourceTuple(
                        minimum=s.min_bps, default=s.min_bps, maximum=s.max_bps
                    ),
                    max_pps=s.max_pps,
                    priority=s.priority,
                    weight=s.weight,
                )
            vms[info.name] = VMState(
                vm=VM(info.name, info.vcpus, info.memory_bytes, sla=sla, created_seq=seq),
                nic=NicKind.VF if vf_idx is not None else NicKind.VIRTIO,
                vf_index=vf_idx,
                vf_max_bps=(rates.max_tx_mbit * 1e6 or None) if rates else None,
                vf_min_bps=(rates.min_tx_mbit * 1e6 or None) if rates else None,
                failover_ready=ready.ready,
                backup_link_up=backup is not None and backup.link_state != "down",
                running=running,
                migrating=info.name in migrating,
            )
        try:
            info_h = self._ctx.conn.getInfo()
            cores, mem = int(info_h[2]), int(info_h[1]) * 1024 * 1024
        except lv.libvirtError:
            cores, mem = 0, 0
        if self._ctx.config.host_cpus is not None:
            cores = self._ctx.config.host_cpus
        if self._ctx.config.host_memory_mib is not None:
            mem = self._ctx.config.host_memory_mib * 1024 * 1024
        nic = NIC(
            name=pf.name,
            capacity_bps=pf.speed_mbit * 1e6,
            vf_pool=caps.vf_pool,
            caps=caps.nic,
        )
        return Inventory(host=Host(self._ctx.host_name(), cores, mem, nic), vms=vms)
