"""A scripted stand-in for what libvirt's test driver cannot do: hot-plug, migration, agent.

It speaks libvirt-python's own interfaces (``virConnect``/``virDomain`` method names and
signatures, event callbacks with libvirt's argument order) and fails the way libvirt does:
by raising ``libvirt.libvirtError`` carrying an error code, or by sending — or never
sending — DEVICE_REMOVED / DEVICE_REMOVAL_FAILED from another thread, later.
"""

from __future__ import annotations

import base64
import json
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

import libvirt  # type: ignore[import-untyped]

EVENT_DELAY_S = 0.02


def lv_error(message: str, code: int = libvirt.VIR_ERR_OPERATION_FAILED) -> Any:
    e = libvirt.libvirtError(message)
    e.err = (code, libvirt.VIR_FROM_QEMU, message, libvirt.VIR_ERR_ERROR, None, None, None, 0, 0)
    return e


def domain_xml(name: str, nics: str, vcpus: int = 2) -> str:
    return (
        f"<domain type='kvm'><name>{name}</name><memory unit='MiB'>1024</memory>"
        f"<vcpu>{vcpus}</vcpu><os><type arch='x86_64' machine='pc-q35-7.2'>hvm</type></os>"
        f"<devices>{nics}</devices></domain>"
    )


def virtio(mac: str, teaming: bool = True, link: str | None = None, dev: str = "vnet3") -> str:
    team = "<teaming type='persistent'/><alias name='ua-net0'/>" if teaming else ""
    ln = f"<link state='{link}'/>" if link else ""
    return (
        f"<interface type='bridge'><mac address='{mac}'/><source bridge='br0'/>"
        f"<target dev='{dev}'/><model type='virtio'/>{ln}{team}</interface>"
    )


def vf_iface(mac: str, fn: int = 0) -> str:
    return (
        f"<interface type='hostdev' managed='yes'><mac address='{mac}'/><source>"
        f"<address type='pci' domain='0x0000' bus='0x03' slot='0x10' function='0x{fn:x}'/>"
        "</source><teaming type='transient' persistent='ua-net0'/>"
        "<alias name='ua-sova-vf'/></interface>"
    )


def plain_hostdev(fn: int) -> str:
    return (
        "<hostdev mode='subsystem' type='pci' managed='yes'><source>"
        f"<address domain='0x0000' bus='0x03' slot='0x10' function='0x{fn:x}'/>"
        "</source></hostdev>"
    )


PF_NODEDEVS = [
    "<device><name>pci_0000_03_00_0</name><parent>computer</parent><capability type='pci'>"
    "<domain>0</domain><bus>3</bus><slot>0</slot><function>0</function>"
    "<capability type='virt_functions' maxCount='8'>"
    "<address domain='0x0000' bus='0x03' slot='0x10' function='0x0'/>"
    "<address domain='0x0000' bus='0x03' slot='0x10' function='0x2'/>"
    "<address domain='0x0000' bus='0x03' slot='0x10' function='0x4'/>"
    "</capability></capability></device>",
    "<device><name>net_enp3s0f0</name><parent>pci_0000_03_00_0</parent>"
    "<capability type='net'><interface>enp3s0f0</interface><address>90:e2:ba:00:00:01</address>"
    "<link speed='10000' state='up'/></capability></device>",
]


class FakeNodeDev:
    def __init__(self, xml: str) -> None:
        self._xml = xml

    def XMLDesc(self, flags: int = 0) -> str:
        return self._xml


