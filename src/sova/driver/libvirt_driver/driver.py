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

The class here only composes the package's parts, one concern each, over a shared
:class:`~.context.DriverContext`: the connection and events (``context``, ``connection``,
``events``), inventory and capabilities (``inventory``), sampling (``sampling``), hot-plug
and failover (``plug``), rates (``shaping``), migration (``migration``), reconciliation
after a restart or reconnect (``reconcile``), and the operation table (``operations``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from sova.driver.base import Capabilities, OpStatus
from sova.driver.guest_agent import GuestAgent
from sova.driver.libvirt_driver.config import CONFIG_ENV, LibvirtDriverConfig, load_config_file
from sova.driver.libvirt_driver.connection import (
    LibvirtLink,
    ReconnectPolicy,
    ensure_event_loop,
    open_connection,
)
from sova.driver.libvirt_driver.context import DriverContext
from sova.driver.libvirt_driver.events import DomainEvent
from sova.driver.libvirt_driver.failover import Failover, GuestBond, Teaming
from sova.driver.libvirt_driver.fastpath import FastPathSource
from sova.driver.libvirt_driver.inventory import HostInventory, VMReport
from sova.driver.libvirt_driver.migration import Migrator
from sova.driver.libvirt_driver.operations import DriverOp, DriverOps, OpFailed
from sova.driver.libvirt_driver.pf import PFView
from sova.driver.libvirt_driver.plug import HotPlug
from sova.driver.libvirt_driver.reconcile import Reconciler
from sova.driver.libvirt_driver.sampling import Sampler
from sova.driver.libvirt_driver.shaping import Shaping
from sova.driver.netlink_vf import NetlinkVF
from sova.model import (
    Action,
    AttachVF,
    DetachVF,
    HostSample,
    Inventory,
    Migrate,
    SetGuestRateLimit,
    SetVFRate,
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

_log = logging.getLogger("sova.driver.libvirt")


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
        # The failover is asked for on every use, through the property, so that a subclass
        # (the lab's fault tests) can put its own in.
        ctx = DriverContext(config, self._link, lambda: self._failover, netlink, agent)
        self._ctx = ctx
        self._ops = DriverOps(config.max_workers)
        self._inventory = HostInventory(ctx)
        self._sampler = Sampler(ctx, self._inventory, self.now)
        self._shaping = Shaping(ctx, self._inventory)
        self._plug = HotPlug(ctx, self._inventory, self._shaping, self._ops)
        self._migrator = Migrator(ctx, self._plug, self._ops)
        self._reconciler = Reconciler(ctx, self._plug)
        ctx.on_reconnect.append(lambda: ctx.events.reconnected(ctx.conn))
        ctx.on_reconnect.append(self._reconciler.after_reconnect)
        ctx.events.register(ctx.conn)

    # The parts' state, read (and the handles set) by the lab and the tests.

    @property
    def _conn(self) -> Any:
        """The link's connection now: never kept, so a replaced one is never used."""
        return self._link.conn

    @property
    def _agent(self) -> GuestAgent | None:
        return self._ctx.agent

    @_agent.setter
    def _agent(self, agent: GuestAgent | None) -> None:
        self._ctx.agent = agent

    @property
    def _netlink(self) -> NetlinkVF | None:
        return self._ctx.netlink

    @_netlink.setter
    def _netlink(self, netlink: NetlinkVF | None) -> None:
        self._ctx.netlink = netlink

    @property
    def _fast(self) -> FastPathSource:
        return self._ctx.fast

    @property
    def _failover(self) -> Failover:
        return GuestBond(self._agent) if self.config.failover == "guest-bond" else Teaming()

    @property
    def reconnects(self) -> int:
        """Connections opened after the first (the daemon restarted or went away)."""
        return self._link.generation

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
        """After a restart, the live XML is the truth (see :class:`~.reconcile.Reconciler`)."""
        return self._reconciler.adopt_fast_paths()

    def close(self) -> None:
        self._ctx.events.close(self._conn)
        if self._netlink is not None:
            self._netlink.close()

    def add_event_listener(self, cb: Callable[[DomainEvent], None]) -> None:
        """Called (on libvirt's event thread) for every domain event: keeps a cache true."""
        self._ctx.events.add_listener(cb)

    def events(self) -> list[DomainEvent]:
        return self._ctx.events.recent()

    def now(self) -> float:
        return time.monotonic()

    # The host as read.

    def pf_view(self) -> PFView:
        """The fast-path pool: the PF's VFs (sysfs indices first), or the lab-nic slots."""
        return self._ctx.pf_view()

    def capabilities(self) -> Capabilities:
        return self._inventory.capabilities()

    def refresh_capabilities(self) -> Capabilities:
        return self._inventory.refresh_capabilities()

    def vm_reports(self) -> list[VMReport]:
        """Per-VM findings for the operator: failover readiness and the VF each holds."""
        return self._inventory.vm_reports()

    def inventory(self) -> Inventory:
        return self._inventory.inventory()

    def sample(self) -> HostSample:
        return self._sampler.sample()

    # Actions.

    def submit(self, action: Action) -> str:
        refuse = "read-only connection: actions are never executed" if self.config.read_only else ""
        return self._ops.submit(action, self._run, refuse)

    def poll(self, op_id: str) -> OpStatus:
        return self._ops.poll(op_id)

    def _run(self, op: DriverOp) -> str:
        """On the operation's worker, the VM's lock held: the action, by the part that owns it."""
        a = op.action
        self._ctx.connected()
        if isinstance(a, AttachVF):
            return self._plug.attach(op, a)
        if isinstance(a, DetachVF):
            return self._plug.detach(op, a.vm)
        if isinstance(a, SetVFRate):
            return self._shaping.set_rate(a)
        if isinstance(a, SetGuestRateLimit):
            return self._shaping.guest_limit(a)
        if isinstance(a, Migrate):
            return self._migrator.migrate(op, a)
        raise OpFailed(f"unsupported action {a!r}")  # pragma: no cover - a closed union

    # The failover around a fast NIC another actor plugs (orchestrator = "openstack").

    def to_backup(self, vm: str) -> str:
        """Before Nova unplugs ``vm``'s fast NIC: the failover moves the traffic to the backup
        and confirms it. :class:`DriverError` when it cannot: the NIC must then stay."""
        return self._plug.to_backup(vm)

    def to_fast(self, vm: str) -> str:
        """After Nova plugged ``vm``'s fast NIC: the failover makes it carry the traffic and
        confirms it; :class:`DriverError` when it cannot (the caller unplugs it again)."""
        return self._plug.to_fast(vm)
