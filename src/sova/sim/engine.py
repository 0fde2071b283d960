"""The simulated cluster: every VM of every host in flat numpy arrays, one tick at a time.

Outcomes come from mechanisms, never from tables (docs/design.md#simulation). Each tick ``(t0, t1]``:

1. **Offered load.** Duty cycles (netperf/lookbusy "X % of the time") integrate their
   on-time exactly over the tick; bulk streams are always on; httperf-like request VMs get
   Poisson arrivals plus whatever they could not send before (a backlog); scp-like file
   transfers send until their file is done; traces replay a CSV.
2. **Guest limits and guest CPU.** Guest-side rate limits (DAQS's HTB) cap the offer. Every
   packet costs guest CPU — more on virtio (VM exits) — and so does encryption; a VM whose
   vCPUs cannot keep up sends less.
3. **Host CPU.** vCPUs and the virtio backend (per-packet host cost) share the cores; when
   they are oversubscribed every VM gets a proportional share, time it waits shows up as
   steal, and the backend's packet rate shrinks with it.
4. **Paths.** A VF is capped by its ``max_tx_rate``; virtio traffic crosses the backend,
   whose packet-rate ceiling (docs/design.md#exp-d1: ~190 kpps in a driver domain) is shared max-min.
5. **The PF** shares its egress capacity max-min among all flows of the host, weighted by
   TCP streams, including live-migration traffic, which also competes for the target's
   ingress.
6. **Latency** of a request = path latency (virtio grows with backend load) + scheduling
   delay (one hop on a VF, two on virtio: vCPU and backend thread) + transfer time at the
   rate the VM can get, stretched by link utilisation + the backlog ahead of it.
   Profiles may add the time outside the host, several path crossings per request
   (httperf's handshake) and the server's own work queued at its vCPU.
7. **Counters** accumulate. Drivers read only these, exactly like a real host.

Live migration is pre-copy (Clark et al.; SimGrid's model): the first round copies all
memory, later rounds what was dirtied meanwhile, stop-and-copy when the rest fits the
downtime budget. The migrated VM's counters restart at the target, as a new QEMU's do.

Operations (VF hot-plug, rate changes, migration) complete on the event clock after a
delay from the hardware profile and can fail, like the real thing.

The state (arrays, operations) is :mod:`sova.sim.state`'s; the engine composes the tick
and the driver views from it, and the tick's parts are split by concern: offered load in :mod:`sova.sim.workload` (1-2), CPU, paths, the PF
and latency in :mod:`sova.sim.network` (3-6), pre-copy in :mod:`sova.sim.migration`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import numpy as np

from sova import model
from sova.policy.tick import Counters, HostTick, VmTick, count
from sova.scenario import Scenario, Workload
from sova.sim import migration, network, workload
from sova.sim.state import INF, EngineState, FileDone, Op
from sova.sim.workload import ACK_BYTES

# A rate change is a netlink or guest-agent call: it takes effect this long after submission.
CALL_DELAY_S = 0.05


class Engine(EngineState):
    def __init__(self, scn: Scenario) -> None:
        super().__init__(scn)
        first = [
            (self.vm_index[name], w)
            for phase in sorted(scn.workload, key=lambda ph: ph.at)
            if phase.at <= 0
            for name, w in phase.vms.items()
        ]
        workload.set_workloads(self, first, 0.0)
        idle = (self.kind == 0) & (self.net_duty == 0) & (self.cpu_duty == 0)
        workload.reset_each(self, np.flatnonzero(idle).tolist(), 0.0)
        # the counters the core advances in place (never replaced): one view for the run
        self._counters = Counters(
            self.cpu_ns,
            self.steal_ns,
            self.tx_b,
            self.rx_b,
            self.tx_pk,
            self.rx_pk,
            self.h_cpu_ns,
            self.h_tx_b,
            self.h_rx_b,
        )

    # ------------------------------------------------------------------ workloads

    def set_workload(self, i: int, w: Workload, t: float) -> None:
        workload.set_workload(self, i, w, t)

    def set_workloads(self, items: Iterable[tuple[int, Workload]], t: float) -> None:
        workload.set_workloads(self, items, t)

    # ------------------------------------------------------------------ physics

    def tick(self, t0: float, t1: float) -> None:
        """One tick ``(t0, t1]``: offered load, then its service and latency, counters."""
        o = workload.offer(self, t0, t1)
        s = network.share(self, o, t0)
        self._count(o, s)
        if s.files_done.size:
            self._files(s, t1)
        for k, m in enumerate(s.mig_active):
            migration.advance(self, m, s.mig_rate[k], o.dt, t1)
        self.ticks += 1

    def _count(self, o: workload.Offer, s: network.Shares) -> None:
        """Cumulative counters (all a driver reads) and the last tick's figures, in the
        compiled core (the readable form: tests/test_tick_forms.py ``ref_count``)."""
        got = count(
            VmTick(
                self.host,
                s.tx,
                s.rx,
                s.pkts_per_bit,
                s.ns_pkt,
                self.ns_per_byte,
                s.cpu_busy,
                s.arrival_cost,
                self._host_scale_vm,  # host_scale[h], from network.share
                self.vcpus,
                s.need,
                s.virt,
                s.pkt_bits,
                o.paused if o.any_paused else None,
            ),
            HostTick(
                s.backend_vm_frac, s.tx_host, s.rx_host, s.host_need, self.cores, self.capacity
            ),
            self._counters,
            o.dt,
            self.profile.virtio_host_ns_per_packet,
            8.0 * ACK_BYTES,
            # else every factor (host_scale < 1) is 0: each steal term is 0.0
            bool(s.host_scale.min() < 1),
            self.threads,
        )
        self.host_cpu_util, self.host_net_util = got.host_cpu_util, got.host_net_util
        self.offered, self.tx, self.rx = o.offered, s.tx, s.rx
        self.cpu_use = got.cpu_use

    def _files(self, s: network.Shares, t1: float) -> None:
        """The file transfers that finished this tick (their bytes were counted down in
        network.share), as ``files_done`` records."""
        h = self.host
        for i in s.files_done.tolist():
            self.files_done.append(
                FileDone(
                    self.vm_names[i],
                    self.host_names[h[i]],
                    float(self.file_start[i]),
                    t1,
                    int(self.file_size[i]),
                )
            )

    # ------------------------------------------------------------------ operations

    def submit(self, host: str, action: model.Action) -> str:
        op = Op(f"{host}-op{next(self._ids)}", host, action)
        self.ops[op.op_id] = op
        for listener in self.on_submit:
            listener(self.env.now, op)
        p = self.profile
        i = self.vm_index.get(action.vm)
        if i is None or self.host_names[self.host[i]] != host:
            self.env.schedule(
                0.01, lambda: self._complete(op, "failed", f"no VM {action.vm!r} on {host}")
            )
            return op.op_id
        if isinstance(action, model.Migrate):
            migration.start(self, op, i, action)
            return op.op_id
        if isinstance(action, model.AttachVF):
            delay = p.hotplug_attach * float(self.orng.uniform(0.75, 1.25))
        elif isinstance(action, model.DetachVF):
            delay = p.hotplug_detach * float(self.orng.uniform(0.75, 1.25))
        else:
            delay = CALL_DELAY_S
        fails = isinstance(action, model.AttachVF | model.DetachVF) and (
            float(self.orng.uniform()) < p.hotplug_failure_rate
        )
        self.env.schedule(delay, lambda: self._apply(op, i, fails))
        return op.op_id

    def _apply(self, op: Op, i: int, fails: bool) -> None:
        a = op.action
        hi = self.host_index[op.host]
        if self.host[i] != hi:
            return self._complete(op, "failed", f"VM {a.vm!r} is no longer on {op.host}")
        if fails:
            return self._complete(op, "failed", "guest is busy: hot-plug not acknowledged")
        host = self.hosts[hi]
        if isinstance(a, model.AttachVF):
            if self.on_vf[i]:
                self.vf_max[i], self.vf_min[i] = a.max_bps or INF, a.min_bps or 0.0
                return self._complete(op, "succeeded", "already attached")
            if not self.ready[i]:
                return self._complete(op, "failed", "virtio interface not set up for failover")
            if self.migrating[i]:
                return self._complete(op, "failed", "VM is migrating")
            mine = self._members_of(hi)
            used = set(self.vf_index[mine[self.on_vf[mine]]].tolist())
            free = [k for k in range(host.nic.vf_pool) if k not in used]
            if not free:
                return self._complete(op, "failed", "no free VF in the pool")
            self.on_vf[i], self.vf_index[i] = True, free[0]
            self.vf_max[i], self.vf_min[i] = a.max_bps or INF, a.min_bps or 0.0
            return self._complete(op, "succeeded", f"vf{free[0]}")
        if isinstance(a, model.DetachVF):
            if not self.on_vf[i]:
                return self._complete(op, "succeeded", "already on virtio")
            self.on_vf[i], self.vf_index[i], self.vf_max[i], self.vf_min[i] = False, -1, INF, 0.0
            return self._complete(op, "succeeded", "on virtio")
        if isinstance(a, model.SetVFRate):
            if not self.on_vf[i]:
                return self._complete(op, "failed", "VM holds no VF")
            if a.min_bps and not host.nic.caps.min_rate:
                return self._complete(op, "failed", "min_tx_rate not supported by this NIC")
            self.vf_max[i], self.vf_min[i] = a.max_bps or INF, a.min_bps or 0.0
            return self._complete(op, "succeeded", "")
        if isinstance(a, model.SetGuestRateLimit):
            self.guest_limit[i] = a.rate_bps if a.rate_bps is not None else INF
            self.guest_pps[i] = a.max_pps if a.max_pps is not None else INF
            return self._complete(op, "succeeded", "")
        return self._complete(op, "failed", f"unsupported action {a.kind}")

    # ------------------------------------------------------------------ driver views

    def vms_on(self, host: str) -> list[int]:
        out: list[int] = self._members_of(self.host_index[host]).tolist()
        return out

    def sample(self, host: str) -> model.HostSample:
        hi = self.host_index[host]
        idx = self._members_of(hi)
        names = self.vm_names
        # one C-level conversion per column instead of a numpy scalar per cell
        cols = zip(
            idx.tolist(),
            self.vcpus[idx].tolist(),
            self.cpu_ns[idx].tolist(),
            self.steal_ns[idx].tolist(),
            self.rx_b[idx].tolist(),
            self.tx_b[idx].tolist(),
            self.rx_pk[idx].tolist(),
            self.tx_pk[idx].tolist(),
            self.mem[idx].tolist(),
            strict=True,
        )
        vms = {
            names[i]: model.VMCounters(
                vm=names[i],
                vcpus=int(vc),
                cpu_time_ns=int(cpu),
                steal_ns=int(steal),
                rx_bytes=int(rxb),
                tx_bytes=int(txb),
                rx_packets=int(rxp),
                tx_packets=int(txp),
                memory_used_bytes=int(mem),
            )
            for i, vc, cpu, steal, rxb, txb, rxp, txp, mem in cols
        }
        return model.HostSample(
            host=host,
            time_s=self.env.now,
            vms=vms,
            totals=model.HostCounters(
                cpu_busy_ns=int(self.h_cpu_ns[hi]),
                nic_rx_bytes=int(self.h_rx_b[hi]),
                nic_tx_bytes=int(self.h_tx_b[hi]),
                memory_used_bytes=int(self.mem[idx].sum()),
            ),
        )

    def inventory(self, host: str) -> model.Inventory:
        hi = self.host_index[host]
        return model.Inventory(host=self.hosts[hi], vms=vm_states(self, self._members_of(hi)))


class InventoryColumns(Protocol):
    """The columns an inventory is read from: the engine's own, or a period's copy of them
    (``sova.sim.fleet_control``), which must read the same."""

    vms: list[model.VM]
    vm_names: list[str]
    on_vf: np.ndarray
    vf_index: np.ndarray
    vf_max: np.ndarray
    vf_min: np.ndarray
    guest_limit: np.ndarray
    ready: np.ndarray
    migrating: np.ndarray


def vm_states(c: InventoryColumns, idx: np.ndarray | list[int]) -> dict[str, model.VMState]:
    """The VMs ``idx`` (engine indices, in inventory order) as ``Inventory.vms``."""
    rows = idx.tolist() if isinstance(idx, np.ndarray) else idx
    states = {}
    cols = zip(
        rows,
        c.on_vf[idx].tolist(),
        c.vf_index[idx].tolist(),
        c.vf_max[idx].tolist(),
        c.vf_min[idx].tolist(),
        c.guest_limit[idx].tolist(),
        c.ready[idx].tolist(),
        c.migrating[idx].tolist(),
        strict=True,
    )
    for i, on, vfi, vmax, vmin, glim, ready, mig in cols:
        states[c.vm_names[i]] = model.VMState(
            vm=c.vms[i],
            nic=model.NicKind.VF if on else model.NicKind.VIRTIO,
            vf_index=vfi if on else None,
            vf_max_bps=vmax if on and vmax < INF else None,
            vf_min_bps=vmin if on and vmin > 0 else None,
            guest_limit_bps=glim if glim < INF else None,
            failover_ready=ready,
            backup_link_up=ready,
            migrating=mig,
        )
    return states