class FakeDomain:
    """A running domain whose hot-plug and migration behaviour a test scripts.

    on_attach: "ok" | "error" | "silent" (device appears, no DEVICE_ADDED event) |
        "migrated-quietly" (the domain migrates away meanwhile, its event missed)
    on_detach: list consumed one entry per detachDeviceFlags call, last one repeats:
        "ok" (removed + DEVICE_REMOVED) | "never" (nothing happens) |
        "fail" (DEVICE_REMOVAL_FAILED) | "busy" (raises libvirtError at once) |
        "migrated" / "migrated-quietly" (an outgoing migration ends meanwhile, with / without
        its lifecycle event; never a DEVICE_REMOVED)
    on_migrate: "ok" | "hang" (until abortJob) | "error"
    """

    def __init__(self, conn: FakeConn, name: str, xml: str) -> None:
        self.conn = conn
        self._name = name
        self.xml = xml
        self.active = True
        self.gone = False
        self.on_attach = "ok"
        self.on_detach: list[str] = ["ok"]
        self.on_migrate = "ok"
        self.calls: list[tuple[str, Any]] = []
        self._abort = threading.Event()
        self.migrate_args: tuple[str, dict[str, Any], int] | None = None

    def name(self) -> str:
        return self._name

    def _exists(self) -> None:
        if self.gone:
            raise lv_error(
                f"Domain not found: no domain with matching name '{self._name}'",
                libvirt.VIR_ERR_NO_DOMAIN,
            )

    def isActive(self) -> int:
        self._exists()
        return int(self.active)

    def XMLDesc(self, flags: int = 0) -> str:
        self._exists()
        return self.xml

    def migrated_away(self, event: bool = True) -> None:
        """A live migration someone else started ends: QEMU unplugged the failover primary
        itself (no DEVICE_REMOVED), the domain is gone from this host (undefined on the
        source), and the lifecycle event may be missed (a reconnect meanwhile)."""
        self.active = False
        self.gone = True
        self.conn.domains.pop(self._name, None)
        if event:
            self.conn.fire_lifecycle(
                self, libvirt.VIR_DOMAIN_EVENT_STOPPED, libvirt.VIR_DOMAIN_EVENT_STOPPED_MIGRATED
            )

    def info(self) -> list[int]:
        return [1, 1048576, 1048576, 2, 5_000_000_000]

    def interfaceStats(self, path: str) -> tuple[int, ...]:
        return (1000, 10, 0, 0, 2000, 20, 0, 0)

    # -- hot-plug

    def _devices(self) -> tuple[ET.Element, ET.Element]:
        root = ET.fromstring(self.xml)
        devs = root.find("devices")
        assert devs is not None
        return root, devs

    def attachDeviceFlags(self, xml: str, flags: int = 0) -> int:
        self.calls.append(("attach", xml))
        if self.on_attach == "migrated-quietly":
            t = threading.Timer(EVENT_DELAY_S, self.migrated_away, args=(False,))
            t.daemon = True
            t.start()
            return 0
        if self.on_attach == "error":
            raise lv_error("internal error: unable to execute QEMU command 'device_add'")
        root, devs = self._devices()
        devs.append(ET.fromstring(xml))
        self.xml = ET.tostring(root, encoding="unicode")
        if self.on_attach == "ok":
            self.conn.fire_later(libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_ADDED, self, "ua-sova-vf")
        return 0

    def detachDeviceFlags(self, xml: str, flags: int = 0) -> int:
        """Like libvirt 9.0's qemu driver: an interface is found by its MAC, and a teamed
        pair (VF and virtio backup share one MAC) makes that ambiguous: refused at once."""
        self.calls.append(("detach", xml))
        el = ET.fromstring(xml)
        mac_el = el.find("mac")
        if el.tag == "interface" and mac_el is not None:
            mac = mac_el.get("address", "").lower()
            _root, devs = self._devices()
            same = [
                i
                for i in devs.findall("interface")
                if (m := i.find("mac")) is not None and m.get("address", "").lower() == mac
            ]
            if len(same) > 1:
                raise lv_error(
                    f"operation failed: multiple devices matching MAC address {mac} found",
                    libvirt.VIR_ERR_OPERATION_FAILED,
                )
        return self._unplug("ua-sova-vf")

    def detachDeviceAlias(self, alias: str, flags: int = 0) -> int:
        self.calls.append(("detach", alias))
        _root, devs = self._devices()
        if not any((a := d.find("alias")) is not None and a.get("name") == alias for d in devs):
            raise lv_error(
                f"device not found: no device found with alias {alias}",
                libvirt.VIR_ERR_DEVICE_MISSING,
            )
        return self._unplug(alias)

    def _unplug(self, alias: str) -> int:
        mode = self.on_detach.pop(0) if len(self.on_detach) > 1 else self.on_detach[0]
        if mode in ("migrated", "migrated-quietly"):
            t = threading.Timer(EVENT_DELAY_S, self.migrated_away, args=(mode == "migrated",))
            t.daemon = True
            t.start()
            return 0
        if mode == "busy":
            raise lv_error(
                "operation failed: guest is busy, unplug request rejected",
                libvirt.VIR_ERR_OPERATION_FAILED,
            )
        if mode == "ok":
            root, devs = self._devices()
            for iface in devs.findall("interface"):
                if iface.get("type") == "hostdev":
                    devs.remove(iface)
            self.xml = ET.tostring(root, encoding="unicode")
            self.conn.fire_later(libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED, self, alias)
        elif mode == "fail":
            self.conn.fire_later(libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVAL_FAILED, self, alias)
        return 0  # like QEMU: the request was sent; completion is the event's business

    def setInterfaceParameters(self, device: str, params: dict[str, int], flags: int) -> int:
        self.calls.append(("setInterfaceParameters", (device, params)))
        return 0

    # -- migration

    def migrateToURI3(self, dconnuri: str, params: dict[str, Any], flags: int = 0) -> int:
        self.calls.append(("migrate", dconnuri))
        self.migrate_args = (dconnuri, dict(params), flags)
        if self.on_migrate == "error":
            raise lv_error(
                "operation failed: migration out job: unexpectedly failed",
                libvirt.VIR_ERR_OPERATION_FAILED,
            )
        if self.on_migrate == "hang":
            self._abort.wait(10)
            raise lv_error(
                "operation aborted: migration out job: canceled by client",
                libvirt.VIR_ERR_OPERATION_ABORTED,
            )
        self.active = False
        self.conn.fire_lifecycle(
            self, libvirt.VIR_DOMAIN_EVENT_STOPPED, libvirt.VIR_DOMAIN_EVENT_STOPPED_MIGRATED
        )
        return 0

    def jobStats(self, flags: int = 0) -> dict[str, int]:
        return {"type": 2, "memory_total": 1000, "memory_remaining": 400}

    def abortJob(self) -> int:
        self.calls.append(("abortJob", None))
        self._abort.set()
        return 0


