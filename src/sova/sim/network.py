"""How one tick's offered load is served: guest and host CPU, the paths, the PF's egress.

Every packet costs guest CPU — more on virtio (VM exits) — and so does encryption; a VM
whose vCPUs cannot keep up sends less. vCPUs and the virtio backend (per-packet host
cost) share the cores; when they are oversubscribed every VM gets a proportional share
and the backend's packet rate shrinks with it. A VF is capped by its ``max_tx_rate``;
virtio traffic crosses the backend, whose packet-rate ceiling is shared max-min. The PF
shares its egress max-min among all flows of the host, weighted by TCP streams,
including live-migration traffic, which also competes for the target's ingress.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sova.policy.waterfill import floored_waterfill, grouped_waterfill, links_waterfill
from sova.sim.workload import load_static

if TYPE_CHECKING:
    from sova.sim.state import EngineState, LoadStatic, MigrationState
    from sova.sim.workload import Offer

INF = float("inf")


@dataclass
class Shares:
    """What each VM got this tick, and the contention figures latency and counters need."""

    arrival_cost: np.ndarray  # guest CPU of this tick's requests (cores)
    want: np.ndarray  # bit/s after CPU and path limits
    tx: np.ndarray
    rx: np.ndarray
    tx_host: np.ndarray
    rx_host: np.ndarray
    mig_active: list[MigrationState]
    mig_rate: np.ndarray
    backend_pps: np.ndarray
    pps_limit: np.ndarray
    host_need: np.ndarray
    host_scale: np.ndarray
    backend_vm_frac: np.ndarray
    pkts_per_bit: np.ndarray
    pkt_bits: np.ndarray
    ns_pkt: np.ndarray
    cpu_busy: np.ndarray
    need: np.ndarray
    virt: np.ndarray


def share(eng: EngineState, o: Offer, t0: float) -> Shares:
    # One tick's contention, in the order the resources bind: the guest's vCPUs, the
    # host's cores (and the driver domain's), the paths' ceilings, then the PF's egress
    # shared with migration streams. Each step works on whole arrays: a handful of calls
    # per tick, whatever the number of VMs.
    p = eng.profile
    st = load_static(eng)
    arrival_cost = o.arrival_cost
    if arrival_cost is None:
        arrival_cost = o.arrivals / o.dt * p.guest_ns_per_request / 1e9
    pkt_bits = st.pkt_bits
    virt = ~eng.on_vf
    pkts_per_bit = st.pkts_per_bit
    ns_pkt, cpu_busy, need, vm_scale, want = _guest_need(eng, o, st, arrival_cost, virt)
    want, host_need, host_scale, backend_scale, backend_vm_frac = _host_cpu(
        eng, want, pkts_per_bit, virt, need, vm_scale
    )
    want, pps_limit, backend_pps = _paths(eng, want, virt, pkt_bits, backend_scale, backend_vm_frac)
    tx, rx, tx_host, rx_host, mig_active, mig_rate = _egress(eng, o, st, want, t0)
    return Shares(
        arrival_cost,
        want,
        tx,
        rx,
        tx_host,
        rx_host,
        mig_active,
        mig_rate,
        backend_pps,
        pps_limit,
        host_need,
        host_scale,
        backend_vm_frac,
        pkts_per_bit,
        pkt_bits,
        ns_pkt,
        cpu_busy,
        need,
        virt,
    )


def _guest_need(
    eng: EngineState, o: Offer, st: LoadStatic, arrival_cost: np.ndarray, virt: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Guest CPU: benchmarks, per-packet and per-byte network work, per-request work.
    Returns the ns per packet, the busy vCPUs, each VM's need (cores), the share of it its
    vCPUs can run, and what it sends within that share."""
    p = eng.profile
    h, H = eng.host, eng.H
    want, vcpus = o.want, eng.vcpus
    ns_pkt = p.virtio_guest_ns_per_packet * virt
    ns_pkt += p.guest_ns_per_packet
    pkts_per_bit = st.pkts_per_bit

    def net_cost_of(want: np.ndarray) -> np.ndarray:
        # (want * pkts_per_bit * ns_pkt + want / 8.0 * ns_per_byte) / 1e9 + arrival_cost
        c: np.ndarray = want * pkts_per_bit
        c *= ns_pkt
        b = want / 8.0
        b *= eng.ns_per_byte
        c += b
        c /= 1e9
        c += arrival_cost
        return c

    net_cost = net_cost_of(want)
    # np.clip(cpu_frac * cj, 0.0, 1.0) without its wrapper: the same value for every
    # product that is not -0.0 (cpu_frac and cj are >= +0.0)
    cpu_busy = o.cpu_frac * o.cj
    np.maximum(0.0, cpu_busy, out=cpu_busy)
    np.minimum(cpu_busy, 1.0, out=cpu_busy)
    cpu_busy *= vcpus
    if p.tcp_link_clocked:
        # A TCP sender is clocked by its ACKs: it sends (and spends CPU on) only what
        # its share of the egress link drains, not all netperf would like to send. The
        # share is computed on what each vCPU could push, so a CPU-bound sender leaves
        # its unused share to the others.
        need0 = cpu_busy + net_cost
        own = want * _scale_to(need0, vcpus)
        busy0 = np.bincount(h, np.minimum(need0, vcpus), minlength=H)
        own *= np.minimum(1.0, eng.cores / np.maximum(busy0, 1e-12))[h]
        fair = links_waterfill(eng.capacity, eng.links(), own, st.weights, whole=st.weights_whole)
        # only the link's verdict caps: a CPU-bound sender is scaled down below anyway
        own *= 1.0 - 1e-9
        link_cap = np.where(fair < own, fair, INF)
        want = np.where(st.link_clocked, np.minimum(want, link_cap), want)
        net_cost = net_cost_of(want)
    need = cpu_busy + net_cost
    vm_scale = _scale_to(need, vcpus)
    if o.any_paused:
        vm_scale[o.paused] = 0.0
    want = want * vm_scale
    return ns_pkt, cpu_busy, need, vm_scale, want


