"""Fast-path sources: where the NIC Sova hot-plugs for a VM comes from.

* ``sriov-vf`` (production): a VF of the host's SR-IOV PF, plugged as a ``hostdev``
  interface; rates and counters come from the PF over netlink (IFLA_VF_RATE/STATS).
* ``lab-nic`` (hosts without SR-IOV, e.g. the hypervisor lab): a virtio NIC on a dedicated
  fast bridge, one pre-named tap per slot; the host side of the tap enforces the tier rate
  both ways with HTB (and ifb for what the guest sends) — the rate limit a PF would enforce
  on a VF. Its traffic is counted on its tap like any virtio NIC.

Both present the same view to the driver: a numbered pool of slots (:class:`PFView`), which
domain holds which slot, the XML to plug and unplug one, and rate limits by slot.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Any, Protocol
from xml.sax.saxutils import quoteattr

from sova.driver.libvirt_driver.connection import require_libvirt
from sova.driver.libvirt_driver.pf import PFView, discover_pf, held_vf, vf_holders
from sova.driver.libvirt_driver.tap_shaping import ShapingError, TapShaper
from sova.driver.libvirt_xml import (
    SOVA_VF_ALIAS,
    DomainInfo,
    DomainNic,
    detach_xml_for,
    parse_domain,
    vf_interface_xml,
)
from sova.driver.netlink_vf import NetlinkVF, VFInfo, VFRateError
from sova.model import NICCapabilities


class RateError(Exception):
    """A rate could not be set on a slot; the message says why."""


class FastPathSource(Protocol):
    name: str

    def view(self) -> PFView: ...

    def holders(self, pf: PFView) -> dict[str, tuple[str, str]]: ...

    def held(self, info: DomainInfo, pf: PFView) -> tuple[int | None, str]: ...

    def nic(self, info: DomainInfo) -> DomainNic | None: ...

    def plug_xml(self, backup: DomainNic, slot: str, pairing: bool) -> str: ...

    def unplug_xml(self, nic: DomainNic) -> str: ...

    def migration_blocker(self, info: DomainInfo, pf: PFView) -> str: ...

    def probe(
        self, free: Callable[[], int | None], pf: PFView, read_only: bool
    ) -> tuple[NICCapabilities, list[str]]: ...

    def set_rate(self, idx: int, max_bps: float | None, min_bps: float | None) -> None: ...

    def after_plug(self, idx: int) -> str: ...

    def rates(self) -> dict[int, VFInfo]: ...


class SriovVF:
    """A VF of the PF, as a transient failover partner (``hostdev`` + ``<teaming>``)."""

    name = "sriov-vf"

    def __init__(
        self,
        conn: Callable[[], Any],
        pf: str | None,
        sysfs_root: str,
        netlink: Callable[[], NetlinkVF | None],
    ) -> None:
        self._conn = conn  # the driver's connection at the moment of use (it is replaced)
        self._pf = pf
        self._sysfs = sysfs_root
        self._netlink_of = netlink

    @property
    def netlink(self) -> NetlinkVF | None:
        return self._netlink_of()

    def view(self) -> PFView:
        return discover_pf(self._conn(), self._pf, self._sysfs)

    def holders(self, pf: PFView) -> dict[str, tuple[str, str]]:
        return vf_holders(self._conn(), pf)

    def held(self, info: DomainInfo, pf: PFView) -> tuple[int | None, str]:
        return held_vf(info, pf)

    def nic(self, info: DomainInfo) -> DomainNic | None:
        return info.sova_vf()

    def plug_xml(self, backup: DomainNic, slot: str, pairing: bool) -> str:
        return vf_interface_xml(backup.mac, slot, backup.alias)

    def unplug_xml(self, nic: DomainNic) -> str:
        return detach_xml_for(nic)

    def migration_blocker(self, info: DomainInfo, pf: PFView) -> str:
        plain = [p for p in info.plain_hostdev_pci if pf.index_of(p) is not None]
        vf = info.sova_vf()
        if plain or (vf is not None and vf.teaming_type != "transient"):
            return (
                f"{info.name} holds a VF without <teaming type='transient'>: libvirt cannot "
                "live-migrate it (convert it to a failover pair, docs/deployment.md)"
            )
        return ""

    def probe(
        self, free: Callable[[], int | None], pf: PFView, read_only: bool
    ) -> tuple[NICCapabilities, list[str]]:
        if self.netlink is None:
            return NICCapabilities(max_rate=False, min_rate=False, vf_stats=False), [
                "VF rates and counters unavailable: no netlink access to the PF"
            ]
        if read_only:
            return NICCapabilities(max_rate=False, min_rate=False, vf_stats=False), [
                "VF rates not probed: read-only connection (dry run never writes to the NIC)"
            ]
        probe = self.netlink.probe(free(), pf.speed_mbit)
        return NICCapabilities(probe.max_rate, probe.min_rate, probe.vf_stats), list(probe.notes)

    def set_rate(self, idx: int, max_bps: float | None, min_bps: float | None) -> None:
        if self.netlink is None:
            raise RateError("no netlink access to the PF: VF rates cannot be set")
        try:
            self.netlink.set_rate(idx, max_bps, min_bps)
        except VFRateError as e:
            raise RateError(str(e)) from e

    def after_plug(self, idx: int) -> str:
        return ""

    def rates(self) -> dict[int, VFInfo]:
        if self.netlink is None:
            return {}
        try:
            return self.netlink.vfs()
        except (VFRateError, OSError):
            # Counters and rates are optional; a netlink hiccup must not stop sampling.
            return {}


def slot_mac(tap: str) -> str:
    """A stable locally administered MAC per slot (the guest bond rewrites it anyway)."""
    h = hashlib.sha256(tap.encode()).digest()
    return "52:54:00:" + ":".join(f"{b:02x}" for b in h[:3])


class LabNic:
    """A virtio NIC on the fast bridge, its tap shaped on the host side (see module doc)."""

    name = "lab-nic"

    def __init__(
        self, conn: Callable[[], Any], bridge: str, taps: tuple[str, ...], speed_mbit: int
    ) -> None:
        self._conn = conn  # the driver's connection at the moment of use (it is replaced)
        self.bridge = bridge
        self.taps = taps
        self.speed_mbit = speed_mbit
        self._rates: dict[int, float | None] = {}
        self._lock = threading.Lock()

    def view(self) -> PFView:
        notes: tuple[str, ...] = ()
        if not self.taps:
            notes = ("lab-nic: no fast slots configured (lab_nic_taps)",)
        return PFView(
            name=self.bridge,
            speed_mbit=self.speed_mbit,
            vfs=dict(enumerate(self.taps)),
            total_vfs=len(self.taps),
            notes=notes,
        )

    def nic(self, info: DomainInfo) -> DomainNic | None:
        for n in info.nics:
            if n.alias == SOVA_VF_ALIAS and not n.is_hostdev:
                return n
        return None

    def held(self, info: DomainInfo, pf: PFView) -> tuple[int | None, str]:
        n = self.nic(info)
        if n is None:
            return None, ""
        return pf.index_of(n.target_dev), "lab-nic"

    def holders(self, pf: PFView) -> dict[str, tuple[str, str]]:
        lv = require_libvirt()
        held: dict[str, tuple[str, str]] = {}
        for dom in self._conn().listAllDomains(lv.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
            try:
                info = parse_domain(dom.XMLDesc(0))
            except lv.libvirtError:
                continue
            n = self.nic(info)
            if n is not None and n.target_dev in self.taps:
                held[n.target_dev] = (info.name, "lab-nic")
        return held

    def plug_xml(self, backup: DomainNic, slot: str, pairing: bool) -> str:
        return (
            "<interface type='bridge'>\n"
            f"  <mac address={quoteattr(slot_mac(slot))}/>\n"
            f"  <source bridge={quoteattr(self.bridge)}/>\n"
            f"  <target dev={quoteattr(slot)}/>\n"
            "  <model type='virtio'/>\n"
            f"  <alias name={quoteattr(SOVA_VF_ALIAS)}/>\n"
            "</interface>\n"
        )

    def unplug_xml(self, nic: DomainNic) -> str:
        return (
            "<interface type='bridge'>\n"
            f"  <mac address={quoteattr(nic.mac)}/>\n"
            f"  <source bridge={quoteattr(self.bridge)}/>\n"
            "  <model type='virtio'/>\n"
            "</interface>\n"
        )

    def migration_blocker(self, info: DomainInfo, pf: PFView) -> str:
        return ""  # a virtio NIC migrates; Sova unplugs it first anyway

    def probe(
        self, free: Callable[[], int | None], pf: PFView, read_only: bool
    ) -> tuple[NICCapabilities, list[str]]:
        notes = [
            f"fast path: lab-nic (virtio on {self.bridge}, {len(self.taps)} slots); "
            "tier rate enforced host-side with HTB on the tap (ifb for guest egress), "
            "not libvirt <bandwidth>"
        ]
        return NICCapabilities(max_rate=True, min_rate=False, vf_stats=False), notes

    def _shape(self, idx: int) -> str:
        shaper = TapShaper(self.taps[idx])
        if not shaper.exists():
            return ""
        with self._lock:
            # No tier given: the slot's line rate, as a PF caps every VF at the port speed.
            rate = self._rates.get(idx) or self.speed_mbit * 1e6
        try:
            return shaper.apply(rate)
        except ShapingError as e:
            raise RateError(str(e)) from e

    def set_rate(self, idx: int, max_bps: float | None, min_bps: float | None) -> None:
        with self._lock:
            self._rates[idx] = max_bps
        self._shape(idx)

    def after_plug(self, idx: int) -> str:
        try:
            done = self._shape(idx)
        except RateError as e:
            return f"; tier rate not applied: {e}"
        return f"; {done}" if done else ""

    def rates(self) -> dict[int, VFInfo]:
        with self._lock:
            return {
                i: VFInfo(index=i, mac="", max_tx_mbit=int((r or 0) / 1e6), min_tx_mbit=0)
                for i, r in self._rates.items()
            }
