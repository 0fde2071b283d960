"""The production driver: one KVM host seen through libvirt, rtnetlink and the guest agent.

This is the driver that touches real guests, so its shape follows what goes wrong on real
SR-IOV hosts rather than what the happy path needs:

* A VF is only ever a *transient* failover partner of the VM's virtio interface
  (`<teaming type='transient' persistent='ua-…'/>` with the same MAC), so pulling it never
  cuts the VM off. A VM whose virtio interface is not set up for that is reported and
  never gets a VF; a VF is never pulled before the virtio path is confirmed up.
* Hot-plug completes asynchronously and can fail ("guest is busy", or the guest ignores the
  ACPI eject): completion is confirmed by libvirt's DEVICE_ADDED / DEVICE_REMOVED /
  DEVICE_REMOVAL_FAILED events with a timeout, cross-checked against the live XML (events
  can be missed across a reconnect), and retried a bounded number of times.
* ``submit`` never blocks: each action runs on a daemon worker thread, actions on the same
  VM are serialised, and ``poll`` reports progress. Every wait has a deadline.
* Capabilities are probed on the NIC, not assumed (see :mod:`sova.driver.netlink_vf`).
* Counters come from ``getAllDomainStats`` and fall back to per-domain calls where a driver
  (libvirt's own test driver, old hosts) omits a group; interfaces are matched by MAC because
  tap names change; VF traffic, invisible on the tap, comes from the PF's IFLA_VF_STATS.
* A read-only connection (``--dry-run``) refuses every action and writes nothing, not even
  a capability probe.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sova.driver.base import Capabilities, DriverError, OpState, OpStatus
from sova.driver.guest_agent import GuestAgent, GuestAgentError, htb_script
from sova.driver.libvirt_xml import (
    DomainInfo,
    DomainNic,
    NodeDevices,
    detach_xml_for,
    failover_readiness,
    parse_domain,
    parse_nodedev,
    vf_interface_xml,
)
from sova.driver.netlink_vf import NetlinkVF, VFInfo, VFRateError
from sova.install import install_hint
from sova.model import (
    NIC,
    SLA,
    VM,
    Action,
    AttachVF,
    DetachVF,
    Host,
    HostCounters,
    HostSample,
    Inventory,
    Migrate,
    NICCapabilities,
    NicKind,
    ResourceTuple,
    SetGuestRateLimit,
    SetVFRate,
    VMCounters,
    VMState,
)

try:
    import libvirt  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - exercised only where libvirt-python is absent
    libvirt = None


def _require_libvirt() -> Any:
    if libvirt is None:
        raise DriverError(
            f"libvirt-python is not installed: {install_hint('agent')} "
            "(builds against libvirt-dev; or use the distribution's python3-libvirt)"
        )
    return libvirt


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class LibvirtDriverConfig:
    uri: str = "qemu:///system"
    read_only: bool = False
    host_name: str | None = None  # default: the hypervisor's hostname
    pf: str | None = None  # PF netdev; None = the first SR-IOV PF libvirt reports
    vf_pool: int | None = None  # VFs Sova may hand out; None = all of the PF's VFs
    sysfs_root: str = "/sys"
    hotplug_timeout_s: float = 20.0  # per attempt, waiting for DEVICE_ADDED/REMOVED
    hotplug_attempts: int = 3
    retry_backoff_s: float = 1.0  # multiplied by the attempt number
    migration_uri_template: str = "qemu+ssh://{host}/system"
    migration_timeout_s: float = 600.0
    migration_poll_s: float = 1.0
    migration_abort_grace_s: float = 30.0
    migration_bandwidth_bps: float | None = None  # default cap when the action gives none
    sampling: str = "host"  # "host" (black box) or "guest-agent" (gray box, SPEC §2)
    max_workers: int = 4
    keepalive: tuple[int, int] = (5, 3)  # interval s, count: a dead remote host fails fast


# --------------------------------------------------------------------------- events


@dataclass(frozen=True)
class DomainEvent:
    seq: int
    kind: str  # lifecycle | device-added | device-removed | device-removal-failed
    vm: str
    alias: str = ""
    event: int = 0  # lifecycle: VIR_DOMAIN_EVENT_*
    detail: int = 0
    time_s: float = 0.0


class _EventHub:
    """Events from libvirt's event-loop thread, waited on by the op threads."""

    def __init__(self, maxlen: int = 2048) -> None:
        self._cond = threading.Condition()
        self._events: deque[DomainEvent] = deque(maxlen=maxlen)
        self._seq = 0
        self.listeners: list[Callable[[DomainEvent], None]] = []

    def post(self, kind: str, vm: str, alias: str = "", event: int = 0, detail: int = 0) -> None:
        with self._cond:
            self._seq += 1
            ev = DomainEvent(self._seq, kind, vm, alias, event, detail, time.monotonic())
            self._events.append(ev)
            self._cond.notify_all()
        for cb in list(self.listeners):
            with contextlib.suppress(Exception):  # a listener must not kill the event loop
                cb(ev)

    def mark(self) -> int:
        with self._cond:
            return self._seq

    def recent(self) -> list[DomainEvent]:
        with self._cond:
            return list(self._events)

    def wait(
        self, pred: Callable[[DomainEvent], bool], since: int, timeout_s: float
    ) -> DomainEvent | None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for ev in self._events:
                    if ev.seq > since and pred(ev):
                        return ev
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)