def _host_cpu(
    eng: EngineState,
    want: np.ndarray,
    pkts_per_bit: np.ndarray,
    virt: np.ndarray,
    need: np.ndarray,
    vm_scale: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Host CPU: the vCPUs and the virtio backend on the host's cores (or the backend on
    a driver domain's own). Returns what each VM sends within them, each host's need and
    scale, how fast its backend runs, and the backend's per-VM overhead."""
    p = eng.profile
    h, H = eng.host, eng.H
    backend_ns = want * pkts_per_bit
    backend_ns *= p.virtio_host_ns_per_packet
    backend_ns *= virt
    need_scaled = need * vm_scale
    if eng._dedicated_backend:
        # A driver domain on its own cores: its backend work does not compete with vCPUs.
        ded = eng.backend_cores > 0
        shared_ns = np.where(ded[h], 0.0, backend_ns)
        shared_ns /= 1e9
        need_scaled += shared_ns
    else:
        need_scaled += backend_ns / 1e9
    host_need = np.bincount(h, need_scaled, minlength=H)
    # Per-queue backend overhead (wake-ups, notifications, switching between the VMs'
    # queues) is paid per active virtio VM whatever its rate: with many VMs it eats
    # into the backend's capacity. 0 by default (no such overhead).
    backend_vm_frac: np.ndarray = np.zeros(H)
    if p.virtio_backend_ns_per_vm:
        n_virt = np.bincount(h, (virt & (want > 0)).astype(float), minlength=H)
        backend_vm_frac = n_virt * p.virtio_backend_ns_per_vm / 1e9
        host_need = np.add(host_need, backend_vm_frac)
    host_scale = np.minimum(1.0, eng.cores / np.maximum(host_need, 1e-12))
    host_scale_vm = host_scale[h]
    want *= host_scale_vm
    backend_scale = host_scale  # how fast the backend runs: slowed by vCPU contention
    if eng._dedicated_backend:
        # ... unless it has its own cores; then it saturates on its own: when the driver
        # domain's cores are full, every virtio VM gets a proportional share of them.
        dd_need = np.bincount(
            h, np.where(ded[h], backend_ns, 0.0) * host_scale_vm / 1e9, minlength=H
        )
        dd_scale = np.where(
            ded, np.minimum(1.0, eng.backend_cores / np.maximum(dd_need, 1e-12)), 1.0
        )
        want = np.where(virt, want * dd_scale[h], want)
        backend_scale = np.where(ded, 1.0, host_scale)
    # kept for the request service time in _latency
    eng._pkts_per_bit, eng._host_scale_vm = pkts_per_bit, host_scale_vm
    if p.request_service_latency:
        eng._vcpu_load = need / np.maximum(eng.vcpus * host_scale_vm, 1e-12)
    return want, host_need, host_scale, backend_scale, backend_vm_frac


def _paths(
    eng: EngineState,
    want: np.ndarray,
    virt: np.ndarray,
    pkt_bits: np.ndarray,
    backend_scale: np.ndarray,
    backend_vm_frac: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The paths: the VF's cap; virtio's per-VM ceiling and the backend's shared
    packet-rate ceiling. Returns what each VM sends within them, each host's packet-rate
    ceiling and the backend's packet rate."""
    p = eng.profile
    want = np.where(eng.on_vf, np.minimum(want, eng.vf_max), np.minimum(want, p.virtio_flow_limit))
    vi = virt & (want > 0)
    pps_limit = p.virtio_pps_limit * backend_scale * np.maximum(0.01, 1.0 - backend_vm_frac)
    backend_pps = np.zeros(eng.H)
    if vi.any():
        got = links_waterfill(pps_limit, eng.links(), want / pkt_bits, member=vi)
        want = np.where(vi, got * pkt_bits, want)
        # the others got 0.0, which leaves each host's sum the same
        backend_pps = np.bincount(eng.host, got, minlength=eng.H).astype(np.float64)
    return want, pps_limit, backend_pps


def _egress(
    eng: EngineState, o: Offer, st: LoadStatic, want: np.ndarray, t0: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[MigrationState], np.ndarray]:
    """The PF's egress, shared with the migration streams, and what each host receives.
    Returns tx and rx per VM and per host, the migrations copying now and their rates."""
    N, H = eng.N, eng.H
    h = eng.host
    dt = o.dt
    migs = list(eng.migrations.values())
    mig_active = [m for m in migs if m.copy_from_s <= t0 and eng.paused_until[m.vm] <= t0]
    groups = h
    demands, weights = want, st.weights
    if mig_active:
        groups = np.r_[h, [m.src for m in mig_active]]
        demands = np.r_[want, [m.cap_bps for m in mig_active]]
        weights = np.r_[weights, np.ones(len(mig_active))]
    if eng.vf_min.any():
        # A VF's min_tx_rate (where the NIC honours it) is a floor: the VF gets its floor
        # or its fair share, whichever is larger (as the Sova allocator assumes).
        floors = np.zeros(demands.size)
        floors[:N] = np.where(eng.on_vf, np.minimum(want, eng.vf_min), 0.0)
        share = floored_waterfill(eng.capacity, groups, demands, weights, floors)
    elif mig_active:
        share = grouped_waterfill(eng.capacity, groups, demands, weights)
    else:
        share = links_waterfill(eng.capacity, eng.links(), demands, weights, whole=st.weights_whole)
    tx = share[:N]
    if o.any_file:
        tx = np.where(o.is_file, np.minimum(tx, eng.file_left * 8.0 / dt), tx)
    rx = tx * eng.rx_share
    if st.asks.size:
        # (without requests the term is 0.0 everywhere and rx is never -0.0)
        r = o.arrivals * eng.req_bytes
        r *= 8.0
        r /= dt
        rx += r
    rx_host = np.bincount(h, rx, minlength=H)
    mig_rate = np.zeros(len(mig_active))
    for k, m in enumerate(mig_active):
        room = max(0.0, eng.capacity[m.dst] - rx_host[m.dst])
        mig_rate[k] = min(share[N + k], room)
        rx_host[m.dst] += mig_rate[k]
    tx_host = np.bincount(h, tx, minlength=H)
    eng.tx_by_host = tx_host.copy() if mig_active else tx_host
    for k, m in enumerate(mig_active):
        tx_host[m.src] += mig_rate[k]
    return tx, rx, tx_host, rx_host, mig_active, mig_rate


def _scale_to(need: np.ndarray, vcpus: np.ndarray) -> np.ndarray:
    """``np.where(need > vcpus, vcpus / np.maximum(need, 1e-12), 1.0)``: the share of its
    need a VM's vCPUs can run, the division only where they are short."""
    over = need > vcpus
    out = np.ones(need.size)
    if over.any():
        np.divide(vcpus, np.maximum(need, 1e-12), out=out, where=over)
    return out
