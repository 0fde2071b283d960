"""PF discovery: which SR-IOV PF Sova hands VFs out of, its VFs, and who holds them."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sova.driver.libvirt_driver.connection import require_libvirt
from sova.driver.libvirt_xml import DomainInfo, NodeDevices, parse_domain, parse_nodedev


@dataclass(frozen=True)
class PFView:
    name: str  # netdev, "" when no SR-IOV PF was found
    pci: str = ""
    speed_mbit: int = 0
    vfs: dict[int, str] = field(default_factory=dict)  # VF index -> PCI address
    total_vfs: int = 0
    notes: tuple[str, ...] = ()

    def index_of(self, pci: str) -> int | None:
        for i, a in self.vfs.items():
            if a == pci:
                return i
        return None


def discover_pf(conn: Any, pf_name: str | None, sysfs_root: str) -> PFView:
    """The PF and its VFs: sysfs when readable (authoritative indices), else libvirt."""
    lv = require_libvirt()
    notes: list[str] = []
    nd = NodeDevices()
    try:
        for dev in conn.listAllDevices(0):
            with contextlib.suppress(lv.libvirtError):
                parse_nodedev(dev.XMLDesc(0), nd)
    except lv.libvirtError as e:
        notes.append(f"node devices not readable: {e}")
    candidates = [
        n
        for n in nd.net
        if n.parent in nd.pci and (nd.pci[n.parent].virt_functions or nd.pci[n.parent].max_vfs)
    ]
    name = pf_name or ""
    net = next((n for n in nd.net if n.interface == name), None) if name else None
    if not name:
        if not candidates:
            notes.append("no SR-IOV PF found (no PCI node device with virt_functions)")
            return PFView(name="", notes=tuple(notes))
        candidates.sort(key=lambda n: n.interface)
        net = candidates[0]
        name = net.interface
        if len(candidates) > 1:
            others = ", ".join(c.interface for c in candidates[1:])
            notes.append(f"several SR-IOV PFs ({name}, {others}); using {name} (set pf=…)")
    pci_dev = nd.pci.get(net.parent) if net is not None else None
    vfs: dict[int, str] = {}
    total = pci_dev.max_vfs if pci_dev else 0
    speed = net.speed_mbit if net is not None else 0
    dev_dir = Path(sysfs_root) / "class" / "net" / name / "device"
    if (dev_dir / "sriov_numvfs").exists():
        for entry in dev_dir.iterdir():
            if entry.name.startswith("virtfn") and entry.name[6:].isdigit():
                vfs[int(entry.name[6:])] = os.path.basename(os.readlink(entry))
        with contextlib.suppress(OSError, ValueError):
            total = int((dev_dir / "sriov_totalvfs").read_text().strip())
        with contextlib.suppress(OSError, ValueError):
            numvfs = int((dev_dir / "sriov_numvfs").read_text().strip())
            if numvfs != len(vfs):
                notes.append(f"sriov_numvfs={numvfs} but {len(vfs)} virtfn links")
    elif pci_dev is not None:
        vfs = dict(enumerate(pci_dev.virt_functions))
        notes.append("VF indices taken from libvirt's node-device order (sysfs not readable)")
    with contextlib.suppress(OSError, ValueError):
        s = int((dev_dir.parent / "speed").read_text().strip())
        if s > 0:
            speed = s
    if not vfs:
        notes.append(f"{name} has no VFs enabled (echo N > …/sriov_numvfs)")
    return PFView(
        name=name,
        pci=pci_dev.address if pci_dev else "",
        speed_mbit=speed,
        vfs=vfs,
        total_vfs=total,
        notes=tuple(notes),
    )


def vf_holders(conn: Any, pf: PFView) -> dict[str, tuple[str, str]]:
    """VF PCI -> (VM, "failover"|"plain-hostdev") over every running domain."""
    lv = require_libvirt()
    held: dict[str, tuple[str, str]] = {}
    vf_set = set(pf.vfs.values())
    for dom in conn.listAllDomains(lv.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
        try:
            info = parse_domain(dom.XMLDesc(0))
        except lv.libvirtError:
            continue  # vanished meanwhile
        for n in info.nics:
            if n.is_hostdev and n.pci in vf_set:
                held[n.pci] = (info.name, "failover" if n.teaming_type else "plain-hostdev")
        for p in info.plain_hostdev_pci:
            if p in vf_set:
                held[p] = (info.name, "plain-hostdev")
    return held


def held_vf(info: DomainInfo, pf: PFView) -> tuple[int | None, str]:
    """The VF index a domain holds and how ("failover" | "plain-hostdev"), or (None, "")."""
    vf = info.sova_vf()
    if vf is not None:
        idx = pf.index_of(vf.pci)
        return idx, ("failover" if vf.teaming_type == "transient" else "plain-hostdev")
    for p in info.plain_hostdev_pci:
        idx = pf.index_of(p)
        if idx is not None:
            return idx, "plain-hostdev"
    return None, ""
