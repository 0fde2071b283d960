"""The simulated world's sharing of one tick: guest vCPUs, host cores, paths, the PF, the
latency requests see through them, and the file transfers' progress.

The simulator (:mod:`sova.sim.network`) calls :func:`share_tick` once per tick for every
VM of every host; the core (rust/sova-core/src/share.rs) evaluates the numpy form's
expressions in its order, one VM at a time, and fills with the same water-fill as
:mod:`sova.policy.waterfill`, so every value is the same float (tests/test_tick_forms.py
holds the engine to the readable numpy form byte for byte).

ShareVms, Requests and Shared are built every tick and are not frozen (a frozen
dataclass's fields cost ~5x a plain one's to set; theirs were ~7 us of every tick); the
ones cached for a run (ShareHosts, ShareParams) stay frozen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sova.policy import _core
from sova.policy.waterfill import Links

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass  # not frozen: built every tick (module docstring)
class ShareVms:
    """Each VM's offer and state this tick (one value per VM)."""

    host: IntArray
    want: FloatArray  # offered, capped by the guest's own limits (bit/s)
    pkts_per_bit: FloatArray
    pkt_bits: FloatArray
    on_vf: BoolArray
    ns_per_byte: FloatArray
    arrival_cost: FloatArray  # guest CPU of this tick's requests (cores)
    cpu_frac: FloatArray
    cj: FloatArray
    vcpus: FloatArray
    paused: BoolArray | None  # None: no VM is stopped
    weights: FloatArray  # the PF's TCP-stream weights
    link_clocked: BoolArray  # senders clocked by their ACKs
    vf_max: FloatArray
    vf_min: FloatArray
    is_file: BoolArray | None  # None: no file transfer has bytes left
    file_left: FloatArray  # bytes left; advanced in place (float64, C-contiguous)
    rx_share: FloatArray
    arrivals: FloatArray
    req_bytes: FloatArray


@dataclass(frozen=True)
class ShareHosts:
    """Each host's resources, and every VM laid out by host (the fills' layout)."""

    capacity: FloatArray
    cores: FloatArray
    backend_cores: FloatArray
    links: Links


@dataclass(frozen=True)
class ShareParams:
    """The profile's constants and what the caller knows of the arrays."""

    dt: float
    guest_ns_per_packet: float
    virtio_guest_ns_per_packet: float
    virtio_host_ns_per_packet: float
    virtio_backend_ns_per_vm: float  # 0.0: no per-VM backend overhead
    virtio_pps_limit: float
    virtio_flow_limit: float
    tcp_link_clocked: bool
    dedicated_backend: bool  # some host runs its backend on a driver domain's cores
    vcpu_load: bool  # each VM's vCPU load is wanted (the request service time)
    weights_whole: bool  # every weight is a whole number
    any_asks: bool  # some VM has requests
    vf_latency: float
    virtio_latency: float
    sched_quantum: float
    request_round_trips: float
    request_fixed_latency: float
    guest_ns_per_request: float
    # threads the caller offers (>= 1); the sharing itself runs on one: its fills keep
    # numpy's running sums across hosts, so hosts cannot be split off without new bits
    threads: int = 1


@dataclass  # not frozen: built every tick (module docstring)
class Requests:
    """The request VMs (``idx``, their responses' bits) and each VM's offer; the latency
    is written into ``resp_s`` and ``served_req`` (every VM's, zeroed first) and
    ``backlog_bits`` (the request VMs'): float64, C-contiguous, one value per VM."""

    idx: IntArray
    resp_bits: FloatArray
    offered: FloatArray
    resp_s: FloatArray
    served_req: FloatArray
    backlog_bits: FloatArray


@dataclass  # not frozen: built every tick (module docstring)
class Shared:
    """What each VM got this tick, and the contention figures latency and counters need."""

    want: FloatArray  # bit/s after CPU and path limits
    tx: FloatArray
    rx: FloatArray
    ns_pkt: FloatArray
    cpu_busy: FloatArray
    need: FloatArray
    host_scale_vm: FloatArray
    vcpu_load: FloatArray  # empty unless asked for
    tx_host: FloatArray
    tx_by_host: FloatArray  # each host's VMs' own tx, before the migration streams
    rx_host: FloatArray
    backend_pps: FloatArray
    pps_limit: FloatArray
    host_need: FloatArray
    host_scale: FloatArray
    backend_vm_frac: FloatArray
    mig_rate: FloatArray
    files_done: IntArray  # the file transfers that finished this tick


def share_tick(
    vm: ShareVms,
    hosts: ShareHosts,
    mig_src: IntArray,
    mig_dst: IntArray,
    mig_cap: FloatArray,
    req: Requests,
    p: ShareParams,
) -> Shared:
    """One tick's contention, in the order the resources bind: the guests' vCPUs, the
    hosts' cores (and driver domains'), the paths' ceilings, then the PF's egress shared
    with the migration streams ``mig_*`` (source, target, cap), which also compete for
    the target's ingress. Then each request's latency through them, into ``req``, and
    the file transfers' bytes left, into ``vm.file_left``."""

    def f(a: npt.ArrayLike) -> FloatArray:
        return np.ascontiguousarray(a, dtype=np.float64)

    def b(a: npt.ArrayLike) -> BoolArray:
        return np.ascontiguousarray(a, dtype=np.bool_)

    def i(a: npt.ArrayLike) -> IntArray:
        return np.ascontiguousarray(a, dtype=np.int64)

    per_vm, per_host, mig_rate, files_done = _core.tick_share(
        i(vm.host), f(vm.want), f(vm.pkts_per_bit), f(vm.pkt_bits), b(vm.on_vf),
        f(vm.ns_per_byte), f(vm.arrival_cost), f(vm.cpu_frac), f(vm.cj), f(vm.vcpus),
        None if vm.paused is None else b(vm.paused), f(vm.weights), b(vm.link_clocked),
        f(vm.vf_max), f(vm.vf_min), None if vm.is_file is None else b(vm.is_file),
        vm.file_left, f(vm.rx_share), f(vm.arrivals), f(vm.req_bytes),
        f(hosts.capacity), f(hosts.cores), f(hosts.backend_cores),
        hosts.links.order, hosts.links.start, i(mig_src), i(mig_dst), f(mig_cap),
        f(req.offered), i(req.idx), f(req.resp_bits), req.resp_s, req.served_req,
        req.backlog_bits, p.dt, p.guest_ns_per_packet, p.virtio_guest_ns_per_packet,
        p.virtio_host_ns_per_packet, p.virtio_backend_ns_per_vm, p.virtio_pps_limit,
        p.virtio_flow_limit, p.tcp_link_clocked, p.dedicated_backend, p.vcpu_load,
        p.weights_whole, p.any_asks, p.vf_latency, p.virtio_latency, p.sched_quantum,
        p.request_round_trips, p.request_fixed_latency, p.guest_ns_per_request,
        int(p.threads),
    )  # fmt: skip
    return Shared(*per_vm, *per_host, mig_rate, files_done)
