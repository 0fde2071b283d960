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
* The connection does not outlive its daemon: a restarted ``libvirtd`` leaves the old one
  dead. Every read of the host and every action first asks the :class:`LibvirtLink` for a
  live connection; a dead one is replaced (bounded attempts with back-off), the domain
  events are registered again on the new one, and the fast paths are adopted from the live
  XML, the truth after a gap in which events were missed. When no connection can be had,
  the read raises :class:`DriverError` and the agent decides nothing that period.
* ``submit`` never blocks: each action runs on a daemon worker thread, actions on the same
  VM are serialised, and ``poll`` reports progress. Every wait has a deadline.
* Capabilities are probed on the NIC, not assumed (see :mod:`sova.driver.netlink_vf`).
* Counters come from ``getAllDomainStats`` and fall back to per-domain calls where a driver
  (libvirt's own test driver, old hosts) omits a group; interfaces are matched by MAC because
  tap names change; VF traffic, invisible on the tap, comes from the PF's IFLA_VF_STATS.
* A read-only connection (``--dry-run``) refuses every action and writes nothing, not even
  a capability probe.

Why one module over 500 lines: it is the Driver protocol's one production implementation,
the class that dispatches each action to the package's parts (events, PF discovery,
sampling, hot-plug, migration) and owns the operation table they share; what can stand
alone already lives beside it in the package.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from sova.driver.base import Capabilities, DriverError, OpState, OpStatus
from sova.driver.guest_agent import GuestAgent, GuestAgentError, htb_script
from sova.driver.libvirt_driver.connection import (
    LibvirtLink,
    ReconnectPolicy,
    ensure_event_loop,
    open_connection,
    require_libvirt,
)
from sova.driver.libvirt_driver.events import (
    DomainEvent,
    EventHub,
    migrating_now,
    register_domain_events,
)
from sova.driver.libvirt_driver.failover import (
    Failover,
    FailoverError,
    GuestBond,
    Teaming,
)
from sova.driver.libvirt_driver.fastpath import FastPathSource, LabNic, RateError, SriovVF
from sova.driver.libvirt_driver.hotplug import (
    PermanentRefusal,
    RetryPolicy,
    retry_until_event,
)
from sova.driver.libvirt_driver.migration import run_migration
from sova.driver.libvirt_driver.pf import PFView
from sova.driver.libvirt_driver.sampling import (
    DomainTotals,
    domain_stats,
    host_totals,
    sample_domain,
)
from sova.driver.libvirt_driver.tap_shaping import (
    ShapingError,
    TapShaper,
    libvirt_bandwidth_usable,
)
from sova.driver.libvirt_xml import (
    DomainInfo,
    DomainNic,
    parse_domain,
)
from sova.driver.netlink_vf import NetlinkVF, VFInfo
from sova.model import (
    NIC,
    SLA,
    VM,
    Action,
    AttachVF,
    DetachVF,
    Host,
    HostSample,
    Inventory,
    Migrate,
    NicKind,
    ResourceTuple,
    SetGuestRateLimit,
    SetVFRate,
    VMCounters,
    VMState,
)

__all__ = [
    "DomainEvent",
    "LibvirtDriver",
    "LibvirtDriverConfig",
    "PFView",
    "VMReport",
    "ensure_event_loop",
    "open_connection",
]

_require_libvirt = require_libvirt
_log = logging.getLogger("sova.driver.libvirt")

# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class LibvirtDriverConfig:
    uri: str = "qemu:///system"
    read_only: bool = False
    host_name: str | None = None  # default: the hypervisor's hostname
    pf: str | None = None  # PF netdev; None = the first SR-IOV PF libvirt reports
    vf_pool: int | None = None  # VFs Sova may hand out; None = all of the PF's VFs
    sysfs_root: str = "/sys"
    # per attempt, waiting for DEVICE_ADDED/REMOVED; 8 s x 3 + back-off = 27 s fits the
    # agent's default op_timeout (30 s): a plug the executor gave up on must not go on
    hotplug_timeout_s: float = 8.0
    hotplug_attempts: int = 3
    retry_backoff_s: float = 1.0  # multiplied by the attempt number
    migration_uri_template: str = "qemu+ssh://{host}/system"
    migration_timeout_s: float = 600.0
    migration_poll_s: float = 1.0
    migration_abort_grace_s: float = 30.0
    migration_bandwidth_bps: float | None = None  # default cap when the action gives none
    sampling: str = "host"  # "host" (black box) or "guest-agent" (gray box, docs/design.md#sensing)
    max_workers: int = 4
    keepalive: tuple[int, int] = (5, 3)  # interval s, count: a dead remote host fails fast
    # A dead connection (its daemon restarted) is replaced before the next read or action:
    # this many opens, each bounded by connect_timeout_s, back-off 1, 2, 4 ... x this.
    reconnect_attempts: int = 3
    reconnect_backoff_s: float = 1.0
    connect_timeout_s: float = 10.0
    # Strategies (docs/lab.md): where the fast NIC comes from, and what keeps the VM's
    # network up while it comes and goes. Production: sriov-vf + teaming.
    fast_path: str = "sriov-vf"  # "sriov-vf" | "lab-nic"
    failover: str = "teaming"  # "teaming" | "guest-bond"
    lab_nic_bridge: str = ""  # lab-nic: the fast bridge
    lab_nic_taps: tuple[str, ...] = ()  # lab-nic: one pre-named tap per fast slot
    lab_nic_speed_mbit: int = 1000  # lab-nic: the capacity the tiers divide
    migration_unsafe: bool = False  # VIR_MIGRATE_UNSAFE: disks neither shared nor copied
    guest_exec_timeout_s: float = 30.0
    # Host-side limit without a guest agent: libvirt <bandwidth> or HTB on the tap;
    # "auto" probes the kernel (<bandwidth> needs sfq, u32 and police).
    host_side_shaping: str = "auto"  # "auto" | "bandwidth" | "tap-htb"
    # What the host reports as its own load and size (docs/lab.md#host-totals). "node": the
    # machine's counters (getCPUStats, getMemoryStats, the PF's bytes), right when one
    # hypervisor owns the machine. "domains": the sum of this daemon's running domains, for
    # hypervisors that share a machine (the lab's two daemons), where the node's counters
    # are the same for both.
    host_totals: str = "node"  # "node" | "domains"
    host_cpus: int | None = None  # cores the host reports; None = the node's
    host_memory_mib: int | None = None  # memory the host reports; None = the node's

    def hotplug_budget_s(self) -> float:
        """Longest a confirmed plug or unplug may take: every attempt's timeout plus the
        back-off between attempts (attempt x retry_backoff_s)."""
        n = self.hotplug_attempts
        return float(self.hotplug_timeout_s * n + self.retry_backoff_s * n * (n - 1) / 2)

    def __post_init__(self) -> None:
        if self.fast_path not in FAST_PATHS:
            raise ValueError(
                f"fast_path: {self.fast_path!r} is not one of {', '.join(sorted(FAST_PATHS))}"
            )
        if self.failover not in FAILOVERS:
            raise ValueError(
                f"failover: {self.failover!r} is not one of {', '.join(sorted(FAILOVERS))}"
            )
        if self.host_side_shaping not in ("auto", "bandwidth", "tap-htb"):
            raise ValueError(
                f"host_side_shaping: {self.host_side_shaping!r} is not 'auto', 'bandwidth' "
                "or 'tap-htb'"
            )
        if self.sampling not in ("host", "guest-agent"):
            raise ValueError(f"sampling: {self.sampling!r} is not 'host' or 'guest-agent'")
        if self.host_totals not in ("node", "domains"):
            raise ValueError(f"host_totals: {self.host_totals!r} is not 'node' or 'domains'")
        if self.reconnect_attempts < 1:
            raise ValueError(f"reconnect_attempts: {self.reconnect_attempts!r} must be >= 1")
        for k in ("reconnect_backoff_s", "connect_timeout_s"):
            v = getattr(self, k)
            if not v > 0:
                raise ValueError(f"{k}: {v!r} must be > 0")
        for k in ("host_cpus", "host_memory_mib"):
            v = getattr(self, k)
            if v is not None and v < 1:
                raise ValueError(f"{k}: {v!r} must be >= 1")