_loop_lock = threading.Lock()
_loop_started = False


def ensure_event_loop() -> None:
    """Start libvirt's default event loop once per process (before any connection opens).

    Without it libvirt delivers no domain events at all, and hot-plug could only be
    confirmed by polling the XML.
    """
    global _loop_started
    lv = _require_libvirt()
    with _loop_lock:
        if _loop_started:
            return
        lv.virEventRegisterDefaultImpl()

        def run() -> None:
            while True:
                lv.virEventRunDefaultImpl()

        threading.Thread(target=run, name="libvirt-events", daemon=True).start()
        _loop_started = True


def open_connection(uri: str, read_only: bool) -> Any:
    lv = _require_libvirt()
    # libvirt prints every error to stderr by default; we report them ourselves.
    lv.registerErrorHandler(lambda _ctx, _err: None, None)
    ensure_event_loop()
    try:
        return lv.openReadOnly(uri) if read_only else lv.open(uri)
    except lv.libvirtError as e:
        raise DriverError(f"cannot connect to {uri}: {e}") from e


# --------------------------------------------------------------------------- PF view


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


@dataclass
class _Op:
    op_id: str
    action: Action
    state: OpState = OpState.PENDING
    detail: str = "queued"


class _OpFailed(Exception):
    """Ends an operation as FAILED with this message as the detail."""


@dataclass(frozen=True)
class VMReport:
    """What the driver found about one VM that the operator should read."""

    name: str
    running: bool
    failover_ready: bool
    reason: str = ""
    vf_index: int | None = None
    vf_kind: str = ""  # "failover" | "plain-hostdev" | ""


# --------------------------------------------------------------------------- driver


