"""What every part of the libvirt driver reads: the connection (through the link that
replaces a dead one), the domain events, the fast-path source, the failover, and the guest
agent and netlink handles, which the driver may be given after it is built."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sova.driver.guest_agent import GuestAgent
from sova.driver.libvirt_driver.config import LibvirtDriverConfig
from sova.driver.libvirt_driver.connection import LibvirtLink, require_libvirt
from sova.driver.libvirt_driver.events import DomainEvents, EventHub, migrating_now
from sova.driver.libvirt_driver.failover import Failover
from sova.driver.libvirt_driver.fastpath import FastPathSource, LabNic, SriovVF
from sova.driver.libvirt_driver.hotplug import RetryPolicy
from sova.driver.libvirt_driver.operations import OpFailed
from sova.driver.libvirt_driver.pf import PFView
from sova.driver.libvirt_xml import DomainInfo, parse_domain
from sova.driver.netlink_vf import NetlinkVF

_log = logging.getLogger("sova.driver.libvirt")


class DriverContext:
    """The host as the driver's parts see it; holds no connection of its own (the link's
    current one is asked for on every use, so a replaced one is never used)."""

    def __init__(
        self,
        config: LibvirtDriverConfig,
        link: LibvirtLink,
        failover: Callable[[], Failover],
        netlink: NetlinkVF | None = None,
        agent: GuestAgent | None = None,
    ) -> None:
        self.config = config
        self.link = link
        self.events = DomainEvents()
        self.netlink = netlink
        self.agent = agent
        self._failover = failover
        self.migrating: set[str] = set()  # our migrations in flight
        self.bandwidth_usable: bool | None = None  # libvirt <bandwidth>, once probed
        self.on_reconnect: list[Callable[[], None]] = []
        self.fast: FastPathSource = (
            LabNic(
                lambda: self.conn,
                config.lab_nic_bridge,
                config.lab_nic_taps,
                config.lab_nic_speed_mbit,
            )
            if config.fast_path == "lab-nic"
            else SriovVF(lambda: self.conn, config.pf, config.sysfs_root, lambda: self.netlink)
        )

    @property
    def conn(self) -> Any:
        return self.link.conn

    @property
    def hub(self) -> EventHub:
        return self.events.hub

    @property
    def failover(self) -> Failover:
        return self._failover()

    def connected(self) -> None:
        """Before reading the host or acting on it: a dead connection is replaced, or
        :class:`DriverError` says why there is none (nothing is read from the dead one).
        After a replacement the ``on_reconnect`` steps run (events registered again, fast
        paths adopted from the live XML)."""
        if not self.link.ensure():
            return
        _log.info(
            "libvirt connection %d opened: events registered again, fast paths adopted "
            "from the live XML",
            self.link.generation + 1,
        )
        for step in self.on_reconnect:
            step()

    def host_name(self) -> str:
        if self.config.host_name:
            return self.config.host_name
        try:
            return str(self.conn.getHostname())
        except Exception:
            return self.config.uri

    def pf_view(self) -> PFView:
        return self.fast.view()

    def dom(self, vm: str) -> Any:
        lv = require_libvirt()
        try:
            return self.conn.lookupByName(vm)
        except lv.libvirtError as e:
            raise OpFailed(f"VM {vm} not found on {self.host_name()}: {e}") from e

    def live(self, dom: Any) -> DomainInfo:
        return parse_domain(dom.XMLDesc(0))

    def retry_policy(self) -> RetryPolicy:
        cfg = self.config
        return RetryPolicy(cfg.hotplug_attempts, cfg.hotplug_timeout_s, cfg.retry_backoff_s)

    def migrating_now(self) -> set[str]:
        return migrating_now(self.hub, self.migrating)
