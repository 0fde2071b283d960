"""Reading and writing the few pieces of libvirt XML the production driver cares about.

Kept apart from the driver so that the rules an operator has to get right — what makes a
virtio interface a failover backup, what the VF interface Sova hot-plugs looks like — live in
one small module with no libvirt import, testable on plain strings and validated against
libvirt's own RelaxNG schemas (``virt-xml-validate``) in the test suite.

Why interfaces are keyed by MAC and never by tap name: libvirt renames taps (``vnet0``
becomes ``vnet7`` after a restart or migration, the test driver calls it ``testnet0``), while
the MAC is what the guest's ``net_failover`` pairs the VF with the virtio backup by.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from xml.sax.saxutils import quoteattr

GUEST_AGENT_CHANNEL = "org.qemu.guest_agent.0"
#: libvirt only accepts user aliases with this prefix; `<teaming persistent=…>` must name one.
USER_ALIAS_PREFIX = "ua-"
#: Alias of the VF interface Sova plugs; a VM holds at most one VF, so one name suffices and
#: makes detach idempotent (the alias identifies "our" VF even after an agent restart).
SOVA_VF_ALIAS = "ua-sova-vf"

#: Namespace of Sova's per-VM SLA in the domain's ``<metadata>`` element.
SOVA_METADATA_NS = "https://sova.dev/xmlns/libvirt/1"


def pci_address(domain: int, bus: int, slot: int, function: int) -> str:
    """Canonical sysfs spelling, ``0000:03:10.2`` — the one key shared by sysfs and libvirt."""
    return f"{domain:04x}:{bus:02x}:{slot:02x}.{function:x}"


def _int(text: str | None) -> int:
    if text is None or not text.strip():
        return 0
    return int(text.strip(), 0)


def _pci_from_attrs(el: ET.Element) -> str:
    return pci_address(
        _int(el.get("domain")), _int(el.get("bus")), _int(el.get("slot")), _int(el.get("function"))
    )


def pci_attrs(addr: str) -> dict[str, str]:
    """Inverse of :func:`pci_address`, as libvirt's `<address type='pci' …>` attributes."""
    dom, bus, rest = addr.split(":")
    slot, fn = rest.split(".")
    return {
        "domain": f"0x{int(dom, 16):04x}",
        "bus": f"0x{int(bus, 16):02x}",
        "slot": f"0x{int(slot, 16):02x}",
        "function": f"0x{int(fn, 16):x}",
    }


# --------------------------------------------------------------------------- domains


@dataclass(frozen=True)
class DomainNic:
    """One `<interface>` of a domain, reduced to what failover and sampling need."""

    type: str  # libvirt interface type: network, bridge, hostdev, …
    mac: str  # lower case; "" when libvirt has not assigned one (inactive XML)
    model: str = ""  # virtio, e1000e, … ("" for hostdev)
    alias: str = ""
    target_dev: str = ""  # tap name, volatile
    teaming_type: str = ""  # persistent | transient | ""
    teaming_persistent: str = ""  # for transient: alias of the paired virtio interface
    link_state: str = "up"  # libvirt's <link state>; absent means up
    pci: str = ""  # hostdev interfaces: the VF's PCI address

    @property
    def is_hostdev(self) -> bool:
        return self.type == "hostdev"

    @property
    def is_virtio(self) -> bool:
        return self.type != "hostdev" and self.model == "virtio"


@dataclass(frozen=True)
class SlaHint:
    """Operator-declared SLA read from the domain's `<metadata>` (all bit/s); optional."""

    min_bps: float = 0.0
    max_bps: float | None = None
    max_pps: float | None = None
    priority: int = 0
    weight: float = 1.0


@dataclass(frozen=True)
class DomainInfo:
    name: str
    vcpus: int
    memory_bytes: int
    machine: str = ""
    nics: tuple[DomainNic, ...] = ()
    plain_hostdev_pci: tuple[str, ...] = ()  # `<hostdev>` PCI devices: not live-migratable
    sla: SlaHint | None = None
    # A virtio-serial channel named org.qemu.guest_agent.0: the guest agent can be reached
    # (Nova adds it for images with hw_qemu_guest_agent=yes).
    guest_agent_channel: bool = False

    def failover_backup(self) -> DomainNic | None:
        """The virtio interface the VF would pair with (first one with persistent teaming)."""
        for n in self.nics:
            if n.is_virtio and n.teaming_type == "persistent":
                return n
        return None

    def sova_vf(self) -> DomainNic | None:
        """The VF interface this VM holds, Sova-plugged or not (first hostdev interface)."""
        ours = [n for n in self.nics if n.is_hostdev and n.alias == SOVA_VF_ALIAS]
        if ours:
            return ours[0]
        others = [n for n in self.nics if n.is_hostdev]
        return others[0] if others else None


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reason: str = ""


