"""Rates: a VF's tier at the NIC (IFLA_VF_RATE, or the lab NIC's shaper), and a VM's limit
on its virtio path (HTB inside the guest through the guest agent, else on the host side)."""

from __future__ import annotations

from typing import Any

from sova.driver.guest_agent import GuestAgentError, htb_script
from sova.driver.libvirt_driver.connection import require_libvirt
from sova.driver.libvirt_driver.context import DriverContext
from sova.driver.libvirt_driver.fastpath import RateError
from sova.driver.libvirt_driver.inventory import HostInventory
from sova.driver.libvirt_driver.operations import OpFailed
from sova.driver.libvirt_driver.tap_shaping import (
    ShapingError,
    TapShaper,
    libvirt_bandwidth_usable,
)
from sova.driver.libvirt_xml import DomainNic
from sova.model import SetGuestRateLimit, SetVFRate


class Shaping:
    """Sets VF rates and guest rate limits; each returns the detail the operation reports."""

    def __init__(self, ctx: DriverContext, inventory: HostInventory) -> None:
        self._ctx = ctx
        self._inventory = inventory

    def apply_rate(self, vf: int, max_bps: float | None, min_bps: float | None) -> str:
        """Best effort on attach: the VF helps even where the NIC cannot cap it."""
        if not max_bps and not min_bps:
            return ""
        if self._ctx.fast.name == "sriov-vf" and self._ctx.netlink is None:
            return "; rate not enforced: no netlink access to the PF"
        caps = self._inventory.capabilities().nic
        notes = ""
        if min_bps and not caps.min_rate:
            notes += "; min_tx_rate unsupported by this NIC: not enforced at the VF"
            min_bps = None
        if max_bps and not caps.max_rate:
            return notes + "; max_tx_rate unsupported by this NIC: tier not enforced"
        try:
            self._ctx.fast.set_rate(vf, max_bps, min_bps)
        except RateError as e:
            return notes + f"; rate not applied: {e}"
        return notes

    def set_rate(self, a: SetVFRate) -> str:
        dom = self._ctx.dom(a.vm)
        info = self._ctx.live(dom)
        idx, _ = self._ctx.fast.held(info, self._ctx.pf_view())
        if idx is None:
            raise OpFailed(f"{a.vm} holds no VF: nothing to rate-limit")
        if self._ctx.fast.name == "sriov-vf" and self._ctx.netlink is None:
            raise OpFailed("no netlink access to the PF: VF rates cannot be set")
        min_bps = a.min_bps
        note = ""
        if min_bps and not self._inventory.capabilities().nic.min_rate:
            min_bps, note = None, "; min_tx_rate unsupported by this NIC: not enforced"
        try:
            self._ctx.fast.set_rate(idx, a.max_bps, min_bps)
        except RateError as e:
            raise OpFailed(str(e)) from e
        return f"vf {idx} max {a.max_bps or 0:.0f} bit/s{note}"

    def guest_limit(self, a: SetGuestRateLimit) -> str:
        dom = self._ctx.dom(a.vm)
        info = self._ctx.live(dom)
        backup = self._ctx.failover.backup(info) or next(
            (n for n in info.nics if n.is_virtio), None
        )
        if backup is None or not backup.mac:
            raise OpFailed(f"{a.vm} has no virtio interface to shape")
        if self._ctx.agent is None:
            return self._host_side(dom, backup, a)
        try:
            self._ctx.agent.exec(dom, "/bin/sh", htb_script(backup.mac, a.rate_bps))
        except GuestAgentError as e:
            raise OpFailed(f"guest-side HTB on {a.vm} failed: {e}") from e
        note = "; max_pps not enforceable with HTB: ignored" if a.max_pps else ""
        what = "removed" if not a.rate_bps else f"{a.rate_bps:.0f} bit/s"
        return f"guest HTB on {backup.mac}: {what}{note}"

    def _host_side(self, dom: Any, nic: DomainNic, a: SetGuestRateLimit) -> str:
        """Without a guest agent: a limit on the virtio interface, on the host side.

        libvirt's ``<bandwidth>`` where the kernel supports it, else HTB on the tap (see
        :mod:`.tap_shaping`). Either shapes only the virtio path — a VF's traffic bypasses
        the tap — which the detail says, so nobody mistakes it for a limit on the whole VM.
        """
        lv = require_libvirt()
        mode = self._ctx.config.host_side_shaping
        if mode == "auto" and self._ctx.bandwidth_usable is None:
            self._ctx.bandwidth_usable = libvirt_bandwidth_usable()[0]
        if mode == "tap-htb" or (mode == "auto" and not self._ctx.bandwidth_usable):
            if not nic.target_dev:
                raise OpFailed(f"{a.vm}: virtio interface {nic.mac} has no tap to shape")
            try:
                done = TapShaper(nic.target_dev).apply(a.rate_bps)
            except ShapingError as e:
                raise OpFailed(f"host-side HTB on {a.vm} failed: {e}") from e
            return f"host-side {done} (virtio path only, no guest agent; no <bandwidth> here)"
        # libvirt's "outbound" is traffic leaving the guest, in KiB/s; 0 removes the limit.
        kib = 0 if not a.rate_bps else max(1, round(a.rate_bps / 8 / 1024))
        params = {"outbound.average": kib, "outbound.peak": kib, "outbound.burst": 0}
        if not kib:
            params = {"outbound.average": 0}
        try:
            dom.setInterfaceParameters(nic.target_dev or nic.mac, params, lv.VIR_DOMAIN_AFFECT_LIVE)
        except lv.libvirtError as e:
            raise OpFailed(f"host-side <bandwidth> on {a.vm} failed: {e}") from e
        what = "removed" if not kib else f"{kib} KiB/s outbound"
        return f"host-side <bandwidth> on {nic.mac} (virtio path only, no guest agent): {what}"