FAST_PATHS = frozenset({"sriov-vf", "lab-nic"})
FAILOVERS = frozenset({"teaming", "guest-bond"})
CONFIG_ENV = "SOVA_LIBVIRT_DRIVER"


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Driver settings from a TOML file (the keys of :class:`LibvirtDriverConfig`)."""
    import tomllib

    raw = tomllib.loads(Path(path).read_text())
    known = {f.name for f in fields(LibvirtDriverConfig)}
    bad = sorted(set(raw) - known)
    if bad:
        raise ValueError(f"{path}: unknown driver setting {bad[0]!r}")
    for k in ("lab_nic_taps", "keepalive"):
        if k in raw:
            raw[k] = tuple(raw[k])
    return raw


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
        self._link = LibvirtLink(
            config.uri,
            lambda: open_connection(config.uri, config.read_only, config.connect_timeout_s),
            ReconnectPolicy(
                config.reconnect_attempts, config.reconnect_backoff_s, config.connect_timeout_s
            ),
            config.keepalive,
            conn=conn,
        )
        self._netlink = netlink
        self._agent = agent
        self._hub = EventHub()
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
        self._bandwidth_usable: bool | None = None
        self._agent_silent: set[str] = set()  # VMs sampled black-box: their agent is silent
        self._domain_totals = DomainTotals()  # host_totals = "domains"
        self._callback_ids: list[int] = []
        self._fast: FastPathSource = (
            LabNic(
                self._current_conn,
                config.lab_nic_bridge,
                config.lab_nic_taps,
                config.lab_nic_speed_mbit,
            )
            if config.fast_path == "lab-nic"
            else SriovVF(self._current_conn, config.pf, config.sysfs_root, lambda: self._netlink)
        )
        self._register_events()

    @property
    def _conn(self) -> Any:
        """The link's connection now: never kept, so a replaced one is never used."""
        return self._link.conn

    def _current_conn(self) -> Any:
        return self._link.conn

    @property
    def reconnects(self) -> int:
        """Connections opened after the first (the daemon restarted or went away)."""
        return self._link.generation

    def _connected(self) -> None:
        """Before reading the host or acting on it: a dead connection is replaced, or
        :class:`DriverError` says why there is none (nothing is read from the dead one).

        After a replacement the events are registered again (those of the old connection
        died with it), a ``reconnected`` marker tells event readers that the history before
        it has gaps, and the fast paths are adopted from the live XML as after a restart."""
        if not self._link.ensure():
            return
        _log.info(
            "libvirt connection %d opened: events registered again, fast paths adopted "
            "from the live XML",
            self.reconnects + 1,
        )
        self._callback_ids.clear()
        self._hub.post("reconnected", "")
        self._register_events()
        if not self.config.read_only:
            for note in self.adopt_fast_paths():
                _log.info("after reconnecting: %s", note)

    @property
    def _failover(self) -> Failover:
        return GuestBond(self._agent) if self.config.failover == "guest-bond" else Teaming()

    @property
    def strategies(self) -> tuple[str, str]:
        """(fast-path source, failover) in use, as named in the config."""
        return self._fast.name, self._failover.name

    @classmethod
    def open(cls, uri: str, *, read_only: bool = False, **kw: Any) -> LibvirtDriver:
        """Open a host the way the agent does: netlink on the local PF when pyroute2 exists.

        Settings beyond the URI come from ``kw`` and, under them, from the TOML file named
        by ``$SOVA_LIBVIRT_DRIVER`` (how the lab gives each ``sova agent`` its strategies).
        """
        settings: dict[str, Any] = {}
        if os.environ.get(CONFIG_ENV):
            settings = load_config_file(os.environ[CONFIG_ENV])
        settings.update(kw)
        config = LibvirtDriverConfig(uri=uri, read_only=read_only, **settings)
        netlink: NetlinkVF | None = None
        drv = cls(config)
        pf = drv.pf_view().name
        if pf and config.fast_path == "sriov-vf":
            try:
                netlink = NetlinkVF(pf)
            except ImportError:
                netlink = None
        drv._netlink = netlink
        drv._agent = GuestAgent(exec_timeout_s=config.guest_exec_timeout_s)
        if not read_only:
            for note in drv.adopt_fast_paths():
                _log.info("%s", note)
        return drv

    def adopt_fast_paths(self) -> list[str]:
        """After a restart, the live XML is the truth: each fast NIC found in a running
        domain is made to carry the guest's traffic (the failover's after-plug step, which
        is idempotent), or unplugged (backup confirmed first) when that fails. A plug the
        previous process was killed in the middle of then leaves no NIC that holds a slot
        but carries nothing. With ``teaming`` there is nothing to do (the guest's
        net_failover switches by itself)."""
        lv = _require_libvirt()
        notes: list[str] = []
        try:
            doms = self._conn.listAllDomains(lv.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
        except lv.libvirtError as e:
            return [f"adopting fast paths: cannot list domains: {e}"]
        for dom in doms:
            try:
                info = self._live(dom)
            except (lv.libvirtError, _OpFailed):
                continue
            fast, backup = self._fast.nic(info), self._failover.backup(info)
            if fast is None or backup is None:
                continue
            try:
                done = self._failover.after_plug(dom, fast, backup)
            except FailoverError as e:
                op = _Op(f"adopt:{info.name}", DetachVF(info.name))
                try:
                    undone = f"unplugged ({self._detach(op, info.name)})"
                except _OpFailed as e2:
                    undone = f"left plugged, unplug failed: {e2}"
                notes.append(
                    f"fast NIC of {info.name} found in the live XML but not made active: {e}; "
                    f"{undone}"
                )
                continue
            if done:
                notes.append(f"fast NIC of {info.name} found in the live XML: {done}")
        return notes

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        for cid in self._callback_ids:
            with contextlib.suppress(Exception):
                self._conn.domainEventDeregisterAny(cid)
        self._callback_ids.clear()
        if self._netlink is not None:
            self._netlink.close()

    def _register_events(self) -> None:
        self._callback_ids.extend(register_domain_events(self._conn, self._hub))

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
        """The fast-path pool: the PF's VFs (sysfs indices first), or the lab-nic slots."""
        return self._fast.view()

    def _vf_holders(self, pf: PFView) -> dict[str, tuple[str, str]]:
        return self._fast.holders(pf)

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
        self._connected()
        pf = self.pf_view()
        notes = list(pf.notes)
        pool = len(pf.vfs) if self.config.vf_pool is None else min(self.config.vf_pool, len(pf.vfs))

        def free() -> int | None:
            held = self._vf_holders(pf)
            return next((i for i, a in sorted(pf.vfs.items()) if a not in held), None)

        nic, more = self._fast.probe(free, pf, self.config.read_only)
        notes.extend(more)
        fast, failover = self.strategies
        notes.append(f"strategies: fast path {fast}, failover {failover}")
        if fast == "lab-nic" and failover == "teaming":
            notes.append(
                "teaming needs a hostdev VF (libvirt refuses transient teaming on a virtio "
                "NIC): no VM is failover-ready; use failover = 'guest-bond'"
            )
        ok, why = libvirt_bandwidth_usable()
        self._bandwidth_usable = ok
        notes.append(why)
        if not nic.min_rate:
            fallback = (
                "guest-side HTB through the guest agent"
                if self._agent
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
                    if self._agent
                    else "none: a VM's VF traffic is invisible (taps carry only the virtio "
                    "path); run the agent with a guest agent channel"
                )
            )
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
        self._connected()
        pf = self.pf_view()
        out: list[VMReport] = []
        for dom in self._conn.listAllDomains(0):
            try:
                info = parse_domain(dom.XMLDesc(0))
                running = bool(dom.isActive())
            except lv.libvirtError:
                continue
            r = self._failover.readiness(info)
            vf_idx, kind = self._held_vf(info, pf)
            reason = r.reason
            if kind == "plain-hostdev":
                reason = (reason + "; " if reason else "") + (
                    "holds a VF as plain hostdev (no teaming): cannot live-migrate"
                )
            out.append(VMReport(info.name, running, r.ready, reason, vf_idx, kind))
        return sorted(out, key=lambda r: r.name)

    def _held_vf(self, info: DomainInfo, pf: PFView) -> tuple[int | None, str]:
        return self._fast.held(info, pf)

    def _vf_table(self) -> dict[int, VFInfo]:
        return self._fast.rates()

    def _migrating_now(self) -> set[str]:
        return migrating_now(self._hub, self._migrating)

    def inventory(self) -> Inventory:
        lv = _require_libvirt()
        self._connected()
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
            ready = self._failover.readiness(info)
            backup = self._failover.backup(info)
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
        if self.config.host_cpus is not None:
            cores = self.config.host_cpus
        if self.config.host_memory_mib is not None:
            mem = self.config.host_memory_mib * 1024 * 1024
        nic = NIC(
            name=pf.name,
            capacity_bps=pf.speed_mbit * 1e6,
            vf_pool=caps.vf_pool,
            caps=caps.nic,
        )
        return Inventory(host=Host(self._host_name(), cores, mem, nic), vms=vms)

    # ------------------------------------------------------------------ sampling

    def sample(self) -> HostSample:
        self._connected()
        t = self.now()
        pf = self.pf_view()
        vf_table = self._vf_table()
        lv = _require_libvirt()
        gray = self._agent if self._gray_box() else None
        if not self.capabilities().nic.vf_stats:
            vf_table = {}  # zeros from a driver that does not count per VF are no counters
        vms: dict[str, VMCounters] = {}
        for dom, st in domain_stats(self._conn):
            try:
                c = sample_domain(dom, st, pf, vf_table, gray, self._agent_silent)
            except lv.libvirtError:
                continue  # domain went away between listing and reading
            vms[c.vm] = c
        totals = (
            self._domain_totals.update(vms)
            if self.config.host_totals == "domains"
            else host_totals(self._conn, pf, self.config.sysfs_root)
        )
        return HostSample(self._host_name(), t, vms, totals)

    def _gray_box(self) -> bool:
        """Sample inside the guests: when configured, or when the PF's VF counters are
        unusable (igb) so that a VF-holding VM is not seen as idle. All VMs switch
        together, from the first sample: one VM's counters never change source mid-run."""
        if self.config.sampling == "guest-agent":
            return True
        return self._fast.name == "sriov-vf" and not self.capabilities().nic.vf_stats

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
                self._connected()
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
        except (_OpFailed, DriverError) as e:
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

    def _policy(self) -> RetryPolicy:
        cfg = self.config
        return RetryPolicy(cfg.hotplug_attempts, cfg.hotplug_timeout_s, cfg.retry_backoff_s)

    # -- rates

    def _apply_rate(self, vf: int, max_bps: float | None, min_bps: float | None) -> str:
        """Best effort on attach: the VF helps even where the NIC cannot cap it."""
        if not max_bps and not min_bps:
            return ""
        if self._fast.name == "sriov-vf" and self._netlink is None:
            return "; rate not enforced: no netlink access to the PF"
        caps = self.capabilities().nic
        notes = ""
        if min_bps and not caps.min_rate:
            notes += "; min_tx_rate unsupported by this NIC: not enforced at the VF"
            min_bps = None
        if max_bps and not caps.max_rate:
            return notes + "; max_tx_rate unsupported by this NIC: tier not enforced"
        try:
            self._fast.set_rate(vf, max_bps, min_bps)
        except RateError as e:
            return notes + f"; rate not applied: {e}"
        return notes

    def _set_rate(self, a: SetVFRate) -> str:
        dom = self._dom(a.vm)
        info = self._live(dom)
        idx, _ = self._held_vf(info, self.pf_view())
        if idx is None:
            raise _OpFailed(f"{a.vm} holds no VF: nothing to rate-limit")
        if self._fast.name == "sriov-vf" and self._netlink is None:
            raise _OpFailed("no netlink access to the PF: VF rates cannot be set")
        min_bps = a.min_bps
        note = ""
        if min_bps and not self.capabilities().nic.min_rate:
            min_bps, note = None, "; min_tx_rate unsupported by this NIC: not enforced"
        try:
            self._fast.set_rate(idx, a.max_bps, min_bps)
        except RateError as e:
            raise _OpFailed(str(e)) from e
        return f"vf {idx} max {a.max_bps or 0:.0f} bit/s{note}"

    def _guest_limit(self, a: SetGuestRateLimit) -> str:
        dom = self._dom(a.vm)
        info = self._live(dom)
        backup = self._failover.backup(info) or next((n for n in info.nics if n.is_virtio), None)
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
        """Without a guest agent: a limit on the virtio interface, on the host side.

        libvirt's ``<bandwidth>`` where the kernel supports it, else HTB on the tap (see
        :mod:`.tap_shaping`). Either shapes only the virtio path — a VF's traffic bypasses
        the tap — which the detail says, so nobody mistakes it for a limit on the whole VM.
        """
        lv = _require_libvirt()
        mode = self.config.host_side_shaping
        if mode == "auto" and self._bandwidth_usable is None:
            self._bandwidth_usable = libvirt_bandwidth_usable()[0]
        if mode == "tap-htb" or (mode == "auto" and not self._bandwidth_usable):
            if not nic.target_dev:
                raise _OpFailed(f"{a.vm}: virtio interface {nic.mac} has no tap to shape")
            try:
                done = TapShaper(nic.target_dev).apply(a.rate_bps)
            except ShapingError as e:
                raise _OpFailed(f"host-side HTB on {a.vm} failed: {e}") from e
            return f"host-side {done} (virtio path only, no guest agent; no <bandwidth> here)"
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
        ready = self._failover.readiness(info)
        if not ready.ready:
            raise _OpFailed(f"{a.vm} is not failover-ready and never gets a VF: {ready.reason}")
        backup = self._failover.backup(info)
        assert backup is not None
        idx, slot = self._reserve_free_vf(a.vm, pf)
        try:
            note = self._apply_rate(idx, a.max_bps, a.min_bps)
            xml = self._fast.plug_xml(backup, slot, pairing=self._failover.name == "teaming")
            try:
                out = retry_until_event(
                    hub=self._hub,
                    vm=a.vm,
                    verb="attach",
                    request=lambda: dom.attachDeviceFlags(xml, lv.VIR_DOMAIN_AFFECT_LIVE),
                    completed=lambda: self._fast.nic(self._live(dom)) is not None,
                    success_kind="device-added",
                    policy=self._policy(),
                    progress=lambda n: self._progress(
                        op, f"attaching vf {idx} ({slot}), attempt {n}"
                    ),
                )
            except PermanentRefusal as e:
                raise _OpFailed(
                    f"attaching vf {idx} to {a.vm} failed: {e} (not retried); VM stays on virtio"
                ) from e
            if out.gone:
                raise _OpFailed(
                    f"{a.vm} left this host while vf {idx} was being attached "
                    f"(migrated away or undefined): vf {idx} stays in the pool"
                )
            if out.stopped:
                raise _OpFailed(f"{a.vm} stopped while vf {idx} was being attached")
            if not out.done:
                raise _OpFailed(
                    f"attaching vf {idx} to {a.vm} failed after {out.attempts} attempts: "
                    f"{out.last}; VM stays on virtio"
                )
            note += self._fast.after_plug(idx)
            note += self._activate(op, dom, a.vm)
            how = "" if out.how == "already" else f", confirmed by {out.how}"
            return f"vf {idx} attached to {a.vm}{how}{note}"
        finally:
            with self._reserve_lock:
                self._reserved.pop(slot, None)

    def _activate(self, op: _Op, dom: Any, vm: str) -> str:
        """After a plug: the failover makes the new NIC carry the traffic (guest-bond)."""
        info = self._live(dom)
        fast, backup = self._fast.nic(info), self._failover.backup(info)
        if fast is None or backup is None:
            return ""
        self._progress(op, f"making the fast NIC of {vm} active ({self._failover.name})")
        try:
            done = self._failover.after_plug(dom, fast, backup)
        except FailoverError as e:
            # A plugged NIC that carries nothing would hold a slot and be counted as a fast
            # path: take it out again (backup confirmed first, as for any unplug).
            try:
                undone = f"unplugged again ({self._detach(op, vm)})"
            except _OpFailed as e2:
                undone = f"left plugged, unplug failed: {e2}"
            raise _OpFailed(
                f"fast NIC plugged into {vm} but not made active: {e}; traffic stays on the "
                f"backup; NIC {undone}"
            ) from e
        return f"; {done}" if done else ""

    # -- the failover around a fast NIC another actor plugs (orchestrator = "openstack")

    def to_backup(self, vm: str) -> str:
        """Before Nova unplugs ``vm``'s fast NIC: the failover moves the traffic to the backup
        and confirms it. :class:`DriverError` when it cannot: the NIC must then stay."""
        dom, fast, backup = self._failover_pair(vm)
        if fast is None:
            return f"{vm} has no fast NIC"
        if backup.link_state == "down":
            raise DriverError(f"{vm}: backup path {backup.mac} is link-down; fast NIC kept")
        try:
            return self._failover.before_unplug(dom, fast, backup) or "backup active"
        except FailoverError as e:
            raise DriverError(f"{vm}: backup path not confirmed active: {e}") from e

    def to_fast(self, vm: str) -> str:
        """After Nova plugged ``vm``'s fast NIC: the failover makes it carry the traffic and
        confirms it; :class:`DriverError` when it cannot (the caller unplugs it again)."""
        dom, fast, backup = self._failover_pair(vm)
        if fast is None:
            raise DriverError(f"{vm}: no fast NIC in the live XML")
        try:
            return self._failover.after_plug(dom, fast, backup) or "fast NIC active"
        except FailoverError as e:
            raise DriverError(f"{vm}: fast NIC not made active: {e}") from e

    def _failover_pair(self, vm: str) -> tuple[Any, DomainNic | None, DomainNic]:
        try:
            dom = self._dom(vm)
        except _OpFailed as e:
            raise DriverError(str(e)) from e
        info = self._live(dom)
        backup = self._failover.backup(info)
        if backup is None:
            raise DriverError(f"{vm}: no backup interface for the {self._failover.name} failover")
        return dom, self._fast.nic(info), backup

    def _detach(self, op: _Op, vm: str) -> str:
        lv = _require_libvirt()
        dom = self._dom(vm)
        info = self._live(dom)
        vf = self._fast.nic(info)
        if vf is None:
            if any(self.pf_view().index_of(p) is not None for p in info.plain_hostdev_pci):
                raise _OpFailed(
                    f"{vm} holds a VF as plain <hostdev> without a virtio failover partner; "
                    "Sova will not pull it (the VM would lose its network)"
                )
            return f"{vm} holds no VF: no-op"
        backup = self._failover.backup(info)
        if backup is None or not self._failover.paired(vf, backup):
            raise _OpFailed(
                f"{vm}: VF has no virtio failover partner; not detaching (the VM would lose its network)"
            )
        if backup.link_state == "down":
            raise _OpFailed(
                f"{vm}: virtio backup path {backup.alias} is link-down; VF kept until it is up"
            )
        pf = self.pf_view()
        idx = pf.index_of(vf.pci or vf.target_dev)
        # Never unplug before the backup is confirmed to carry the traffic.
        self._progress(op, f"moving {vm} to its backup path ({self._failover.name})")
        try:
            moved = self._failover.before_unplug(dom, vf, backup)
        except FailoverError as e:
            raise _OpFailed(
                f"not detaching vf {idx} from {vm}: the backup path could not be confirmed "
                f"active: {e}; fast NIC kept"
            ) from e
        moved = f" ({moved})" if moved else ""

        def request() -> object:
            # By alias: a teamed VF shares its MAC with the virtio backup, and libvirt finds
            # an <interface> to detach by MAC, so detach-by-XML is refused ("multiple devices
            # matching MAC address … found"). Every device in the live XML has an alias
            # (ours ua-sova-vf, an operator's hostdevN): the XML is only for one without.
            if vf.alias:
                return dom.detachDeviceAlias(vf.alias, lv.VIR_DOMAIN_AFFECT_LIVE)
            return dom.detachDeviceFlags(self._fast.unplug_xml(vf), lv.VIR_DOMAIN_AFFECT_LIVE)

        try:
            out = retry_until_event(
                hub=self._hub,
                vm=vm,
                verb="detach",
                request=request,
                completed=lambda: self._fast.nic(self._live(dom)) is None,
                success_kind="device-removed",
                alias=vf.alias,
                policy=self._policy(),
                progress=lambda n: self._progress(op, f"detaching vf {idx} from {vm}, attempt {n}"),
            )
        except PermanentRefusal as e:
            raise _OpFailed(
                f"detaching vf {idx} from {vm} failed: {e} (not retried); "
                "VF still attached, virtio path unchanged"
            ) from e
        if out.gone:
            return f"{vm} left this host (migrated away or undefined): vf {idx} is back in the pool"
        if out.stopped:
            return f"{vm} stopped; its VF is released"
        if out.done:
            if out.how == "already":
                return f"vf {idx} detached from {vm}; virtio carries its traffic{moved}"
            return f"vf {idx} detached from {vm}, confirmed by {out.how}{moved}"
        raise _OpFailed(
            f"detaching vf {idx} from {vm} failed after {out.attempts} attempts: "
            f"{out.last}; VF still attached, virtio path unchanged{moved}"
        )

    # -- migration

    def _migrate(self, op: _Op, a: Migrate) -> str:
        lv = _require_libvirt()
        cfg = self.config
        dom = self._dom(a.vm)
        if not dom.isActive():
            raise _OpFailed(f"{a.vm} is not running: nothing to live-migrate")
        self._migrating.add(a.vm)
        try:
            info = self._live(dom)
            blocker = self._fast.migration_blocker(info, self.pf_view())
            if blocker:
                raise _OpFailed(blocker)
            if self._fast.nic(info) is not None:
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
            if cfg.migration_unsafe:
                flags |= lv.VIR_MIGRATE_UNSAFE
            res = run_migration(
                dom,
                uri,
                params,
                flags,
                timeout_s=cfg.migration_timeout_s,
                poll_s=cfg.migration_poll_s,
                abort_grace_s=cfg.migration_abort_grace_s,
                progress=lambda p: self._progress(op, f"migrating {a.vm} to {a.dst_host}: {p}"),
            )
            if res.timed_out:
                raise _OpFailed(
                    f"migration of {a.vm} to {a.dst_host} timed out after "
                    f"{cfg.migration_timeout_s:g}s ({res.progress}): {res.abort_state}; "
                    "VM stays on this host on virtio"
                )
            if not res.ok:
                raise _OpFailed(
                    f"migration of {a.vm} to {a.dst_host} failed: {res.error}; "
                    "VM stays on this host on virtio"
                )
            return f"{a.vm} migrated to {a.dst_host} ({uri})"
        finally:
            self._migrating.discard(a.vm)
