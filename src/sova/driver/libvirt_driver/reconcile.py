"""Reconciliation: after a restart or a reconnect the live XML is the truth, and what a
previous process (or the dead connection) left half done is finished or undone."""

from __future__ import annotations

import logging

from sova.driver.libvirt_driver.connection import require_libvirt
from sova.driver.libvirt_driver.context import DriverContext
from sova.driver.libvirt_driver.failover import FailoverError
from sova.driver.libvirt_driver.operations import DriverOp, OpFailed
from sova.driver.libvirt_driver.plug import HotPlug
from sova.model import DetachVF

_log = logging.getLogger("sova.driver.libvirt")


class Reconciler:
    """Adopts the fast paths found in the live XML."""

    def __init__(self, ctx: DriverContext, plug: HotPlug) -> None:
        self._ctx = ctx
        self._plug = plug

    def after_reconnect(self) -> None:
        """Events were missed in the gap: the live XML says what the fast paths are."""
        if not self._ctx.config.read_only:
            for note in self.adopt_fast_paths():
                _log.info("after reconnecting: %s", note)

    def adopt_fast_paths(self) -> list[str]:
        """After a restart, the live XML is the truth: each fast NIC found in a running
        domain is made to carry the guest's traffic (the failover's after-plug step, which
        is idempotent), or unplugged (backup confirmed first) when that fails. A plug the
        previous process was killed in the middle of then leaves no NIC that holds a slot
        but carries nothing. With ``teaming`` there is nothing to do (the guest's
        net_failover switches by itself)."""
        lv = require_libvirt()
        notes: list[str] = []
        try:
            doms = self._ctx.conn.listAllDomains(lv.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
        except lv.libvirtError as e:
            return [f"adopting fast paths: cannot list domains: {e}"]
        for dom in doms:
            try:
                info = self._ctx.live(dom)
            except (lv.libvirtError, OpFailed):
                continue
            fast, backup = self._ctx.fast.nic(info), self._ctx.failover.backup(info)
            if fast is None or backup is None:
                continue
            try:
                done = self._ctx.failover.after_plug(dom, fast, backup)
            except FailoverError as e:
                op = DriverOp(f"adopt:{info.name}", DetachVF(info.name))
                try:
                    undone = f"unplugged ({self._plug.detach(op, info.name)})"
                except OpFailed as e2:
                    undone = f"left plugged, unplug failed: {e2}"
                notes.append(
                    f"fast NIC of {info.name} found in the live XML but not made active: {e}; "
                    f"{undone}"
                )
                continue
            if done:
                notes.append(f"fast NIC of {info.name} found in the live XML: {done}")
        return notes
