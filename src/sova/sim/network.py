"""How one tick's offered load is served: guest and host CPU, the paths, the PF's egress,
and the latency requests see.

Every packet costs guest CPU — more on virtio (VM exits) — and so does encryption; a VM
whose vCPUs cannot keep up sends less. vCPUs and the virtio backend (per-packet host
cost) share the cores; when they are oversubscribed every VM gets a proportional share
and the backend's packet rate shrinks with it. A VF is capped by its ``max_tx_rate``;
virtio traffic crosses the backend, whose packet-rate ceiling is shared max-min. The PF
shares its egress max-min among all flows of the host, weighted by TCP streams,
including live-migration traffic, which also competes for the target's ingress. A
request's latency follows from what its host's link, backend and cores are doing
(sova.sim.engine's docstring, step 6).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sova.policy.sharing import Requests, ShareHosts, ShareParams, ShareVms, share_tick
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
    files_done: np.ndarray  # the file transfers that finished (``eng.file_left`` is 0)


def _fixed(eng: EngineState, st: LoadStatic, dt: float) -> tuple[ShareHosts, ShareParams]:
    """The tick's host columns and parameters, built again only when what they hold
    changes (a placement: the links; a workload: ``st``; the tick's length): two frozen
    objects of ~20 fields were ~10 us of every tick, a third of a 100-host tick."""
    links = eng.links()
    cached = eng._share_fixed
    if cached is not None and cached[0] is links and cached[1] is st and cached[2] == dt:
        return cached[3], cached[4]
    p = eng.profile
    hosts = ShareHosts(eng.capacity, eng.cores, eng.backend_cores, links)
    params = ShareParams(
        dt, p.guest_ns_per_packet, p.virtio_guest_ns_per_packet,
        p.virtio_host_ns_per_packet, p.virtio_backend_ns_per_vm, p.virtio_pps_limit,
        p.virtio_flow_limit, p.tcp_link_clocked, eng._dedicated_backend,
        p.request_service_latency, st.weights_whole, bool(st.asks.size), p.vf_latency,
        p.virtio_latency, p.sched_quantum, p.request_round_trips, p.request_fixed_latency,
        p.guest_ns_per_request, eng.threads,
    )  # fmt: skip
    eng._share_fixed = (links, st, dt, hosts, params)
    return hosts, params


def share(eng: EngineState, o: Offer, t0: float) -> Shares:
    """One tick's contention for every VM, the request VMs' latency through it
    (``eng.resp_s``, ``served_req``, ``backlog_bits``) and the file transfers' bytes left
    (``eng.file_left``), in the compiled core (sova.policy.sharing; the readable form:
    tests/test_tick_forms.py ``ref_share``, ``ref_latency``, ``ref_files``)."""
    p = eng.profile
    st = load_static(eng)
    arrival_cost = o.arrival_cost
    if arrival_cost is None:
        arrival_cost = o.arrivals / o.dt * p.guest_ns_per_request / 1e9
    migs = list(eng.migrations.values())
    mig_active = [m for m in migs if m.copy_from_s <= t0 and eng.paused_until[m.vm] <= t0]
    vms = ShareVms(
        eng.host, o.want, st.pkts_per_bit, st.pkt_bits, eng.on_vf, eng.ns_per_byte,
        arrival_cost, o.cpu_frac, o.cj, eng.vcpus, o.paused if o.any_paused else None,
        st.weights, st.link_clocked, eng.vf_max, eng.vf_min,
        o.is_file if o.any_file else None, eng.file_left, eng.rx_share, o.arrivals,
        eng.req_bytes,
    )  # fmt: skip
    hosts, params = _fixed(eng, st, o.dt)
    req = Requests(
        st.req_idx, st.req_resp_bits, o.offered, eng.resp_s, eng.served_req, eng.backlog_bits
    )
    s = share_tick(
        vms,
        hosts,
        np.array([m.src for m in mig_active], dtype=np.int64),
        np.array([m.dst for m in mig_active], dtype=np.int64),
        np.array([m.cap_bps for m in mig_active], dtype=np.float64),
        req,
        params,
    )
    eng._host_scale_vm = s.host_scale_vm
    eng.tx_by_host = s.tx_by_host
    return Shares(
        arrival_cost,
        s.want,
        s.tx,
        s.rx,
        s.tx_host,
        s.rx_host,
        mig_active,
        s.mig_rate,
        s.backend_pps,
        s.pps_limit,
        s.host_need,
        s.host_scale,
        s.backend_vm_frac,
        st.pkts_per_bit,
        st.pkt_bits,
        s.ns_pkt,
        s.cpu_busy,
        s.need,
        ~eng.on_vf,
        s.files_done,
    )