class LibvirtDriver:
    """:class:`sova.driver.base.Driver` for one libvirt host."""

    def __init__(
        self,
        config: LibvirtDriverConfig,
        conn: Any | None = None,
        netlink: NetlinkVF | None = None,
        agent: GuestAgent | None = None,
    ) -> None:
        self.config = config
        self._conn = conn if conn is not None else open_connection(config.uri, config.read_only)
        if conn is None and config.keepalive[0] > 0:
            with contextlib.suppress(Exception):  # local/test URIs have no keepalive
                self._conn.setKeepAlive(*config.keepalive)
        self._netlink = netlink
        self._agent = agent
        self._hub = _EventHub()
        self._ops: dict[str, _Op] = {}
        self._ops_lock = threading.Lock()
        self._seq = itertools.count(1)
        self._vm_locks: dict[str, threading.Lock] = {}
        self._workers = threading.BoundedSemaphore(max(1, config.max_workers))
        self._reserved: dict[str, str] = {}  # VF PCI -> VM, while an attach is in flight
        self._reserve_lock = threading.Lock()
        self._migrating: set[str] = set()
        self._caps: Capabilities | None = None
        self._caps_lock = threading.Lock()
        self._callback_ids: list[int] = []
        self._register_events()

    @classmethod
    def open(cls, uri: str, *, read_only: bool = False, **kw: Any) -> LibvirtDriver:
        """Open a host the way the agent does: netlink on the local PF when pyroute2 exists."""
        config = LibvirtDriverConfig(uri=uri, read_only=read_only, **kw)
        netlink: NetlinkVF | None = None
        drv = cls(config)
        pf = drv.pf_view().name
        if pf:
            try:
                netlink = NetlinkVF(pf)
            except ImportError:
                netlink = None
        drv._netlink = netlink
        drv._agent = GuestAgent()
        return drv

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        for cid in self._callback_ids:
            with contextlib.suppress(Exception):
                self._conn.domainEventDeregisterAny(cid)
        self._callback_ids.clear()
        if self._netlink is not None:
            self._netlink.close()

    def _register_events(self) -> None:
        lv = _require_libvirt()
        hub = self._hub

        def lifecycle(_c: Any, dom: Any, event: int, detail: int, _o: Any) -> None:
            hub.post("lifecycle", dom.name(), event=event, detail=detail)

        def device(kind: str) -> Callable[[Any, Any, str, Any], None]:
            def cb(_c: Any, dom: Any, alias: str, _o: Any) -> None:
                hub.post(kind, dom.name(), alias=alias)

            return cb

        regs: list[tuple[int, Callable[..., None]]] = [
            (lv.VIR_DOMAIN_EVENT_ID_LIFECYCLE, lifecycle),
            (lv.VIR_DOMAIN_EVENT_ID_DEVICE_ADDED, device("device-added")),
            (lv.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED, device("device-removed")),
            (lv.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVAL_FAILED, device("device-removal-failed")),
        ]
        for event_id, cb in regs:
            try:
                self._callback_ids.append(
                    self._conn.domainEventRegisterAny(None, event_id, cb, None)
                )
            except lv.libvirtError:
                # Older servers lack some event ids; completion then falls back to the XML.
                continue

    def add_event_listener(self, cb: Callable[[DomainEvent], None]) -> None:
        """Called (on libvirt's event thread) for every domain event: keeps a cache true."""
        self._hub.listeners.append(cb)

    def events(self) -> list[DomainEvent]:
        return self._hub.recent()

    def now(self) -> float:
        return time.monotonic()

    def _host_name(self) -> str:
        if self.config.host_name:
            return self.config.host_name
        try:
            return str(self._conn.getHostname())
        except Exception:
            return self.config.uri

    # ------------------------------------------------------------------ PF / VFs

    def pf_view(self) -> PFView:
        """The PF and its VFs: sysfs when readable (authoritative indices), else libvirt."""
        lv = _require_libvirt()
        notes: list[str] = []
        nd = NodeDevices()
        try:
            for dev in self._conn.listAllDevices(0):
                with contextlib.suppress(lv.libvirtError):
                    parse_nodedev(dev.XMLDesc(0), nd)
        except lv.libvirtError as e:
            notes.append(f"node devices not readable: {e}")
        candidates = [
            n
            for n in nd.net
            if n.parent in nd.pci and (nd.pci[n.parent].virt_functions or nd.pci[n.parent].max_vfs)
        ]
        name = self.config.pf or ""
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
        dev_dir = Path(self.config.sysfs_root) / "class" / "net" / name / "device"
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

    def _vf_holders(self, pf: PFView) -> dict[str, tuple[str, str]]:
        """VF PCI -> (VM, "failover"|"plain-hostdev") over every running domain."""
        lv = _require_libvirt()
        held: dict[str, tuple[str, str]] = {}
        vf_set = set(pf.vfs.values())
        for dom in self._conn.listAllDomains(lv.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
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

    # ------------------------------------------------------------------ capabilities

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
        pf = self.pf_view()
        notes = list(pf.notes)
        pool = len(pf.vfs) if self.config.vf_pool is None else min(self.config.vf_pool, len(pf.vfs))
        if self._netlink is None:
            nic = NICCapabilities(max_rate=False, min_rate=False, vf_stats=False)
            notes.append("VF rates and counters unavailable: no netlink access to the PF")
        elif self.config.read_only:
            nic = NICCapabilities(max_rate=False, min_rate=False, vf_stats=False)
            notes.append(
                "VF rates not probed: read-only connection (dry run never writes to the NIC)"
            )
        else:
            held = self._vf_holders(pf)
            free = next((i for i, a in sorted(pf.vfs.items()) if a not in held), None)
            probe = self._netlink.probe(free, pf.speed_mbit)
            nic = NICCapabilities(probe.max_rate, probe.min_rate, probe.vf_stats)
            notes.extend(probe.notes)
        if not nic.min_rate:
            fallback = (
                "guest-side HTB through the guest agent"
                if self._agent
                else "libvirt <bandwidth> on the virtio path (host side)"
            )
            notes.append(f"min_tx_rate not available at the VF; fallback: {fallback}")
        return Capabilities(
            host=self._host_name(),
            vf_total=len(pf.vfs),
            vf_pool=pool,
            nic=nic,
            can_migrate=not self.config.read_only,
            guest_agent=self._agent is not None,
            notes=tuple(notes),
        )

    # ------------------------------------------------------------------ inventory

    def vm_reports(self) -> list[VMReport]:
        """Per-VM findings for the operator: failover readiness and the VF each holds."""
        lv = _require_libvirt()
        pf = self.pf_view()
        out: list[VMReport] = []
        for dom in self._conn.listAllDomains(0):
            try:
                info = parse_domain(dom.XMLDesc(0))
                running = bool(dom.isActive())
            except lv.libvirtError:
                continue
            r = failover_readiness(info)
            vf_idx, kind = self._held_vf(info, pf)
            reason = r.reason
            if kind == "plain-hostdev":
                reason = (reason + "; " if reason else "") + (
                    "holds a VF as plain hostdev (no teaming): cannot live-migrate"
                )
            out.append(VMReport(info.name, running, r.ready, reason, vf_idx, kind))
        return sorted(out, key=lambda r: r.name)

    @staticmethod
    def _held_vf(info: DomainInfo, pf: PFView) -> tuple[int | None, str]:
        vf = info.sova_vf()
        if vf is not None:
            idx = pf.index_of(vf.pci)
            return idx, ("failover" if vf.teaming_type == "transient" else "plain-hostdev")
        for p in info.plain_hostdev_pci:
            idx = pf.index_of(p)
            if idx is not None:
                return idx, "plain-hostdev"
        return None, ""

    def _vf_table(self) -> dict[int, VFInfo]:
        if self._netlink is None:
            return {}
        try:
            return self._netlink.vfs()
        except (VFRateError, OSError):
            # Counters and rates are optional; a netlink hiccup must not stop sampling.
            return {}

    def _migrating_now(self) -> set[str]:
        lv = _require_libvirt()
        out = set(self._migrating)
        last: dict[str, DomainEvent] = {}
        for ev in self._hub.recent():
            if ev.kind == "lifecycle":
                last[ev.vm] = ev
        for vm, ev in last.items():
            if (
                ev.event == lv.VIR_DOMAIN_EVENT_SUSPENDED
                and ev.detail == lv.VIR_DOMAIN_EVENT_SUSPENDED_MIGRATED
            ):
                out.add(vm)
        return out

    def inventory(self) -> Inventory:
        lv = _require_libvirt()
        pf = self.pf_view()
        caps = self.capabilities()
        vf_table = self._vf_table()
        migrating = self._migrating_now()
        vms: dict[str, VMState] = {}
        try:
            doms = self._conn.listAllDomains(0)
        except lv.libvirtError as e:
            raise DriverError(f"cannot list domains: {e}") from e
        for seq, dom in enumerate(doms):
            try:
                info = parse_domain(dom.XMLDesc(0))
                running = bool(dom.isActive())
            except lv.libvirtError:
                continue
            vf_idx, _kind = self._held_vf(info, pf)
            ready = failover_readiness(info)
            backup = info.failover_backup()
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
            info_h = self._conn.getInfo()
            cores, mem = int(info_h[2]), int(info_h[1]) * 1024 * 1024
        except lv.libvirtError:
            cores, mem = 0, 0
        nic = NIC(
            name=pf.name,
            capacity_bps=pf.speed_mbit * 1e6,
            vf_pool=caps.vf_pool,
            caps=caps.nic,
        )
        return Inventory(host=Host(self._host_name(), cores, mem, nic), vms=vms)

    # ------------------------------------------------------------------ sampling

    def sample(self) -> HostSample:
        lv = _require_libvirt()
        t = self.now()
        pf = self.pf_view()
        vf_table = self._vf_table()
        want = (
            lv.VIR_DOMAIN_STATS_STATE
            | lv.VIR_DOMAIN_STATS_CPU_TOTAL
            | lv.VIR_DOMAIN_STATS_VCPU
            | lv.VIR_DOMAIN_STATS_INTERFACE
            | lv.VIR_DOMAIN_STATS_BALLOON
        )
        try:
            records = self._conn.getAllDomainStats(
                want, lv.VIR_CONNECT_GET_ALL_DOMAINS_STATS_ACTIVE
            )
        except lv.libvirtError:
            try:
                records = [
                    (d, {}) for d in self._conn.listAllDomains(lv.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
                ]
            except lv.libvirtError as e:
                raise DriverError(f"cannot list domains: {e}") from e
        vms: dict[str, VMCounters] = {}
        for dom, st in records:
            try:
                c = self._sample_domain(dom, dict(st), pf, vf_table)
            except lv.libvirtError:
                continue  # domain went away between listing and reading
            vms[c.vm] = c
        return HostSample(self._host_name(), t, vms, self._host_totals(pf))

    def _sample_domain(
        self, dom: Any, st: dict[str, Any], pf: PFView, vf_table: dict[int, VFInfo]
    ) -> VMCounters:
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
                lv = _require_libvirt()
                try:
                    s = dom.interfaceStats(n.target_dev or n.mac)
                except lv.libvirtError:
                    continue
                acc = per_mac.setdefault(n.mac, [0, 0, 0, 0])
                acc[0] += int(s[0])
                acc[1] += int(s[4])
                acc[2] += int(s[1])
                acc[3] += int(s[5])
        vf_idx, _ = self._held_vf(info, pf)
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
        if self.config.sampling == "guest-agent" and self._agent is not None:
            with contextlib.suppress(GuestAgentError):
                per_mac = self._guest_counters(dom, info) or per_mac
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

    def _guest_counters(self, dom: Any, info: DomainInfo) -> dict[str, list[int]]:
        """Gray-box counters: per MAC, the guest netdev with the most traffic.

        Under net_failover the master, its standby and the VF primary share one MAC, and
        the master's counters include both slaves': taking the largest avoids double counting.
        """
        assert self._agent is not None
        macs = {n.mac for n in info.nics if n.mac}
        out: dict[str, list[int]] = {}
        for gi in self._agent.interfaces(dom):
            if gi.mac not in macs:
                continue
            cur = out.get(gi.mac)
            vals = [gi.rx_bytes, gi.tx_bytes, gi.rx_packets, gi.tx_packets]
            if cur is None or vals[0] + vals[1] > cur[0] + cur[1]:
                out[gi.mac] = vals
        return out

    def _host_totals(self, pf: PFView) -> HostCounters:
        lv = _require_libvirt()
        busy = 0
        with contextlib.suppress(lv.libvirtError):
            cpu = self._conn.getCPUStats(lv.VIR_NODE_CPU_STATS_ALL_CPUS, 0)
            busy = int(cpu.get("kernel", 0)) + int(cpu.get("user", 0))
        mem_used = 0
        with contextlib.suppress(lv.libvirtError):
            m = self._conn.getMemoryStats(lv.VIR_NODE_MEMORY_STATS_ALL_CELLS, 0)
            free = m.get("free", 0) + m.get("buffers", 0) + m.get("cached", 0)
            mem_used = int(m.get("total", 0) - free) * 1024
        rx = tx = 0
        if pf.name:
            stats = Path(self.config.sysfs_root) / "class" / "net" / pf.name / "statistics"
            with contextlib.suppress(OSError, ValueError):
                rx = int((stats / "rx_bytes").read_text())
                tx = int((stats / "tx_bytes").read_text())
        return HostCounters(busy, rx, tx, mem_used)

    # ------------------------------------------------------------------ actions

    def submit(self, action: Action) -> str:
        op_id = f"{action.kind}:{action.vm}:{next(self._seq)}"
        op = _Op(op_id, action)
        with self._ops_lock:
            self._ops[op_id] = op
        if self.config.read_only:
            self._finish(op, OpState.FAILED, "read-only connection: actions are never executed")
            return op_id
        threading.Thread(target=self._run, args=(op,), name=f"sova-{op_id}", daemon=True).start()
        return op_id

    def poll(self, op_id: str) -> OpStatus:
        with self._ops_lock:
            op = self._ops.get(op_id)
            if op is None:
                return OpStatus(op_id, OpState.FAILED, "unknown operation id")
            return OpStatus(op.op_id, op.state, op.detail)

    def _finish(self, op: _Op, state: OpState, detail: str) -> None:
        with self._ops_lock:
            op.state, op.detail = state, detail

    def _progress(self, op: _Op, detail: str) -> None:
        with self._ops_lock:
            if op.state is OpState.PENDING:
                op.detail = detail

    @contextlib.contextmanager
    def _vm_lock(self, vm: str) -> Iterator[None]:
        with self._ops_lock:
            lock = self._vm_locks.setdefault(vm, threading.Lock())
        with lock:
            yield

    def _run(self, op: _Op) -> None:
        a = op.action
        try:
            with self._workers, self._vm_lock(a.vm):
                self._progress(op, "running")
                if isinstance(a, AttachVF):
                    detail = self._attach(op, a)
                elif isinstance(a, DetachVF):
                    detail = self._detach(op, a.vm)
                elif isinstance(a, SetVFRate):
                    detail = self._set_rate(a)
                elif isinstance(a, SetGuestRateLimit):
                    detail = self._guest_limit(a)
                elif isinstance(a, Migrate):
                    detail = self._migrate(op, a)
                else:  # pragma: no cover - Action is a closed union
                    raise _OpFailed(f"unsupported action {a!r}")
            self._finish(op, OpState.SUCCEEDED, detail)
        except _OpFailed as e:
            self._finish(op, OpState.FAILED, str(e))
        except Exception as e:  # never let a worker die silently: the caller polls
            self._finish(op, OpState.FAILED, f"{type(e).__name__}: {e}")

    def _dom(self, vm: str) -> Any:
        lv = _require_libvirt()
        try:
            return self._conn.lookupByName(vm)
        except lv.libvirtError as e:
            raise _OpFailed(f"VM {vm} not found on {self._host_name()}: {e}") from e

    def _live(self, dom: Any) -> DomainInfo:
        return parse_domain(dom.XMLDesc(0))

    @staticmethod
    def _permanent(e: Any) -> bool:
        """Errors a retry cannot fix: the request itself is wrong or unsupported here."""
        lv = _require_libvirt()
        return e.get_error_code() in (
            lv.VIR_ERR_NO_SUPPORT,
            lv.VIR_ERR_CONFIG_UNSUPPORTED,
            lv.VIR_ERR_XML_ERROR,
            lv.VIR_ERR_XML_DETAIL,
            lv.VIR_ERR_INVALID_ARG,
            lv.VIR_ERR_NO_DOMAIN,
        )

    def _stopped(self, ev: DomainEvent, vm: str) -> bool:
        lv = _require_libvirt()
        return (
            ev.vm == vm
            and ev.kind == "lifecycle"
            and ev.event in (lv.VIR_DOMAIN_EVENT_STOPPED, lv.VIR_DOMAIN_EVENT_UNDEFINED)
        )

    # -- rates

    def _apply_rate(self, vf: int, max_bps: float | None, min_bps: float | None) -> str:
        """Best effort on attach: the VF helps even where the NIC cannot cap it."""
        if not max_bps and not min_bps:
            return ""
        if self._netlink is None:
            return "; rate not enforced: no netlink access to the PF"
        caps = self.capabilities().nic
        notes = ""
        if min_bps and not caps.min_rate:
            notes += "; min_tx_rate unsupported by this NIC: not enforced at the VF"
            min_bps = None
        if max_bps and not caps.max_rate:
            return notes + "; max_tx_rate unsupported by this NIC: tier not enforced"
        try:
            self._netlink.set_rate(vf, max_bps, min_bps)
        except VFRateError as e:
            return notes + f"; rate not applied: {e}"
        return notes

    def _set_rate(self, a: SetVFRate) -> str:
        dom = self._dom(a.vm)
        info = self._live(dom)
        idx, _ = self._held_vf(info, self.pf_view())
        if idx is None:
            raise _OpFailed(f"{a.vm} holds no VF: nothing to rate-limit")
        if self._netlink is None:
            raise _OpFailed("no netlink access to the PF: VF rates cannot be set")
        min_bps = a.min_bps
        note = ""
        if min_bps and not self.capabilities().nic.min_rate:
            min_bps, note = None, "; min_tx_rate unsupported by this NIC: not enforced"
        try:
            self._netlink.set_rate(idx, a.max_bps, min_bps)
        except VFRateError as e:
            raise _OpFailed(str(e)) from e
        return f"vf {idx} max {a.max_bps or 0:.0f} bit/s{note}"

    def _guest_limit(self, a: SetGuestRateLimit) -> str:
        dom = self._dom(a.vm)
        info = self._live(dom)
        backup = info.failover_backup() or next((n for n in info.nics if n.is_virtio), None)
        if backup is None or not backup.mac:
            raise _OpFailed(f"{a.vm} has no virtio interface to shape")
        if self._agent is None:
            return self._host_side_limit(dom, backup, a)
        try:
            self._agent.exec(dom, "/bin/sh", htb_script(backup.mac, a.rate_bps))
        except GuestAgentError as e:
            raise _OpFailed(f"guest-side HTB on {a.vm} failed: {e}") from e
        note = "; max_pps not enforceable with HTB: ignored" if a.max_pps else ""
        what = "removed" if not a.rate_bps else f"{a.rate_bps:.0f} bit/s"
        return f"guest HTB on {backup.mac}: {what}{note}"

    def _host_side_limit(self, dom: Any, nic: DomainNic, a: SetGuestRateLimit) -> str:
        """Without a guest agent: libvirt `<bandwidth>` on the virtio interface (host side).

        It shapes only the virtio path — a VF's traffic bypasses the tap — which the
        detail says, so nobody mistakes it for a limit on the whole VM.
        """
        lv = _require_libvirt()
        # libvirt's "outbound" is traffic leaving the guest, in KiB/s; 0 removes the limit.
        kib = 0 if not a.rate_bps else max(1, round(a.rate_bps / 8 / 1024))
        params = {"outbound.average": kib, "outbound.peak": kib, "outbound.burst": 0}
        if not kib:
            params = {"outbound.average": 0}
        try:
            dom.setInterfaceParameters(nic.target_dev or nic.mac, params, lv.VIR_DOMAIN_AFFECT_LIVE)
        except lv.libvirtError as e:
            raise _OpFailed(f"host-side <bandwidth> on {a.vm} failed: {e}") from e
        what = "removed" if not kib else f"{kib} KiB/s outbound"
        return f"host-side <bandwidth> on {nic.mac} (virtio path only, no guest agent): {what}"

    # -- hot-plug

    def _reserve_free_vf(self, vm: str, pf: PFView) -> tuple[int, str]:
        held = self._vf_holders(pf)
        pool = self.capabilities().vf_pool
        with self._reserve_lock:
            in_use = len(held) + sum(1 for p in self._reserved if p not in held)
            if in_use >= pool:
                raise _OpFailed(f"no free VF on {pf.name}: pool of {pool} fully held")
            for idx, pci in sorted(pf.vfs.items()):
                if pci not in held and pci not in self._reserved:
                    self._reserved[pci] = vm
                    return idx, pci
        raise _OpFailed(f"no free VF on {pf.name or 'this host'}")

    def _attach(self, op: _Op, a: AttachVF) -> str:
        lv = _require_libvirt()
        cfg = self.config
        dom = self._dom(a.vm)
        if not dom.isActive():
            raise _OpFailed(f"{a.vm} is not running")
        if a.vm in self._migrating_now():
            raise _OpFailed(f"{a.vm} is migrating: it gets no VF")
        info = self._live(dom)
        pf = self.pf_view()
        idx, kind = self._held_vf(info, pf)
        if idx is not None:
            note = self._apply_rate(idx, a.max_bps, a.min_bps)
            return f"{a.vm} already holds vf {idx} ({kind}): no-op{note}"
        ready = failover_readiness(info)
        if not ready.ready:
            raise _OpFailed(f"{a.vm} is not failover-ready and never gets a VF: {ready.reason}")
        backup = info.failover_backup()
        assert backup is not None
        idx, pci = self._reserve_free_vf(a.vm, pf)
        try:
            note = self._apply_rate(idx, a.max_bps, a.min_bps)
            xml = vf_interface_xml(backup.mac, pci, backup.alias)
            last = ""
            for attempt in range(1, cfg.hotplug_attempts + 1):
                self._progress(op, f"attaching vf {idx} ({pci}), attempt {attempt}")
                if self._live(dom).sova_vf() is not None:
                    return f"vf {idx} attached to {a.vm}{note}"
                mark = self._hub.mark()
                try:
                    dom.attachDeviceFlags(xml, lv.VIR_DOMAIN_AFFECT_LIVE)
                except lv.libvirtError as e:
                    last = f"attach refused: {e}"
                    if self._permanent(e):
                        raise _OpFailed(
                            f"attaching vf {idx} to {a.vm} failed: {last} (not retried); "
                            "VM stays on virtio"
                        ) from e
                    time.sleep(cfg.retry_backoff_s * attempt)
                    continue
                ev = self._hub.wait(
                    lambda e: (e.vm == a.vm and e.kind == "device-added") or self._stopped(e, a.vm),
                    mark,
                    cfg.hotplug_timeout_s,
                )
                if ev is not None and ev.kind == "lifecycle":
                    raise _OpFailed(f"{a.vm} stopped while vf {idx} was being attached")
                if self._live(dom).sova_vf() is not None:
                    how = "DEVICE_ADDED" if ev is not None else "live XML (no DEVICE_ADDED event)"
                    return f"vf {idx} attached to {a.vm}, confirmed by {how}{note}"
                last = f"no DEVICE_ADDED within {cfg.hotplug_timeout_s:g}s"
                time.sleep(cfg.retry_backoff_s * attempt)
            raise _OpFailed(
                f"attaching vf {idx} to {a.vm} failed after {cfg.hotplug_attempts} attempts: "
                f"{last}; VM stays on virtio"
            )
        finally:
            with self._reserve_lock:
                self._reserved.pop(pci, None)

    def _detach(self, op: _Op, vm: str) -> str:
        lv = _require_libvirt()
        cfg = self.config
        dom = self._dom(vm)
        info = self._live(dom)
        vf = info.sova_vf()
        if vf is None:
            if any(self.pf_view().index_of(p) is not None for p in info.plain_hostdev_pci):
                raise _OpFailed(
                    f"{vm} holds a VF as plain <hostdev> without a virtio failover partner; "
                    "Sova will not pull it (the VM would lose its network)"
                )
            return f"{vm} holds no VF: no-op"
        backup = info.failover_backup()
        if backup is None or (vf.teaming_persistent and vf.teaming_persistent != backup.alias):
            raise _OpFailed(
                f"{vm}: VF has no virtio failover partner; not detaching (the VM would lose its network)"
            )
        if backup.link_state == "down":
            raise _OpFailed(
                f"{vm}: virtio backup path {backup.alias} is link-down; VF kept until it is up"
            )
        xml = detach_xml_for(vf)
        idx = self.pf_view().index_of(vf.pci)
        last = ""

        def ours(e: DomainEvent) -> bool:
            return e.vm == vm and (not vf.alias or e.alias == vf.alias)

        for attempt in range(1, cfg.hotplug_attempts + 1):
            self._progress(op, f"detaching vf {idx} from {vm}, attempt {attempt}")
            if self._live(dom).sova_vf() is None:
                return f"vf {idx} detached from {vm}; virtio carries its traffic"
            mark = self._hub.mark()
            try:
                dom.detachDeviceFlags(xml, lv.VIR_DOMAIN_AFFECT_LIVE)
            except lv.libvirtError as e:
                last = f"detach refused: {e}"
                if self._permanent(e):
                    raise _OpFailed(
                        f"detaching vf {idx} from {vm} failed: {last} (not retried); "
                        "VF still attached, virtio path unchanged"
                    ) from e
                time.sleep(cfg.retry_backoff_s * attempt)
                continue
            ev = self._hub.wait(
                lambda e: (
                    (ours(e) and e.kind in ("device-removed", "device-removal-failed"))
                    or self._stopped(e, vm)
                ),
                mark,
                cfg.hotplug_timeout_s,
            )
            if ev is not None and ev.kind == "lifecycle":
                return f"{vm} stopped; its VF is released"
            if ev is not None and ev.kind == "device-removed":
                return f"vf {idx} detached from {vm}, confirmed by DEVICE_REMOVED"
            if ev is not None and ev.kind == "device-removal-failed":
                last = "the guest refused the unplug (DEVICE_REMOVAL_FAILED)"
            elif self._live(dom).sova_vf() is None:
                return f"vf {idx} detached from {vm}, confirmed by live XML (no event)"
            else:
                last = (
                    f"removal not completed within {cfg.hotplug_timeout_s:g}s "
                    "(guest busy or not answering the unplug request)"
                )
            time.sleep(cfg.retry_backoff_s * attempt)
        raise _OpFailed(
            f"detaching vf {idx} from {vm} failed after {cfg.hotplug_attempts} attempts: "
            f"{last}; VF still attached, virtio path unchanged"
        )

    # -- migration

    def _job_progress(self, dom: Any) -> str:
        try:
            js = dom.jobStats(0)
        except Exception:
            return "progress unknown"
        total = int(js.get("memory_total", 0) or js.get("data_total", 0))
        left = int(js.get("memory_remaining", 0) or js.get("data_remaining", 0))
        if total <= 0:
            return "progress unknown"
        return f"{100.0 * (total - left) / total:.0f}% of memory copied"

    def _migrate(self, op: _Op, a: Migrate) -> str:
        lv = _require_libvirt()
        cfg = self.config
        dom = self._dom(a.vm)
        if not dom.isActive():
            raise _OpFailed(f"{a.vm} is not running: nothing to live-migrate")
        self._migrating.add(a.vm)
        try:
            info = self._live(dom)
            pf = self.pf_view()
            plain = [p for p in info.plain_hostdev_pci if pf.index_of(p) is not None]
            vf = info.sova_vf()
            if plain or (vf is not None and vf.teaming_type != "transient"):
                raise _OpFailed(
                    f"{a.vm} holds a VF without <teaming type='transient'>: libvirt cannot "
                    "live-migrate it (convert it to a failover pair, docs/deployment.md)"
                )
            if vf is not None:
                try:
                    self._detach(op, a.vm)
                except _OpFailed as e:
                    raise _OpFailed(
                        f"not migrating {a.vm}: VF could not be unplugged first: {e}"
                    ) from e
            uri = cfg.migration_uri_template.format(host=a.dst_host)
            params: dict[str, Any] = {}
            bw = a.bandwidth_cap_bps or cfg.migration_bandwidth_bps
            if bw:
                # libvirt's migration bandwidth is in MiB/s.
                params[lv.VIR_MIGRATE_PARAM_BANDWIDTH] = max(1, int(bw / 8 / (1024 * 1024)))
            flags = (
                lv.VIR_MIGRATE_LIVE
                | lv.VIR_MIGRATE_PEER2PEER
                | lv.VIR_MIGRATE_PERSIST_DEST
                | lv.VIR_MIGRATE_UNDEFINE_SOURCE
            )
            result: dict[str, BaseException | None] = {}

            def run() -> None:
                try:
                    dom.migrateToURI3(uri, params, flags)
                    result["error"] = None
                except BaseException as e:  # reported through the op, never lost
                    result["error"] = e

            worker = threading.Thread(target=run, name=f"migrate-{a.vm}", daemon=True)
            worker.start()
            deadline = time.monotonic() + cfg.migration_timeout_s
            progress = "progress unknown"
            while worker.is_alive():
                worker.join(cfg.migration_poll_s)
                if not worker.is_alive():
                    break
                progress = self._job_progress(dom)
                self._progress(op, f"migrating {a.vm} to {a.dst_host}: {progress}")
                if time.monotonic() >= deadline:
                    with contextlib.suppress(lv.libvirtError):
                        dom.abortJob()
                    worker.join(cfg.migration_abort_grace_s)
                    state = (
                        "aborted" if not worker.is_alive() else "abort requested, job still running"
                    )
                    raise _OpFailed(
                        f"migration of {a.vm} to {a.dst_host} timed out after "
                        f"{cfg.migration_timeout_s:g}s ({progress}): {state}; "
                        "VM stays on this host on virtio"
                    )
            err = result.get("error")
            if err is not None:
                raise _OpFailed(
                    f"migration of {a.vm} to {a.dst_host} failed: {err}; "
                    "VM stays on this host on virtio"
                )
            return f"{a.vm} migrated to {a.dst_host} ({uri})"
        finally:
            self._migrating.discard(a.vm)
