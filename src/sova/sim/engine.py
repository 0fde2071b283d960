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
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from sova import model
from sova.policy.waterfill import floored_waterfill, grouped_waterfill
from sova.scenario import Scenario, Workload
from sova.sim.core import Environment

ACK_BYTES = 66.0
INF = float("inf")
KIND = {"duty": 0, "bulk": 1, "requests": 2, "file": 3, "trace": 4}


@dataclass
class Op:
    op_id: str
    host: str
    action: model.Action
    state: str = "pending"
    detail: str = ""


@dataclass
class MigrationState:
    vm: int
    src: int
    dst: int
    op: Op
    cap_bps: float
    start_s: float
    copy_from_s: float
    round_left_bytes: float
    dirty_bytes: float = 0.0
    rounds: int = 1
    sent_bytes: float = 0.0
    fail_at_round: int = 0  # 0 = does not fail


@dataclass(frozen=True)
class FileDone:
    vm: str
    host: str
    start_s: float
    end_s: float
    size_bytes: int


class Engine:
    def __init__(self, scn: Scenario) -> None:
        self.scn = scn
        self.profile = scn.profile
        self.env = Environment()
        self.host_names = [h.name for h in scn.hosts]
        self.host_index = {n: i for i, n in enumerate(self.host_names)}
        self.hosts = [scn.model_host(h) for h in scn.hosts]
        self.vm_names = [v.name for v in scn.vms]
        self.vm_index = {n: i for i, n in enumerate(self.vm_names)}
        self.vms = [scn.model_vm(v, i) for i, v in enumerate(scn.vms)]
        H, N = len(self.hosts), len(self.vms)
        self.H, self.N = H, N
        f = np.zeros
        self.cores = np.array([h.cores for h in self.hosts], dtype=float)
        self.host_mem = np.array([h.memory_bytes for h in self.hosts], dtype=float)
        self.capacity = np.array([h.nic.capacity_bps for h in self.hosts], dtype=float)
        # scn.home_of per VM is O(hosts): a map built once keeps 20k-VM worlds fast
        home: dict[str, str] = {}
        for hs in scn.hosts:
            for v in hs.vms:
                home.setdefault(v, hs.name)
        self.host = np.array([self.host_index[home[v]] for v in self.vm_names], dtype=np.int64)
        self.vcpus = np.array([v.vcpus for v in self.vms], dtype=float)
        self.mem = np.array([v.memory_bytes for v in self.vms], dtype=float)
        self.ready = np.array([v.failover_ready for v in scn.vms], dtype=bool)
        # Cores of a driver domain (Xen IDD) that runs the backend apart from the vCPUs;
        # 0 = the backend shares the host's cores (KVM vhost).
        self.backend_cores = np.array([h.backend_cores or 0.0 for h in scn.hosts], dtype=float)
        self._dedicated_backend = bool((self.backend_cores > 0).any())
        # device-level ingress QoS (bit/s of incoming requests; inf = none)
        self.ingress_limit = np.array(
            [INF if v.ingress_limit is None else v.ingress_limit for v in scn.vms], dtype=float
        )
        self._ingress_limited = bool(np.isfinite(self.ingress_limit).any())
        # workload parameters
        self.kind = f(N, dtype=np.int64)
        self.net_duty, self.cpu_duty = f(N), f(N)
        self.rate, self.streams = f(N), np.ones(N)
        self.pkt_bytes, self.rx_share = np.full(N, 1448.0), np.full(N, 0.023)
        self.req_rate, self.resp_bytes, self.req_bytes = f(N), f(N), f(N)
        self.ns_per_byte = f(N)
        self.file_left, self.file_size = f(N), f(N)
        self.file_start = f(N)
        self.trace_col: list[np.ndarray | None] = [None] * N
        self.trace_t: list[np.ndarray | None] = [None] * N
        # duty-cycle state: cycle start and length, for the network and the CPU benchmark
        self.net_start, self.net_len = f(N), np.ones(N)
        self.cpu_start, self.cpu_len = f(N), np.ones(N)
        # NIC state
        self.on_vf = f(N, dtype=bool)
        self.vf_index = np.full(N, -1, dtype=np.int64)
        self.vf_max = np.full(N, INF)
        self.vf_min = f(N)
        self.guest_limit = np.full(N, INF)
        self.guest_pps = np.full(N, INF)
        self.paused_until = np.full(N, -INF)
        self.migrating = f(N, dtype=bool)
        # counters (cumulative, what drivers read)
        self.cpu_ns, self.steal_ns = f(N), f(N)
        self.rx_b, self.tx_b, self.rx_pk, self.tx_pk = f(N), f(N), f(N), f(N)
        self.h_cpu_ns, self.h_rx_b, self.h_tx_b = f(H), f(H), f(H)
        # last tick, for reports
        self.offered, self.tx, self.rx, self.cpu_use = f(N), f(N), f(N), f(N)
        self.resp_s, self.served_req = f(N), f(N)
        self.backlog_bits = f(N)
        self.host_cpu_util, self.host_net_util = f(H), f(H)
        self._pkts_per_bit, self._host_scale_vm, self._vcpu_load = f(N), np.ones(N), f(N)
        self.wrng = np.random.default_rng([scn.seed, 1])  # workloads: policy-independent
        self.orng = np.random.default_rng([scn.seed, 2])  # operations
        self.ops: dict[str, Op] = {}
        self._ids = itertools.count()
        self.migrations: dict[int, MigrationState] = {}
        self.files_done: list[FileDone] = []
        self.migration_log: list[dict[str, float | str]] = []
        self.on_op_done: list[Callable[[float, Op], None]] = []
        self.on_submit: list[Callable[[float, Op], None]] = []
        self._trace_cache: dict[str, dict[str, np.ndarray]] = {}
        for phase in sorted(scn.workload, key=lambda ph: ph.at):
            if phase.at <= 0:
                for name, w in phase.vms.items():
                    self.set_workload(self.vm_index[name], w, 0.0)
        for i in range(N):
            if self.kind[i] == 0 and self.net_duty[i] == 0 and self.cpu_duty[i] == 0:
                self._reset_cycles(np.array([i]), 0.0)

    # ------------------------------------------------------------------ workloads

    def _reset_cycles(self, idx: np.ndarray, t: float) -> None:
        p = self.profile
        for start, length in ((self.net_start, self.net_len), (self.cpu_start, self.cpu_len)):
            ln = self.wrng.uniform(p.cycle_min, p.cycle_max, idx.size)
            length[idx] = ln
            start[idx] = t - self.wrng.uniform(0.0, 1.0, idx.size) * ln

    def set_workload(self, i: int, w: Workload, t: float) -> None:
        self.kind[i] = KIND[w.kind]
        self.net_duty[i] = w.net_duty
        self.cpu_duty[i] = w.cpu
        self.rate[i] = w.rate
        self.streams[i] = w.streams
        self.pkt_bytes[i] = w.packet_bytes
        self.rx_share[i] = w.rx_share
        self.req_rate[i] = w.requests_per_s if w.kind == "requests" else 0.0
        self.resp_bytes[i] = w.response
        self.req_bytes[i] = w.request
        self.ns_per_byte[i] = w.ns_per_byte
        self.file_left[i] = float(w.size) if w.kind == "file" else 0.0
        self.file_size[i] = self.file_left[i]
        self.file_start[i] = t
        self.backlog_bits[i] = 0.0
        if w.kind == "trace":
            assert w.trace is not None and w.column is not None
            cols = self._load_trace(w.trace)
            if w.column not in cols:
                raise ValueError(f"trace {w.trace}: no column {w.column!r}")
            self.trace_t[i], self.trace_col[i] = cols["time_s"], cols[w.column] * 1e6
        self._reset_cycles(np.array([i]), t)

    def _load_trace(self, path: str) -> dict[str, np.ndarray]:
        if path not in self._trace_cache:
            with Path(path).open() as fh:
                rows = list(csv.DictReader(fh))
            if not rows or "time_s" not in rows[0]:
                raise ValueError(f"trace {path}: needs a header with time_s and one column per VM")
            self._trace_cache[path] = {k: np.array([float(r[k]) for r in rows]) for k in rows[0]}
        return self._trace_cache[path]

    def _on_fraction(
        self, start: np.ndarray, length: np.ndarray, duty: np.ndarray, t0: float, t1: float
    ) -> np.ndarray:
        """Exact on-time share of [t0, t1) for every VM's on/off process (vectorised)."""
        p = self.profile
        frac = np.where(duty >= 1.0, 1.0, 0.0)
        live = np.flatnonzero((duty > 0.0) & (duty < 1.0))
        if live.size == 0:
            return frac
        on = np.zeros(live.size)
        cur = np.full(live.size, t0)
        s, ln, d = start[live], length[live], duty[live]
        act = np.ones(live.size, dtype=bool)  # processes whose time is not yet covered to t1
        for _ in range(64):  # cycles are >= cycle_min long: a few passes cover a tick
            end = s + ln
            on_end = s + d * ln
            seg_end = np.minimum(t1, end)
            on += np.where(act, np.clip(np.minimum(seg_end, on_end) - cur, 0.0, None), 0.0)
            adv = act & (end <= t1)
            if not adv.any():
                break
            k = np.flatnonzero(adv)
            cur[k] = end[k]
            s[k] = end[k]
            ln[k] = self.wrng.uniform(p.cycle_min, p.cycle_max, k.size)
            act = adv
        start[live], length[live] = s, ln
        frac[live] = on / (t1 - t0)
        return frac

    # ------------------------------------------------------------------ physics

    def tick(self, t0: float, t1: float) -> None:
        p = self.profile
        dt = t1 - t0
        N, H = self.N, self.H
        h = self.host
        net_frac = self._on_fraction(self.net_start, self.net_len, self.net_duty, t0, t1)
        cpu_frac = self._on_fraction(self.cpu_start, self.cpu_len, self.cpu_duty, t0, t1)
        jit = self.wrng.lognormal(0.0, p.rate_jitter, N) if p.rate_jitter else np.ones(N)
        cj = 1.0 + (self.wrng.normal(0.0, p.cpu_jitter, N) if p.cpu_jitter else np.zeros(N))
        arrivals = self.wrng.poisson(self.req_rate * dt).astype(float)
        if self._ingress_limited:
            # The NIC discards requests above the VM's ingress limit: they never reach the
            # guest (or a driver domain), so they cost no CPU and are never answered.
            allowed = self.ingress_limit * dt / (8.0 * np.maximum(self.req_bytes, 1.0))
            arrivals = np.minimum(arrivals, allowed)

        kind = self.kind
        offered = np.where(kind <= 1, net_frac * self.rate * self.streams * jit, 0.0)
        # requests: new responses plus the backlog not yet sent
        req_bits = arrivals * self.resp_bytes * 8.0
        offered = offered + (req_bits + self.backlog_bits) / dt * (kind == 2)
        is_file = (kind == 3) & (self.file_left > 0)
        # scp offers its full rate while bytes are left; the last tick is clipped below
        # (offering only the remainder would shrink it geometrically and never finish)
        offered = np.where(is_file, self.rate, offered)
        if (kind == 4).any():
            for i in np.flatnonzero(kind == 4):
                tt, col = self.trace_t[i], self.trace_col[i]
                assert tt is not None and col is not None
                k = max(0, int(np.searchsorted(tt, t0, side="right")) - 1)
                offered[i] = col[k] * jit[i]
        paused = self.paused_until > t0
        offered[paused] = 0.0
        want = np.minimum(
            offered, np.minimum(self.guest_limit, self.guest_pps * self.pkt_bytes * 8)
        )
        pkt_bits = self.pkt_bytes * 8.0
        virt = ~self.on_vf

        # guest CPU: benchmarks, per-packet and per-byte network work, per-request work
        ns_pkt = p.guest_ns_per_packet + p.virtio_guest_ns_per_packet * virt
        pkts_per_bit = (1.0 + self.rx_share * self.pkt_bytes / ACK_BYTES) / pkt_bits
        net_cost = (
            want * pkts_per_bit * ns_pkt + want / 8.0 * self.ns_per_byte
        ) / 1e9 + arrivals / dt * p.guest_ns_per_request / 1e9
        cpu_busy = np.clip(cpu_frac * cj, 0.0, 1.0) * self.vcpus
        if p.tcp_link_clocked:
            # A TCP sender is clocked by its ACKs: it sends (and spends CPU on) only what
            # its share of the egress link drains, not all netperf would like to send. The
            # share is computed on what each vCPU could push, so a CPU-bound sender leaves
            # its unused share to the others.
            need0 = cpu_busy + net_cost
            own = want * np.where(need0 > self.vcpus, self.vcpus / np.maximum(need0, 1e-12), 1.0)
            busy0 = np.bincount(h, np.minimum(need0, self.vcpus), minlength=H)
            own = own * np.minimum(1.0, self.cores / np.maximum(busy0, 1e-12))[h]
            fair = grouped_waterfill(self.capacity, h, own, np.maximum(self.streams, 1.0))
            # only the link's verdict caps: a CPU-bound sender is scaled down below anyway
            link_cap = np.where(fair < own * (1.0 - 1e-9), fair, INF)
            want = np.where((kind <= 1) | (kind == 3), np.minimum(want, link_cap), want)
            net_cost = (
                want * pkts_per_bit * ns_pkt + want / 8.0 * self.ns_per_byte
            ) / 1e9 + arrivals / dt * p.guest_ns_per_request / 1e9
        need = cpu_busy + net_cost
        vm_scale = np.where(need > self.vcpus, self.vcpus / np.maximum(need, 1e-12), 1.0)
        vm_scale[paused] = 0.0
        want = want * vm_scale
        # host CPU: vCPUs + virtio backend
        backend_ns = want * pkts_per_bit * p.virtio_host_ns_per_packet * virt
        if self._dedicated_backend:
            # A driver domain on its own cores: its backend work does not compete with vCPUs.
            ded = self.backend_cores > 0
            shared_ns = np.where(ded[h], 0.0, backend_ns)
            host_need = np.bincount(h, need * vm_scale + shared_ns / 1e9, minlength=H)
        else:
            host_need = np.bincount(h, need * vm_scale + backend_ns / 1e9, minlength=H)
        # Per-queue backend overhead (wake-ups, notifications, switching between the VMs'
        # queues) is paid per active virtio VM whatever its rate: with many VMs it eats
        # into the backend's capacity. 0 by default (no such overhead).
        backend_vm_frac: np.ndarray = np.zeros(H)
        if p.virtio_backend_ns_per_vm:
            n_virt = np.bincount(h, (virt & (want > 0)).astype(float), minlength=H)
            backend_vm_frac = n_virt * p.virtio_backend_ns_per_vm / 1e9
            host_need = np.add(host_need, backend_vm_frac)
        host_scale = np.minimum(1.0, self.cores / np.maximum(host_need, 1e-12))
        want = want * host_scale[h]
        backend_scale = host_scale  # how fast the backend runs: slowed by vCPU contention
        if self._dedicated_backend:
            # ... unless it has its own cores; then it saturates on its own: when the driver
            # domain's cores are full, every virtio VM gets a proportional share of them.
            dd_need = np.bincount(
                h, np.where(ded[h], backend_ns, 0.0) * host_scale[h] / 1e9, minlength=H
            )
            dd_scale = np.where(
                ded, np.minimum(1.0, self.backend_cores / np.maximum(dd_need, 1e-12)), 1.0
            )
            want = np.where(virt, want * dd_scale[h], want)
            backend_scale = np.where(ded, 1.0, host_scale)
        # kept for the request service time in _latency
        self._pkts_per_bit, self._host_scale_vm = pkts_per_bit, host_scale[h]
        self._vcpu_load = need / np.maximum(self.vcpus * host_scale[h], 1e-12)

        # paths: VF cap; virtio per-VM ceiling and the backend's shared packet-rate ceiling
        want = np.where(
            self.on_vf, np.minimum(want, self.vf_max), np.minimum(want, p.virtio_flow_limit)
        )
        vi = np.flatnonzero(virt & (want > 0))
        pps_limit = p.virtio_pps_limit * backend_scale * np.maximum(0.01, 1.0 - backend_vm_frac)
        backend_pps = np.zeros(H)
        if vi.size:
            pps = want[vi] / pkt_bits[vi]
            got = grouped_waterfill(pps_limit, h[vi], pps)
            want[vi] = got * pkt_bits[vi]
            backend_pps = np.bincount(h[vi], got, minlength=H).astype(np.float64)

        # PF egress, shared with migration streams
        migs = list(self.migrations.values())
        mig_active = [m for m in migs if m.copy_from_s <= t0 and self.paused_until[m.vm] <= t0]
        groups = h
        demands, weights = want, np.maximum(self.streams, 1.0)
        if mig_active:
            groups = np.r_[h, [m.src for m in mig_active]]
            demands = np.r_[want, [m.cap_bps for m in mig_active]]
            weights = np.r_[weights, np.ones(len(mig_active))]
        if self.vf_min.any():
            # A VF's min_tx_rate (where the NIC honours it) is a floor: the VF gets its floor
            # or its fair share, whichever is larger (as the Sova allocator assumes).
            floors = np.zeros(demands.size)
            floors[:N] = np.where(self.on_vf, np.minimum(want, self.vf_min), 0.0)
            share = floored_waterfill(self.capacity, groups, demands, weights, floors)
        else:
            share = grouped_waterfill(self.capacity, groups, demands, weights)
        tx = share[:N]
        if is_file.any():
            tx = np.where(is_file, np.minimum(tx, self.file_left * 8.0 / dt), tx)
        rx = tx * self.rx_share + arrivals * self.req_bytes * 8.0 / dt
        rx_host = np.bincount(h, rx, minlength=H)
        mig_rate = np.zeros(len(mig_active))
        for k, m in enumerate(mig_active):
            room = max(0.0, self.capacity[m.dst] - rx_host[m.dst])
            mig_rate[k] = min(share[N + k], room)
            rx_host[m.dst] += mig_rate[k]
        tx_host = np.bincount(h, tx, minlength=H)
        for k, m in enumerate(mig_active):
            tx_host[m.src] += mig_rate[k]

        # latency of request/response VMs
        self._latency(tx, want, offered, req_bits, tx_host, backend_pps, pps_limit, host_need, dt)

        # counters
        pk_tx = tx / pkt_bits
        pk_rx = rx / (8.0 * ACK_BYTES)
        cpu_used = (
            cpu_busy
            + (tx * pkts_per_bit * ns_pkt + tx / 8.0 * self.ns_per_byte) / 1e9
            + arrivals / dt * p.guest_ns_per_request / 1e9
        ) * host_scale[h]
        cpu_used = np.minimum(cpu_used, self.vcpus)
        cpu_used[paused] = 0.0
        wanted_cpu = np.minimum(need, self.vcpus)
        self.steal_ns += np.maximum(0.0, wanted_cpu - cpu_used) * dt * 1e9 * (host_scale[h] < 1)
        self.cpu_ns += cpu_used * dt * 1e9
        self.tx_b += tx * dt / 8.0
        self.rx_b += rx * dt / 8.0
        self.tx_pk += pk_tx * dt
        self.rx_pk += pk_rx * dt
        backend_used = np.bincount(
            h, tx * pkts_per_bit * p.virtio_host_ns_per_packet * virt, minlength=H
        )
        backend_used = np.add(backend_used, backend_vm_frac * 1e9)
        self.h_cpu_ns += (np.bincount(h, cpu_used, minlength=H) * 1e9 + backend_used) * dt
        self.h_tx_b += tx_host * dt / 8.0
        self.h_rx_b += rx_host * dt / 8.0
        self.host_cpu_util = np.minimum(1.0, host_need / self.cores)
        self.host_net_util = np.maximum(tx_host, rx_host) / self.capacity
        self.offered, self.tx, self.rx = offered, tx, rx
        self.cpu_use = cpu_used / self.vcpus

        # file transfers
        if is_file.any():
            self.file_left = np.where(
                is_file, np.maximum(0.0, self.file_left - tx * dt / 8.0), self.file_left
            )
            for i in np.flatnonzero(is_file & (self.file_left <= 0)):
                self.files_done.append(
                    FileDone(
                        self.vm_names[i],
                        self.host_names[h[i]],
                        float(self.file_start[i]),
                        t1,
                        int(self.file_size[i]),
                    )
                )
        # migrations
        for k, m in enumerate(mig_active):
            self._advance_migration(m, mig_rate[k], dt, t1)

    def _latency(
        self,
        tx: np.ndarray,
        want: np.ndarray,
        offered: np.ndarray,
        req_bits: np.ndarray,
        tx_host: np.ndarray,
        backend_pps: np.ndarray,
        pps_limit: np.ndarray,
        host_need: np.ndarray,
        dt: float,
    ) -> None:
        p = self.profile
        req = self.kind == 2
        self.resp_s[:] = 0.0
        self.served_req[:] = 0.0
        if not req.any():
            return
        h = self.host
        idx = np.flatnonzero(req)
        hh = h[idx]
        # the rate this VM could get right now: what the others leave of the link
        residual = np.maximum(self.capacity[hh] - (tx_host[hh] - tx[idx]), 1e3)
        path_cap = np.where(self.on_vf[idx], self.vf_max[idx], p.virtio_flow_limit)
        service = np.minimum(residual, path_cap)
        rho_link = np.minimum(0.99, tx_host[hh] / self.capacity[hh])
        rho_b = np.minimum(0.99, backend_pps[hh] / np.maximum(pps_limit[hh], 1.0))
        rho_c = np.minimum(0.99, host_need[hh] / self.cores[hh])
        sched = p.sched_quantum * rho_c / (1.0 - rho_c)
        path = np.where(
            self.on_vf[idx],
            p.vf_latency + sched,
            p.virtio_latency / (1.0 - rho_b) + 2.0 * sched,
        )
        transfer = self.resp_bytes[idx] * 8.0 / service / (1.0 - rho_link)
        # httperf opens a connection per request: handshake and request/response each
        # cross the host's path and wake the vCPU (and on virtio the backend) again.
        path = path * p.request_round_trips + p.request_fixed_latency
        if p.request_service_latency:
            # The server's own work on the request (Apache + the packets' guest cost) at a
            # vCPU that gets only host_scale of a core, queued M/M/1 behind its other work.
            ns_pkt = p.guest_ns_per_packet + p.virtio_guest_ns_per_packet * ~self.on_vf[idx]
            pkts = self.resp_bytes[idx] * 8.0 * self._pkts_per_bit[idx]
            s_req = (p.guest_ns_per_request + pkts * ns_pkt) / 1e9
            s_req = s_req / np.maximum(self._host_scale_vm[idx], 1e-3)
            rho_v = np.minimum(0.99, self._vcpu_load[idx])
            path = path + s_req / (1.0 - rho_v)
        # what could not be sent this tick waits; its delay is how long it takes to drain
        sent = tx[idx]
        total_bits = offered[idx] * dt
        backlog = np.maximum(0.0, total_bits - sent * dt)
        self.backlog_bits[idx] = backlog
        wait = backlog / np.maximum(sent, 1e3) / 2.0
        self.resp_s[idx] = path + transfer + wait
        self.served_req[idx] = np.where(
            self.resp_bytes[idx] > 0,
            np.minimum(total_bits, sent * dt) / (self.resp_bytes[idx] * 8.0),
            0.0,
        )

    # ------------------------------------------------------------------ migration

    def _advance_migration(self, m: MigrationState, rate: float, dt: float, t: float) -> None:
        """Copy for one tick; rounds shorter than the tick follow each other inside it.

        A round of ``L`` bytes at ``r`` bytes/s takes ``L/r`` seconds and meanwhile the guest
        dirties ``d·L/r`` bytes, which the next round copies. Walking the rounds inside the
        tick (rather than one round per tick) keeps a fast link's short rounds short, so the
        dirty set shrinks geometrically the way pre-copy does on a real host.
        """
        p = self.profile
        r = rate / 8.0  # bytes/s
        d = (p.dirty_rate + p.dirty_per_tx * self.tx[m.vm]) / 8.0
        left_s = dt
        while left_s > 1e-12 and m.round_left_bytes != float("inf"):
            if r <= 0:
                m.dirty_bytes = min(self.mem[m.vm], m.dirty_bytes + d * left_s)
                return
            need_s = m.round_left_bytes / r
            step_s = min(left_s, need_s)
            m.sent_bytes += r * step_s
            m.round_left_bytes -= r * step_s
            m.dirty_bytes = min(self.mem[m.vm], m.dirty_bytes + d * step_s)
            left_s -= step_s
            if m.round_left_bytes > 1e-6:
                return
            now = t - left_s
            if m.fail_at_round and m.rounds >= m.fail_at_round:
                self._finish_migration(
                    m, now, ok=False, detail="migration aborted by the source: connection reset"
                )
                return
            fits = m.dirty_bytes <= r * p.max_downtime
            if fits or m.rounds >= p.max_rounds:
                downtime = m.dirty_bytes / max(r, 1e6 / 8.0)
                m.sent_bytes += m.dirty_bytes
                self.paused_until[m.vm] = now + downtime
                self.env.schedule(
                    max(0.0, now + downtime - self.env.now),
                    partial(self._finish_after_downtime, m, downtime),
                )
                m.round_left_bytes = float("inf")  # no more rounds
                return
            m.rounds += 1
            m.round_left_bytes, m.dirty_bytes = m.dirty_bytes, 0.0

    def _finish_after_downtime(self, m: MigrationState, downtime: float) -> None:
        self._finish_migration(m, self.env.now, True, "", downtime)

    def _finish_migration(
        self, m: MigrationState, t: float, ok: bool, detail: str, downtime: float = 0.0
    ) -> None:
        self.migrations.pop(m.vm, None)
        self.migrating[m.vm] = False
        i = m.vm
        if ok:
            self.host[i] = m.dst
            # A new QEMU process at the target: its counters start from zero.
            for arr in (self.cpu_ns, self.steal_ns, self.rx_b, self.tx_b, self.rx_pk, self.tx_pk):
                arr[i] = 0.0
            detail = (
                f"{m.rounds} round(s), {m.sent_bytes / 2**20:.0f} MiB copied, "
                f"downtime {downtime * 1000:.0f} ms"
            )
        self.migration_log.append(
            {
                "vm": self.vm_names[i],
                "src": self.host_names[m.src],
                "dst": self.host_names[m.dst],
                "start_s": m.start_s,
                "end_s": t,
                "ok": "yes" if ok else "no",
                "downtime_ms": downtime * 1000,
                "rounds": m.rounds,
                "copied_mib": m.sent_bytes / 2**20,
            }
        )
        self._complete(m.op, "succeeded" if ok else "failed", detail)

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
            self._start_migration(op, i, action)
            return op.op_id
        if isinstance(action, model.AttachVF):
            delay = p.hotplug_attach * float(self.orng.uniform(0.75, 1.25))
        elif isinstance(action, model.DetachVF):
            delay = p.hotplug_detach * float(self.orng.uniform(0.75, 1.25))
        else:
            delay = 0.05  # a netlink or guest-agent call
        fails = isinstance(action, model.AttachVF | model.DetachVF) and (
            float(self.orng.uniform()) < p.hotplug_failure_rate
        )
        self.env.schedule(delay, lambda: self._apply(op, i, fails))
        return op.op_id

    def _complete(self, op: Op, state: str, detail: str) -> None:
        op.state, op.detail = state, detail
        for listener in self.on_op_done:
            listener(self.env.now, op)

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
            used = set(self.vf_index[(self.host == hi) & self.on_vf].tolist())
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

    def _start_migration(self, op: Op, i: int, a: model.Migrate) -> None:
        p = self.profile
        dst = self.host_index.get(a.dst_host)
        if dst is None or dst == self.host[i]:
            self.env.schedule(
                0.01, lambda: self._complete(op, "failed", f"bad target host {a.dst_host!r}")
            )
            return
        if self.on_vf[i]:
            # A plain hostdev blocks live migration: the VF must be unplugged first.
            self.env.schedule(
                0.01,
                lambda: self._complete(op, "failed", "VM holds a VF: unplug it before migrating"),
            )
            return
        if self.migrating[i]:
            self.env.schedule(0.01, lambda: self._complete(op, "failed", "already migrating"))
            return
        fail_at = 0
        if float(self.orng.uniform()) < p.migration_failure_rate:
            fail_at = 2
        now = self.env.now
        self.migrating[i] = True
        self.migrations[i] = MigrationState(
            vm=i,
            src=int(self.host[i]),
            dst=dst,
            op=op,
            cap_bps=a.bandwidth_cap_bps or float(self.capacity[self.host[i]]),
            start_s=now,
            copy_from_s=now + p.migration_setup,
            round_left_bytes=float(self.mem[i]),
            fail_at_round=fail_at,
        )

    def abort_migration(self, vm: str) -> None:
        m = self.migrations.get(self.vm_index[vm])
        if m is not None:
            self._finish_migration(m, self.env.now, ok=False, detail="aborted on timeout")

    # ------------------------------------------------------------------ driver views

    def vms_on(self, host: str) -> list[int]:
        return np.flatnonzero(self.host == self.host_index[host]).tolist()

    def sample(self, host: str) -> model.HostSample:
        hi = self.host_index[host]
        vms = {}
        for i in self.vms_on(host):
            vms[self.vm_names[i]] = model.VMCounters(
                vm=self.vm_names[i],
                vcpus=int(self.vcpus[i]),
                cpu_time_ns=int(self.cpu_ns[i]),
                steal_ns=int(self.steal_ns[i]),
                rx_bytes=int(self.rx_b[i]),
                tx_bytes=int(self.tx_b[i]),
                rx_packets=int(self.rx_pk[i]),
                tx_packets=int(self.tx_pk[i]),
                memory_used_bytes=int(self.mem[i]),
            )
        return model.HostSample(
            host=host,
            time_s=self.env.now,
            vms=vms,
            totals=model.HostCounters(
                cpu_busy_ns=int(self.h_cpu_ns[hi]),
                nic_rx_bytes=int(self.h_rx_b[hi]),
                nic_tx_bytes=int(self.h_tx_b[hi]),
                memory_used_bytes=int(self.mem[self.host == hi].sum()),
            ),
        )

    def inventory(self, host: str) -> model.Inventory:
        hi = self.host_index[host]
        states = {}
        for i in self.vms_on(host):
            on = bool(self.on_vf[i])
            states[self.vm_names[i]] = model.VMState(
                vm=self.vms[i],
                nic=model.NicKind.VF if on else model.NicKind.VIRTIO,
                vf_index=int(self.vf_index[i]) if on else None,
                vf_max_bps=float(self.vf_max[i]) if on and self.vf_max[i] < INF else None,
                vf_min_bps=float(self.vf_min[i]) if on and self.vf_min[i] > 0 else None,
                guest_limit_bps=float(self.guest_limit[i]) if self.guest_limit[i] < INF else None,
                failover_ready=bool(self.ready[i]),
                backup_link_up=bool(self.ready[i]),
                migrating=bool(self.migrating[i]),
            )
        return model.Inventory(host=self.hosts[hi], vms=states)