def failover_readiness(info: DomainInfo) -> Readiness:
    """Whether a VF may be hot-plugged into this VM with the virtio interface as backup.

    Without `<teaming type='persistent'/>` and a user alias on the virtio interface libvirt
    cannot pair the VF, and the guest's net_failover would see two unrelated NICs: traffic
    would blackhole when the VF is pulled. Such a VM is reported and never gets a VF.
    """
    virtio = [n for n in info.nics if n.is_virtio]
    if not virtio:
        return Readiness(False, "no virtio interface to act as the failover backup")
    backup = info.failover_backup()
    if backup is None:
        return Readiness(
            False,
            "virtio interface has no <teaming type='persistent'/> "
            "(see docs/deployment.md, 'The virtio interface')",
        )
    if not backup.alias.startswith(USER_ALIAS_PREFIX):
        return Readiness(
            False,
            f"virtio failover interface needs a user alias '{USER_ALIAS_PREFIX}…' "
            f"(has {backup.alias or 'none'!r}) for <teaming persistent=…> to name it",
        )
    if not backup.mac:
        return Readiness(False, "virtio failover interface has no MAC address")
    if info.machine and "q35" not in info.machine:
        return Readiness(False, f"machine type {info.machine!r} is not q35 (no PCIe hot-plug)")
    return Readiness(True)


def _parse_sla(root: ET.Element) -> SlaHint | None:
    meta = root.find("metadata")
    if meta is None:
        return None
    el = meta.find(f"{{{SOVA_METADATA_NS}}}sla")
    if el is None:
        return None

    def opt(name: str) -> float | None:
        v = el.get(name)
        return float(v) if v not in (None, "") else None

    return SlaHint(
        min_bps=opt("min_bps") or 0.0,
        max_bps=opt("max_bps"),
        max_pps=opt("max_pps"),
        priority=int(el.get("priority", "0")),
        weight=opt("weight") or 1.0,
    )


def parse_domain(xml: str) -> DomainInfo:
    root = ET.fromstring(xml)
    name = root.findtext("name", "")
    vcpus = _int(root.findtext("vcpu")) or 1
    mem = root.find("currentMemory")
    if mem is None:
        mem = root.find("memory")
    memory_bytes = 0
    if mem is not None and mem.text:
        unit = (mem.get("unit") or "KiB").lower()
        scale = {"b": 1, "bytes": 1, "kib": 1024, "k": 1024, "mib": 1024**2, "m": 1024**2}
        scale |= {"gib": 1024**3, "g": 1024**3, "kb": 1000, "mb": 1000**2, "gb": 1000**3}
        memory_bytes = int(mem.text.strip()) * scale.get(unit, 1024)
    os_type = root.find("os/type")
    machine = os_type.get("machine", "") if os_type is not None else ""

    nics: list[DomainNic] = []
    hostdevs: list[str] = []
    devices = root.find("devices")
    if devices is not None:
        for iface in devices.findall("interface"):
            mac_el = iface.find("mac")
            model_el = iface.find("model")
            alias_el = iface.find("alias")
            target_el = iface.find("target")
            team_el = iface.find("teaming")
            link_el = iface.find("link")
            pci = ""
            src_addr = iface.find("source/address")
            if iface.get("type") == "hostdev" and src_addr is not None:
                pci = _pci_from_attrs(src_addr)
            nics.append(
                DomainNic(
                    type=iface.get("type", ""),
                    mac=(mac_el.get("address", "") if mac_el is not None else "").lower(),
                    model=model_el.get("type", "") if model_el is not None else "",
                    alias=alias_el.get("name", "") if alias_el is not None else "",
                    target_dev=target_el.get("dev", "") if target_el is not None else "",
                    teaming_type=team_el.get("type", "") if team_el is not None else "",
                    teaming_persistent=team_el.get("persistent", "") if team_el is not None else "",
                    link_state=link_el.get("state", "up") if link_el is not None else "up",
                    pci=pci,
                )
            )
        for hd in devices.findall("hostdev"):
            addr = hd.find("source/address")
            if hd.get("type") == "pci" and addr is not None:
                hostdevs.append(_pci_from_attrs(addr))
    return DomainInfo(
        name=name,
        vcpus=vcpus,
        memory_bytes=memory_bytes,
        machine=machine,
        nics=tuple(nics),
        plain_hostdev_pci=tuple(hostdevs),
        sla=_parse_sla(root),
        guest_agent_channel=devices is not None
        and any(
            (t := ch.find("target")) is not None and t.get("name") == GUEST_AGENT_CHANNEL
            for ch in devices.findall("channel")
        ),
    )


