"""Hot-plug and failover: a fast NIC plugged into a running VM beside its virtio backup and
pulled out again only once the backup is confirmed to carry the traffic; each plug and
unplug confirmed by events (or the live XML) within a bounded number of attempts."""

from __future__ import annotations

import threading
from typing import Any

from sova.driver.base import DriverError
from sova.driver.libvirt_driver.connection import require_libvirt
from sova.driver.libvirt_driver.context import DriverContext
from sova.driver.libvirt_driver.failover import FailoverError
from sova.driver.libvirt_driver.hotplug import PermanentRefusal, retry_until_event
from sova.driver.libvirt_driver.inventory import HostInventory
from sova.driver.libvirt_driver.operations import DriverOp, DriverOps, OpFailed
from sova.driver.libvirt_driver.pf import PFView
from sova.driver.libvirt_driver.shaping import Shaping
from sova.driver.libvirt_xml import DomainNic
from sova.model import AttachVF


class HotPlug:
    """Attaches and detaches fast NICs, and moves a VM's traffic between them and the backup."""

    def __init__(
        self,
        ctx: DriverContext,
        inventory: HostInventory,
        shaping: Shaping,
        ops: DriverOps,
    ) -> None:
        self._ctx = ctx
        self._inventory = inventory
        self._shaping = shaping
        self._ops = ops
        self.reserved: dict[str, str] = {}  # VF PCI -> VM, while an attach is in flight
        self._lock = threading.Lock()

    def _reserve_free_vf(self, vm: str, pf: PFView) -> tuple[int, str]:
        held = self._ctx.fast.holders(pf)
        pool = self._inventory.capabilities().vf_pool
        with self._lock:
            in_use = len(held) + sum(1 for p in self.reserved if p not in held)
            if in_use >= pool:
                raise OpFailed(f"no free VF on {pf.name}: pool of {pool} fully held")
            for idx, pci in sorted(pf.vfs.items()):
                if pci not in held and pci not in self.reserved:
                    self.reserved[pci] = vm
                    return idx, pci
        raise OpFailed(f"no free VF on {pf.name or 'this host'}")

    def attach(self, op: DriverOp, a: AttachVF) -> str:
        lv = require_libvirt()
        dom = self._ctx.dom(a.vm)
        if not dom.isActive():
            raise OpFailed(f"{a.vm} is not running")
        if a.vm in self._ctx.migrating_now():
            raise OpFailed(f"{a.vm} is migrating: it gets no VF")
        info = self._ctx.live(dom)
        pf = self._ctx.pf_view()
        idx, kind = self._ctx.fast.held(info, pf)
        if idx is not None:
            note = self._shaping.apply_rate(idx, a.max_bps, a.min_bps)
            return f"{a.vm} already holds vf {idx} ({kind}): no-op{note}"
        ready = self._ctx.failover.readiness(info)
        if not ready.ready:
            raise OpFailed(f"{a.vm} is not failover-ready and never gets a VF: {ready.reason}")
        backup = self._ctx.failover.backup(info)
        assert backup is not None
        idx, slot = self._reserve_free_vf(a.vm, pf)
        try:
            note = self._shaping.apply_rate(idx, a.max_bps, a.min_bps)
            xml = self._ctx.fast.plug_xml(
                backup, slot, pairing=self._ctx.failover.name == "teaming"
            )
            try:
                out = retry_until_event(
                    hub=self._ctx.hub,
                    vm=a.vm,
                    verb="attach",
                    request=lambda: dom.attachDeviceFlags(xml, lv.VIR_DOMAIN_AFFECT_LIVE),
                    completed=lambda: self._ctx.fast.nic(self._ctx.live(dom)) is not None,
                    success_kind="device-added",
                    policy=self._ctx.retry_policy(),
                    progress=lambda n: self._ops.progress(
                        op, f"attaching vf {idx} ({slot}), attempt {n}"
                    ),
                )
            except PermanentRefusal as e:
                raise OpFailed(
                    f"attaching vf {idx} to {a.vm} failed: {e} (not retried); VM stays on virtio"
                ) from e
            if out.gone:
                raise OpFailed(
                    f"{a.vm} left this host while vf {idx} was being attached "
                    f"(migrated away or undefined): vf {idx} stays in the pool"
                )
            if out.stopped:
                raise OpFailed(f"{a.vm} stopped while vf {idx} was being attached")
            if not out.done:
                raise OpFailed(
                    f"attaching vf {idx} to {a.vm} failed after {out.attempts} attempts: "
                    f"{out.last}; VM stays on virtio"
                )
            note += self._ctx.fast.after_plug(idx)
            note += self._activate(op, dom, a.vm)
            how = "" if out.how == "already" else f", confirmed by {out.how}"
            return f"vf {idx} attached to {a.vm}{how}{note}"
        finally:
            with self._lock:
                self.reserved.pop(slot, None)

    def _activate(self, op: DriverOp, dom: Any, vm: str) -> str:
        """After a plug: the failover makes the new NIC carry the traffic (guest-bond)."""
        info = self._ctx.live(dom)
        fast, backup = self._ctx.fast.nic(info), self._ctx.failover.backup(info)
        if fast is None or backup is None:
            return ""
        self._ops.progress(op, f"making the fast NIC of {vm} active ({self._ctx.failover.name})")
        try:
            done = self._ctx.failover.after_plug(dom, fast, backup)
        except FailoverError as e:
            # A plugged NIC that carries nothing would hold a slot and be counted as a fast
            # path: take it out again (backup confirmed first, as for any unplug).
            try:
                undone = f"unplugged again ({self.detach(op, vm)})"
            except OpFailed as e2:
                undone = f"left plugged, unplug failed: {e2}"
            raise OpFailed(
                f"fast NIC plugged into {vm} but not made active: {e}; traffic stays on the "
                f"backup; NIC {undone}"
            ) from e
        return f"; {done}" if done else ""

    # the failover around a fast NIC another actor plugs (orchestrator = "openstack")

    def to_backup(self, vm: str) -> str:
        """Before Nova unplugs ``vm``'s fast NIC: the failover moves the traffic to the backup
        and confirms it. :class:`DriverError` when it cannot: the NIC must then stay."""
        dom, fast, backup = self._failover_pair(vm)
        if fast is None:
            return f"{vm} has no fast NIC"
        if backup.link_state == "down":
            raise DriverError(f"{vm}: backup path {backup.mac} is link-down; fast NIC kept")
        try:
            return self._ctx.failover.before_unplug(dom, fast, backup) or "backup active"
        except FailoverError as e:
            raise DriverError(f"{vm}: backup path not confirmed active: {e}") from e

    def to_fast(self, vm: str) -> str:
        """After Nova plugged ``vm``'s fast NIC: the failover makes it carry the traffic and
        confirms it; :class:`DriverError` when it cannot (the caller unplugs it again)."""
        dom, fast, backup = self._failover_pair(vm)
        if fast is None:
            raise DriverError(f"{vm}: no fast NIC in the live XML")
        try:
            return self._ctx.failover.after_plug(dom, fast, backup) or "fast NIC active"
        except FailoverError as e:
            raise DriverError(f"{vm}: fast NIC not made active: {e}") from e

    def _failover_pair(self, vm: str) -> tuple[Any, DomainNic | None, DomainNic]:
        try:
            dom = self._ctx.dom(vm)
        except OpFailed as e:
            raise DriverError(str(e)) from e
        info = self._ctx.live(dom)
        backup = self._ctx.failover.backup(info)
        if backup is None:
            raise DriverError(
                f"{vm}: no backup interface for the {self._ctx.failover.name} failover"
            )
        return dom, self._ctx.fast.nic(info), backup

    def detach(self, op: DriverOp, vm: str) -> str:
        dom = self._ctx.dom(vm)
        info = self._ctx.live(dom)
        vf = self._ctx.fast.nic(info)
        if vf is None:
            if any(self._ctx.pf_view().index_of(p) is not None for p in info.plain_hostdev_pci):
                raise OpFailed(
                    f"{vm} holds a VF as plain <hostdev> without a virtio failover partner; "
                    "Sova will not pull it (the VM would lose its network)"
                )
            return f"{vm} holds no VF: no-op"
        backup = self._ctx.failover.backup(info)
        if backup is None or not self._ctx.failover.paired(vf, backup):
            raise OpFailed(
                f"{vm}: VF has no virtio failover partner; not detaching (the VM would lose its network)"
            )
        if backup.link_state == "down":
            raise OpFailed(
                f"{vm}: virtio backup path {backup.alias} is link-down; VF kept until it is up"
            )
        pf = self._ctx.pf_view()
        idx = pf.index_of(vf.pci or vf.target_dev)
        # Never unplug before the backup is confirmed to carry the traffic.
        self._ops.progress(op, f"moving {vm} to its backup path ({self._ctx.failover.name})")
        try:
            moved = self._ctx.failover.before_unplug(dom, vf, backup)
        except FailoverError as e:
            raise OpFailed(
                f"not detaching vf {idx} from {vm}: the backup path could not be confirmed "
                f"active: {e}; fast NIC kept"
            ) from e
        moved = f" ({moved})" if moved else ""
        return self._unplug(op, dom, vm, vf, idx, moved)

    def _unplug(
        self, op: DriverOp, dom: Any, vm: str, vf: DomainNic, idx: int | None, moved: str
    ) -> str:
        """The unplug itself, once the backup carries the traffic, confirmed by events."""
        lv = require_libvirt()

        def request() -> object:
            # By alias: a teamed VF shares its MAC with the virtio backup, and libvirt finds
            # an <interface> to detach by MAC, so detach-by-XML is refused ("multiple devices
            # matching MAC address … found"). Every device in the live XML has an alias
            # (ours ua-sova-vf, an operator's hostdevN): the XML is only for one without.
            if vf.alias:
                return dom.detachDeviceAlias(vf.alias, lv.VIR_DOMAIN_AFFECT_LIVE)
            return dom.detachDeviceFlags(self._ctx.fast.unplug_xml(vf), lv.VIR_DOMAIN_AFFECT_LIVE)

        try:
            out = retry_until_event(
                hub=self._ctx.hub,
                vm=vm,
                verb="detach",
                request=request,
                completed=lambda: self._ctx.fast.nic(self._ctx.live(dom)) is None,
                success_kind="device-removed",
                alias=vf.alias,
                policy=self._ctx.retry_policy(),
                progress=lambda n: self._ops.progress(
                    op, f"detaching vf {idx} from {vm}, attempt {n}"
                ),
            )
        except PermanentRefusal as e:
            raise OpFailed(
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
        raise OpFailed(
            f"detaching vf {idx} from {vm} failed after {out.attempts} attempts: "
            f"{out.last}; VF still attached, virtio path unchanged{moved}"
        )
