"""The ``netns`` driver: the Driver protocol over the namespace testbed's real kernel objects.

The agent cannot tell it from a KVM host, and that is the point: the same sense-decide-
apply code runs, only every effect is a real route, qdisc or link and every counter comes
from the kernel (rtnetlink through pyroute2, ``/proc``):

* **attach VF** = plug the VM's VF veth, confirm it answers, set its transmit limiter, and
  move the VM's routes onto it; **detach** = confirm the virtio path answers *through the
  relay*, move the routes back, unplug. A detach whose backup does not answer fails and
  the VM keeps its VF (the executor checks ``backup_link_up`` before it even asks).
* **VF rate** = the HTB class of the VF's limiter (``max_tx_rate``); its ``min`` = an HTB
  class on the port, only where the scenario's NIC supports ``min_tx_rate``.
* **rate limit** (``SetGuestRateLimit``) goes where the policy puts it: ``guest`` = HTB
  inside the VM's namespace (DAQS applies tc in the guest through the guest agent),
  ``host`` = the host-side limiter of the VM's path (the VF's ``max_tx_rate`` capped
  further, and the virtio path's shaper), which is how Sova, DBA-VM and static ``ip link``
  caps are enforced on an SR-IOV host.
* Hot-plug takes time on real hosts; the profile's delays are slept on a worker thread so
  that ``submit`` returns at once and completion is seen through ``poll``. Two workers,
  one for NIC changes and one for rate changes, so that a rate change never waits behind a
  hot-plug (the executor's channels assume the same).

Counters are black-box, as the host sees them: a VM's transmitted bytes are what left its
VF limiter plus what left its virtio path's shaper (IFB counters), its CPU time is the
CPU time of the processes in its namespace.

Its plumbing lives in :mod:`sova.testbed.plumbing`, its reads of the kernel in
:mod:`sova.testbed.kernel_view`.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from sova.driver.base import Capabilities, DriverError, OpState, OpStatus
from sova.model import (
    VM,
    Action,
    AttachVF,
    DetachVF,
    Host,
    HostCounters,
    HostSample,
    Inventory,
    Migrate,
    NicKind,
    SetGuestRateLimit,
    SetVFRate,
    VMCounters,
    VMState,
)
from sova.testbed.kernel_view import NS_PER_TICK, KernelView, host_busy_ns, memory_used
from sova.testbed.topology import TestbedError, Topology, VMPlumbing

LimitSide = Literal["host", "guest"]


@dataclass
class _VMPath:
    nic: NicKind = NicKind.VIRTIO
    vf_index: int | None = None
    vf_max_bps: float | None = None
    vf_min_bps: float | None = None
    limit_bps: float | None = None
    limit_pps: float | None = None


@dataclass
class _Op:
    op_id: str
    action: Action
    deadline: float
    state: OpState = OpState.PENDING
    detail: str = ""


class NetnsDriver:
    """Driver over a built :class:`~sova.testbed.topology.Topology`."""

    def __init__(
        self,
        topo: Topology,
        vms: Mapping[str, VM],
        host: Host,
        *,
        limit_side: LimitSide = "host",
        hotplug_attach_s: float = 0.5,
        hotplug_detach_s: float = 0.2,
        op_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topo = topo
        self.host = host
        self.vms = dict(vms)
        self.limit_side = limit_side
        self.hotplug_attach_s = hotplug_attach_s
        self.hotplug_detach_s = hotplug_detach_s
        self.op_timeout_s = op_timeout_s
        self._clock = clock
        self._t0 = clock()
        self._paths = {vm: _VMPath() for vm in self.vms}
        self._ops: dict[str, _Op] = {}
        self._ids = itertools.count(1)
        self._lock = threading.RLock()  # paths and ops
        self._kernel = threading.Lock()  # one writer of the testbed's kernel state at a time
        self._queues: dict[str, queue.Queue[_Op | None]] = {
            "nic": queue.Queue(),
            "rate": queue.Queue(),
        }
        self._workers = [
            threading.Thread(target=self._work, args=(q,), name=f"netns-{name}", daemon=True)
            for name, q in self._queues.items()
        ]
        for w in self._workers:
            w.start()
        self._view = KernelView(topo, self.vms, clock)

    # ----------------------------------------------------------------- protocol

    def now(self) -> float:
        return self._clock() - self._t0

    @property
    def epoch(self) -> float:
        """The clock reading at which :meth:`now` is 0."""
        return self._t0

    def capabilities(self) -> Capabilities:
        nic = self.host.nic
        return Capabilities(
            host=self.host.name,
            vf_total=nic.vf_pool,
            vf_pool=nic.vf_pool,
            nic=nic.caps,
            can_migrate=False,
            guest_agent=True,
            notes=(
                "testbed: VF = veth + IFB/HTB limiter in series before the port",
                "testbed: virtio = bridge + userspace TAP relay",
                f"rate limits enforced on the {self.limit_side} side",
            ),
        )

    def inventory(self) -> Inventory:
        """Actual state, read from the kernel: a VM is on its VF when its routes say so."""
        on_vf = self._view.vms_on_vf()
        backup = self._view.backup_up()
        states = {}
        with self._lock:
            for name, vm in self.vms.items():
                path = self._paths[name]
                if name in on_vf and path.nic is not NicKind.VF:
                    # The kernel says VF: an attach is finishing (it reserved its index),
                    # or a restarted agent finds an existing testbed (adopt a free one).
                    if path.vf_index is None:
                        path.vf_index = self._free_vf_index()
                    path.nic = NicKind.VF
                elif name not in on_vf and path.nic is NicKind.VF:
                    path.nic, path.vf_index = NicKind.VIRTIO, None
                    path.vf_max_bps = path.vf_min_bps = None
                states[name] = VMState(
                    vm=vm,
                    nic=path.nic,
                    vf_index=path.vf_index,
                    vf_max_bps=path.vf_max_bps,
                    vf_min_bps=path.vf_min_bps,
                    guest_limit_bps=path.limit_bps,
                    failover_ready=True,
                    backup_link_up=backup,
                )
        return Inventory(self.host, states)

    def sample(self) -> HostSample:
        ns = self.topo.names.host_ns
        links = self._view.links(ns)
        sent = self._view.root_qdisc_sent(ns)
        cpu = self._view.vm_cpu_ticks()
        vms = {}
        for name, vm in self.vms.items():
            p = self.topo.vms[name]
            vfq, tpq = sent.get(p.vf_ifb, (0, 0)), sent.get(p.tap_ifb, (0, 0))
            vfh, tap = links.get(p.vf_host_if, {}), links.get(p.tap_if, {})
            vms[name] = VMCounters(
                vm=name,
                vcpus=vm.vcpus,
                cpu_time_ns=cpu.get(name, 0) * NS_PER_TICK,
                steal_ns=0,
                # Transmitted = what left the VF's limiter and the virtio shaper, counted
                # per wire frame as the port counts it.
                tx_bytes=vfq[0] + tpq[0],
                tx_packets=vfq[1] + tpq[1],
                rx_bytes=vfh.get("tx_bytes", 0) + tap.get("tx_bytes", 0),
                rx_packets=vfh.get("tx_packets", 0) + tap.get("tx_packets", 0),
            )
        up = links.get(self.topo.names.uplink, {})
        return HostSample(
            host=self.host.name,
            time_s=self.now(),
            vms=vms,
            totals=HostCounters(
                cpu_busy_ns=host_busy_ns(),
                nic_rx_bytes=up.get("rx_bytes", 0),
                nic_tx_bytes=up.get("tx_bytes", 0),
                memory_used_bytes=memory_used(),
            ),
        )

    def submit(self, action: Action) -> str:
        if action.vm not in self.vms:
            raise DriverError(f"VM {action.vm!r} is not on this testbed")
        op_id = f"netns-{next(self._ids)}"
        op = _Op(op_id, action, self._clock() + self.op_timeout_s)
        with self._lock:
            self._ops[op_id] = op
        if isinstance(action, Migrate):
            self._finish(op, OpState.FAILED, "the testbed has one host: no migration")
            return op_id
        chan = "rate" if isinstance(action, SetGuestRateLimit | SetVFRate) else "nic"
        self._queues[chan].put(op)
        return op_id

    def poll(self, op_id: str) -> OpStatus:
        with self._lock:
            op = self._ops.get(op_id)
            if op is None:
                return OpStatus(op_id, OpState.FAILED, f"unknown operation {op_id!r}")
            if op.state is not OpState.PENDING:
                del self._ops[op_id]  # reported once; keeps the table small
            return OpStatus(op_id, op.state, op.detail)

    # ----------------------------------------------------------------- setup

    def attach_now(self, vm: str, max_bps: float | None = None) -> None:
        """Give ``vm`` a VF synchronously, without the hot-plug delay (initial state)."""
        state, detail = self._attach(AttachVF(vm, max_bps), delay=False)
        if state is not OpState.SUCCEEDED:
            raise TestbedError(f"initial VF for {vm}: {detail}")

    def close(self) -> None:
        for q in self._queues.values():
            q.put(None)
        for w in self._workers:
            w.join(timeout=self.op_timeout_s)
        self._view.close()

    # ----------------------------------------------------------------- workers

    def _work(self, q: queue.Queue[_Op | None]) -> None:
        while True:
            op = q.get()
            if op is None:
                return
            if self._clock() > op.deadline:
                self._finish(op, OpState.FAILED, "expired before it could start")
                continue
            try:
                state, detail = self._execute(op.action)
            except TestbedError as exc:
                state, detail = OpState.FAILED, str(exc)
            except Exception as exc:  # a driver must report, never kill its worker
                state, detail = OpState.FAILED, f"{type(exc).__name__}: {exc}"
            self._finish(op, state, detail)

    def _finish(self, op: _Op, state: OpState, detail: str) -> None:
        with self._lock:
            op.state, op.detail = state, detail

    def _execute(self, a: Action) -> tuple[OpState, str]:
        if isinstance(a, AttachVF):
            return self._attach(a, delay=True)
        if isinstance(a, DetachVF):
            return self._detach(a)
        if isinstance(a, SetVFRate):
            return self._set_vf_rate(a)
        if isinstance(a, SetGuestRateLimit):
            return self._set_limit(a)
        return OpState.FAILED, f"{a.kind} is not supported by the testbed"

    def _attach(self, a: AttachVF, delay: bool) -> tuple[OpState, str]:
        p = self.topo.vms[a.vm]
        with self._lock:
            path = self._paths[a.vm]
            if path.nic is NicKind.VF:
                return self._set_vf_rate(SetVFRate(a.vm, a.max_bps, a.min_bps))
            if a.min_bps and not self.host.nic.caps.min_rate:
                return OpState.FAILED, "min_tx_rate not supported by this NIC"
            index = self._free_vf_index()
            if index is None:
                return OpState.FAILED, "no free VF in the pool"
            # Reserve the VF while it is being plugged, so a second attach cannot take it.
            path.vf_index = index
        ok = False
        try:
            if delay:
                time.sleep(self.hotplug_attach_s)
            with self._kernel:
                self.topo.plug_vf(p, True)
            if not self.topo.path_works(p, "vf"):
                return OpState.FAILED, "VF plugged but does not answer"
            with self._kernel:
                self._apply_vf_limit(p, a.max_bps, self._paths[a.vm])
                if a.min_bps:
                    self.topo.set_min_rate(p, index, a.min_bps)
                self.topo.use_vf(p)
            ok = True
        finally:
            with self._lock:
                if ok:
                    path.nic, path.vf_max_bps, path.vf_min_bps = NicKind.VF, a.max_bps, a.min_bps
                else:
                    path.vf_index = None
            if not ok:
                with self._kernel, contextlib.suppress(TestbedError):
                    self.topo.plug_vf(p, False)
        return OpState.SUCCEEDED, f"vf{index}"

    def _detach(self, a: DetachVF) -> tuple[OpState, str]:
        p = self.topo.vms[a.vm]
        with self._lock:
            path = self._paths[a.vm]
            if path.nic is not NicKind.VF:
                return OpState.SUCCEEDED, "already on virtio"
            index = path.vf_index
        time.sleep(self.hotplug_detach_s)
        # Never pull the VF before the backup answers, through the bridge and the relay.
        if not self.topo.path_works(p, "virtio"):
            return OpState.FAILED, "virtio backup path does not answer; keeping the VF"
        with self._kernel:
            self.topo.use_virtio(p)
            self.topo.plug_vf(p, False)
            self.topo.set_vf_limit(p, self.topo.capacity_bps, None)
            if index is not None and path.vf_min_bps:
                self.topo.set_min_rate(p, index, None)
        with self._lock:
            path.nic, path.vf_index = NicKind.VIRTIO, None
            path.vf_max_bps = path.vf_min_bps = None
        return OpState.SUCCEEDED, "on virtio"

    def _set_vf_rate(self, a: SetVFRate) -> tuple[OpState, str]:
        p = self.topo.vms[a.vm]
        with self._lock:
            path = self._paths[a.vm]
            if path.nic is not NicKind.VF or path.vf_index is None:
                return OpState.FAILED, "VM holds no VF"
            if a.min_bps and not self.host.nic.caps.min_rate:
                return OpState.FAILED, "min_tx_rate not supported by this NIC"
            index, old_min = path.vf_index, path.vf_min_bps
        with self._kernel:
            self._apply_vf_limit(p, a.max_bps, path)
            if (a.min_bps or None) != (old_min or None):
                self.topo.set_min_rate(p, index, a.min_bps)
        with self._lock:
            path.vf_max_bps, path.vf_min_bps = a.max_bps, a.min_bps
        return OpState.SUCCEEDED, ""

    def _set_limit(self, a: SetGuestRateLimit) -> tuple[OpState, str]:
        p = self.topo.vms[a.vm]
        with self._lock:
            path = self._paths[a.vm]
            path.limit_bps, path.limit_pps = a.rate_bps, a.max_pps
        with self._kernel:
            if self.limit_side == "guest":
                self.topo.set_guest_limit(p, a.rate_bps, a.max_pps)
                return OpState.SUCCEEDED, "guest HTB"
            cap = self.topo.capacity_bps if a.rate_bps is None else a.rate_bps
            self.topo.set_virtio_limit(p, cap, a.max_pps)
            self._apply_vf_limit(p, path.vf_max_bps, path)
        return OpState.SUCCEEDED, "host HTB"

    def _apply_vf_limit(self, p: VMPlumbing, tier_bps: float | None, path: _VMPath) -> None:
        """The VF limiter holds both the tier and, on the host side, the policy's cap."""
        rate = self.topo.capacity_bps if tier_bps is None else tier_bps
        pps = None
        if self.limit_side == "host" and path.limit_bps is not None:
            rate = min(rate, path.limit_bps)
            pps = path.limit_pps
        self.topo.set_vf_limit(p, rate, pps)

    def _free_vf_index(self) -> int | None:
        used = {p.vf_index for p in self._paths.values() if p.vf_index is not None}
        free = [i for i in range(self.host.nic.vf_pool) if i not in used]
        return free[0] if free else None