def vf_interface_xml(mac: str, vf_pci: str, persistent_alias: str) -> str:
    """The VF interface Sova hot-plugs: a transient failover partner of the virtio backup.

    `managed='yes'` lets libvirt bind the VF to vfio-pci and back; the MAC is the backup's,
    which is how the guest's net_failover enslaves both under one netdev.
    """
    a = pci_attrs(vf_pci)
    addr = " ".join(f"{k}={quoteattr(v)}" for k, v in a.items())
    return (
        "<interface type='hostdev' managed='yes'>\n"
        f"  <mac address={quoteattr(mac.lower())}/>\n"
        f"  <source>\n    <address type='pci' {addr}/>\n  </source>\n"
        f"  <teaming type='transient' persistent={quoteattr(persistent_alias)}/>\n"
        f"  <alias name={quoteattr(SOVA_VF_ALIAS)}/>\n"
        "</interface>\n"
    )


def detach_xml_for(nic: DomainNic) -> str:
    """Enough of the VF interface for libvirt to find it on detach (MAC + PCI source)."""
    a = pci_attrs(nic.pci)
    addr = " ".join(f"{k}={quoteattr(v)}" for k, v in a.items())
    teaming = ""
    if nic.teaming_type == "transient" and nic.teaming_persistent:
        teaming = f"  <teaming type='transient' persistent={quoteattr(nic.teaming_persistent)}/>\n"
    return (
        "<interface type='hostdev' managed='yes'>\n"
        f"  <mac address={quoteattr(nic.mac)}/>\n"
        f"  <source>\n    <address type='pci' {addr}/>\n  </source>\n"
        f"{teaming}"
        "</interface>\n"
    )


# --------------------------------------------------------------------------- node devices


@dataclass(frozen=True)
class PciNodeDev:
    name: str
    address: str
    virt_functions: tuple[str, ...] = ()  # VF PCI addresses, in libvirt's order
    max_vfs: int = 0
    phys_function: str = ""


@dataclass(frozen=True)
class NetNodeDev:
    name: str
    interface: str
    mac: str
    parent: str
    speed_mbit: int = 0
    link_state: str = ""


@dataclass
class NodeDevices:
    pci: dict[str, PciNodeDev] = field(default_factory=dict)  # by node device name
    net: list[NetNodeDev] = field(default_factory=list)


def parse_nodedev(xml: str, into: NodeDevices) -> None:
    root = ET.fromstring(xml)
    name = root.findtext("name", "")
    parent = root.findtext("parent", "")
    for cap in root.findall("capability"):
        kind = cap.get("type")
        if kind == "pci":
            addr = pci_address(
                _int(cap.findtext("domain")),
                _int(cap.findtext("bus")),
                _int(cap.findtext("slot")),
                _int(cap.findtext("function")),
            )
            vfs: tuple[str, ...] = ()
            max_vfs = 0
            pf = ""
            for sub in cap.findall("capability"):
                if sub.get("type") == "virt_functions":
                    vfs = tuple(_pci_from_attrs(a) for a in sub.findall("address"))
                    max_vfs = _int(sub.get("maxCount"))
                elif sub.get("type") == "phys_function":
                    a = sub.find("address")
                    if a is not None:
                        pf = _pci_from_attrs(a)
            into.pci[name] = PciNodeDev(name, addr, vfs, max_vfs, pf)
        elif kind == "net":
            link = cap.find("link")
            into.net.append(
                NetNodeDev(
                    name=name,
                    interface=cap.findtext("interface", ""),
                    mac=cap.findtext("address", "").lower(),
                    parent=parent,
                    speed_mbit=_int(link.get("speed")) if link is not None else 0,
                    link_state=link.get("state", "") if link is not None else "",
                )
            )
