"""One simulated hypervisor host: VMs, an SR-IOV NIC, a virtio backend, counters.

Outcomes come from mechanisms, never from tables: each tick every VM offers traffic
according to its duty cycles; VF holders are capped by their VF's ``max_tx_rate``; virtio
VMs share the backend's packet-rate ceiling; all egress shares the PF by max-min; guest
CPU time is the CPU benchmark's on-time plus a per-packet cost; the backend costs host
CPU per packet. The resulting cumulative counters are all a driver can read — exactly
what a real host exposes.

Hot-plug and rate changes are operations that complete after a delay drawn from the
hardware profile and may fail, like ACPI hot-plug on a busy guest.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from sova import model
from sova.policy.waterfill import waterfill
from sova.scenario import DutyWorkload, ProfileSpec
from sova.sim.core import Environment
from sova.sim.workload import DutyCycle

ACK_BYTES = 66.0


@dataclass
class SimVM:
    spec: model.VM
    workload: DutyWorkload
    net_cycle: DutyCycle
    cpu_cycle: DutyCycle
    rng: np.random.Generator
    failover_ready: bool = True
    nic: model.NicKind = model.NicKind.VIRTIO
    vf_index: int | None = None
    vf_max_bps: float | None = None
    vf_min_bps: float | None = None
    guest_limit_bps: float | None = None
    cpu_time_ns: float = 0.0
    steal_ns: float = 0.0
    rx_bytes: float = 0.0
    tx_bytes: float = 0.0
    rx_packets: float = 0.0
    tx_packets: float = 0.0
    # last tick, for reporting
    offered_bps: float = 0.0
    tx_bps: float = 0.0
    rx_bps: float = 0.0
    cpu_usage: float = 0.0

    def counters(self) -> model.VMCounters:
        return model.VMCounters(
            vm=self.spec.name,
            vcpus=self.spec.vcpus,
            cpu_time_ns=int(self.cpu_time_ns),
            steal_ns=int(self.steal_ns),
            rx_bytes=int(self.rx_bytes),
            tx_bytes=int(self.tx_bytes),
            rx_packets=int(self.rx_packets),
            tx_packets=int(self.tx_packets),
            memory_used_bytes=self.spec.memory_bytes,
        )


@dataclass
class _Op:
    op_id: str
    action: model.Action
    state: str = "pending"
    detail: str = ""


@dataclass
class SimHost:
    host: model.Host
    profile: ProfileSpec
    env: Environment
    rng: np.random.Generator
    vms: dict[str, SimVM] = field(default_factory=dict)
    ops: dict[str, _Op] = field(default_factory=dict)
    cpu_busy_ns: float = 0.0
    nic_rx_bytes: float = 0.0
    nic_tx_bytes: float = 0.0
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    # listeners for completed operations: (time, op) -> None
    on_op_done: list = field(default_factory=list)  # type: ignore[type-arg]

    # ------------------------------------------------------------------ workload

    def add_vm(
        self, vm: model.VM, workload: DutyWorkload, rng: np.random.Generator, ready: bool
    ) -> None:
        p = self.profile
        self.vms[vm.name] = SimVM(
            spec=vm,
            workload=workload,
            net_cycle=DutyCycle(workload.net, p.cycle_min, p.cycle_max, rng, self.env.now),
            cpu_cycle=DutyCycle(workload.cpu, p.cycle_min, p.cycle_max, rng, self.env.now),
            rng=rng,
            failover_ready=ready,
        )

    def set_workload(self, name: str, workload: DutyWorkload) -> None:
        vm = self.vms[name]
        p = self.profile
        vm.workload = workload
        vm.net_cycle = DutyCycle(workload.net, p.cycle_min, p.cycle_max, vm.rng, self.env.now)
        vm.cpu_cycle = DutyCycle(workload.cpu, p.cycle_min, p.cycle_max, vm.rng, self.env.now)

    # ------------------------------------------------------------------ physics

    def tick(self, t0: float, t1: float) -> None:
        dt = t1 - t0
        p = self.profile
        names = list(self.vms)
        n = len(names)
        if n == 0:
            return
        vms = [self.vms[k] for k in names]
        offered = np.zeros(n)
        cpu_on = np.zeros(n)
        for i, vm in enumerate(vms):
            w = vm.workload
            # The jitter draws happen every tick whatever the state, so that two policies
            # run on the same seed see exactly the same offered load.
            rate_j = float(vm.rng.lognormal(0.0, p.rate_jitter)) if p.rate_jitter else 1.0
            cpu_j = 1.0 + (float(vm.rng.normal(0.0, p.cpu_jitter)) if p.cpu_jitter else 0.0)
            offered[i] = vm.net_cycle.on_fraction(t0, t1) * w.rate * rate_j
            cpu_on[i] = min(1.0, max(0.0, vm.cpu_cycle.on_fraction(t0, t1) * cpu_j))
            if vm.guest_limit_bps is not None:
                offered[i] = min(offered[i], vm.guest_limit_bps)
        pkt_bits = np.array([8.0 * vm.workload.packet_bytes for vm in vms])
        on_vf = np.array([vm.nic is model.NicKind.VF for vm in vms])
        want = offered.copy()
        for i, vm in enumerate(vms):
            if on_vf[i] and vm.vf_max_bps is not None:
                want[i] = min(want[i], vm.vf_max_bps)
        # virtio VMs share the backend's packet-rate ceiling (max-min in packets/s)
        virt = ~on_vf
        if virt.any():
            pps = want[virt] / pkt_bits[virt]
            want[virt] = waterfill(p.virtio_pps_limit, pps) * pkt_bits[virt]
        tx = waterfill(self.host.nic.capacity_bps, want)
        tx_pk = tx / pkt_bits
        rx = tx * np.array([vm.workload.rx_share for vm in vms])
        rx_pk = rx / (8.0 * ACK_BYTES)
        backend_ns = float(((tx_pk + rx_pk) * virt).sum()) * p.virtio_host_ns_per_packet * dt
        vm_cpu_ns = 0.0
        for i, vm in enumerate(vms):
            cap_ns = dt * 1e9 * vm.spec.vcpus
            net_ns = (tx_pk[i] + rx_pk[i]) * dt * p.guest_ns_per_packet
            used = min(cap_ns, cpu_on[i] * cap_ns + net_ns)
            vm.cpu_time_ns += used
            vm_cpu_ns += used
            vm.tx_bytes += tx[i] * dt / 8.0
            vm.rx_bytes += rx[i] * dt / 8.0
            vm.tx_packets += tx_pk[i] * dt
            vm.rx_packets += rx_pk[i] * dt
            vm.offered_bps = offered[i]
            vm.tx_bps = tx[i]
            vm.rx_bps = rx[i]
            vm.cpu_usage = used / cap_ns
        self._account_steal(vms, dt, backend_ns)
        self.cpu_busy_ns += vm_cpu_ns + backend_ns
        self.nic_tx_bytes += float(tx.sum()) * dt / 8.0
        self.nic_rx_bytes += float(rx.sum()) * dt / 8.0

    def _account_steal(self, vms: list[SimVM], dt: float, backend_ns: float) -> None:
        """Run-queue delay when runnable vCPUs and backend work exceed the cores."""
        demand = sum(vm.cpu_usage * vm.spec.vcpus for vm in vms) + backend_ns / (dt * 1e9)
        if demand <= self.host.cores:
            return
        over = 1.0 - self.host.cores / demand
        for vm in vms:
            vm.steal_ns += over * vm.cpu_usage * vm.spec.vcpus * dt * 1e9

    # ------------------------------------------------------------------ state

    def inventory(self) -> model.Inventory:
        states = {
            name: model.VMState(
                vm=vm.spec,
                nic=vm.nic,
                vf_index=vm.vf_index,
                vf_max_bps=vm.vf_max_bps,
                vf_min_bps=vm.vf_min_bps,
                guest_limit_bps=vm.guest_limit_bps,
                failover_ready=vm.failover_ready,
                backup_link_up=vm.failover_ready,
            )
            for name, vm in self.vms.items()
        }
        return model.Inventory(host=self.host, vms=states)

    def sample(self) -> model.HostSample:
        return model.HostSample(
            host=self.host.name,
            time_s=self.env.now,
            vms={name: vm.counters() for name, vm in self.vms.items()},
            totals=model.HostCounters(
                cpu_busy_ns=int(self.cpu_busy_ns),
                nic_rx_bytes=int(self.nic_rx_bytes),
                nic_tx_bytes=int(self.nic_tx_bytes),
                memory_used_bytes=sum(vm.spec.memory_bytes for vm in self.vms.values()),
            ),
        )

    # ------------------------------------------------------------------ operations

    def submit(self, action: model.Action) -> str:
        op = _Op(f"{self.host.name}-op{next(self._ids)}", action)
        self.ops[op.op_id] = op
        p = self.profile
        if isinstance(action, model.AttachVF):
            delay = p.hotplug_attach * float(self.rng.uniform(0.75, 1.25))
        elif isinstance(action, model.DetachVF):
            delay = p.hotplug_detach * float(self.rng.uniform(0.75, 1.25))
        else:
            delay = 0.05  # a netlink or guest-agent call
        fails = isinstance(action, model.AttachVF | model.DetachVF) and (
            float(self.rng.uniform()) < p.hotplug_failure_rate
        )
        self.env.schedule(delay, lambda: self._complete(op, fails))
        return op.op_id

    def _complete(self, op: _Op, fails: bool) -> None:
        a = op.action
        vm = self.vms.get(a.vm)
        if vm is None:
            op.state, op.detail = "failed", f"no VM {a.vm!r} on {self.host.name}"
        elif fails:
            op.state, op.detail = "failed", "guest is busy: hot-plug not acknowledged"
        else:
            op.state, op.detail = self._apply(vm, a)
        for listener in self.on_op_done:
            listener(self.env.now, op)

    def _apply(self, vm: SimVM, a: model.Action) -> tuple[str, str]:
        if isinstance(a, model.AttachVF):
            if vm.nic is model.NicKind.VF:
                vm.vf_max_bps, vm.vf_min_bps = a.max_bps, a.min_bps
                return "succeeded", "already attached"
            if not vm.failover_ready:
                return "failed", "virtio interface not set up for failover"
            used = {v.vf_index for v in self.vms.values() if v.vf_index is not None}
            free = [i for i in range(self.host.nic.vf_pool) if i not in used]
            if not free:
                return "failed", "no free VF in the pool"
            vm.nic, vm.vf_index = model.NicKind.VF, free[0]
            vm.vf_max_bps, vm.vf_min_bps = a.max_bps, a.min_bps
            return "succeeded", f"vf{free[0]}"
        if isinstance(a, model.DetachVF):
            if vm.nic is not model.NicKind.VF:
                return "succeeded", "already on virtio"
            vm.nic, vm.vf_index, vm.vf_max_bps, vm.vf_min_bps = (
                model.NicKind.VIRTIO,
                None,
                None,
                None,
            )
            return "succeeded", "on virtio"
        if isinstance(a, model.SetVFRate):
            if vm.nic is not model.NicKind.VF:
                return "failed", "VM holds no VF"
            if a.min_bps and not self.host.nic.caps.min_rate:
                return "failed", "min_tx_rate not supported by this NIC"
            vm.vf_max_bps, vm.vf_min_bps = a.max_bps, a.min_bps
            return "succeeded", ""
        if isinstance(a, model.SetGuestRateLimit):
            vm.guest_limit_bps = a.rate_bps
            return "succeeded", ""
        return "failed", f"{a.kind} is not supported on a single simulated host"

    def poll(self, op_id: str) -> _Op:
        return self.ops[op_id]