class FakeConn:
    """The parts of ``virConnect`` the driver uses."""

    def __init__(self, domains: dict[str, str]) -> None:
        self.domains = {n: FakeDomain(self, n, x) for n, x in domains.items()}
        self._callbacks: dict[int, tuple[int, Callable[..., None]]] = {}
        self._next = 1

    def getHostname(self) -> str:
        return "fakehost"

    def getInfo(self) -> list[Any]:
        return ["x86_64", 32768, 8, 2400, 1, 1, 8, 1]

    def listAllDevices(self, flags: int = 0) -> list[FakeNodeDev]:
        return [FakeNodeDev(x) for x in PF_NODEDEVS]

    def listAllDomains(self, flags: int = 0) -> list[FakeDomain]:
        doms = list(self.domains.values())
        if flags & libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE:
            doms = [d for d in doms if d.active]
        return doms

    def lookupByName(self, name: str) -> FakeDomain:
        try:
            return self.domains[name]
        except KeyError:
            raise lv_error(
                f"Domain not found: no domain with matching name '{name}'",
                libvirt.VIR_ERR_NO_DOMAIN,
            ) from None

    def getAllDomainStats(self, stats: int = 0, flags: int = 0) -> list[Any]:
        raise lv_error("this function is not supported", libvirt.VIR_ERR_NO_SUPPORT)

    def getCPUStats(self, cpu: int, flags: int = 0) -> dict[str, int]:
        return {"kernel": 10, "user": 20, "idle": 30, "iowait": 0}

    def getMemoryStats(self, cell: int, flags: int = 0) -> dict[str, int]:
        raise lv_error("not supported", libvirt.VIR_ERR_NO_SUPPORT)

    def domainEventRegisterAny(
        self, dom: Any, eventID: int, cb: Callable[..., None], opaque: Any
    ) -> int:
        cid = self._next
        self._next += 1
        self._callbacks[cid] = (eventID, cb)
        return cid

    def domainEventDeregisterAny(self, callbackID: int) -> None:
        self._callbacks.pop(callbackID, None)

    def fire(self, event_id: int, dom: FakeDomain, *args: Any) -> None:
        for eid, cb in list(self._callbacks.values()):
            if eid == event_id:
                cb(self, dom, *args, None)

    def fire_later(self, event_id: int, dom: FakeDomain, *args: Any) -> None:
        # Like QEMU: the event arrives on libvirt's event thread after the API returned.
        t = threading.Timer(EVENT_DELAY_S, self.fire, args=(event_id, dom, *args))
        t.daemon = True
        t.start()

    def fire_lifecycle(self, dom: FakeDomain, event: int, detail: int) -> None:
        self.fire_later(libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, dom, event, detail)


class FakeGuest:
    """A QEMU guest agent answering ``qemuAgentCommand`` JSON, with scripted exit codes."""

    def __init__(self, exitcode: int = 0, stderr: str = "", never_exits: bool = False) -> None:
        self.exitcode = exitcode
        self.stderr = stderr
        self.never_exits = never_exits
        self.commands: list[dict[str, Any]] = []
        self.interfaces: list[dict[str, Any]] = []

    def __call__(self, dom: Any, cmd: str, timeout: int) -> str:
        req = json.loads(cmd)
        self.commands.append(req)
        ex = req["execute"]
        if ex == "guest-exec":
            return json.dumps({"return": {"pid": 4242}})
        if ex == "guest-exec-status":
            if self.never_exits:
                return json.dumps({"return": {"exited": False}})
            ret: dict[str, Any] = {"exited": True, "exitcode": self.exitcode}
            if self.stderr:
                ret["err-data"] = base64.b64encode(self.stderr.encode()).decode()
            return json.dumps({"return": ret})
        if ex == "guest-network-get-interfaces":
            return json.dumps({"return": self.interfaces})
        return json.dumps({"error": {"class": "CommandNotFound", "desc": f"no {ex}"}})
