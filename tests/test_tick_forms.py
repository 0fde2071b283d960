"""The engine's tick against its readable form, kept here as the specification.

The tick (sova.sim.workload.offer, sova.sim.network.share with the latency and the files,
Engine._count) derives the workload's static arrays once per change (``LoadStatic``), works
in place and skips masks that are all false; these functions are the tick as it was written
before, one expression per quantity. On random heterogeneous clusters (duty, bulk, request and file
VMs; VFs with caps and floors, guest limits, paused VMs, driver domains, ingress limits,
the profile's optional mechanisms) both forms run from the same seed and every state
array must be the same bytes after every tick. The readable form takes its random draws
from the core's streams through the facade (sova.policy.tick ``draws``, ``uniforms``), key
by key, so the forms see the same values; the streams themselves are tested in
rust/sova-core/src/rng.rs and against numpy's distributions in tests/test_draw_streams.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sova.policy.tick import Guarantees, Sums, draws, tally, uniforms
from sova.policy.waterfill import floored_waterfill, grouped_waterfill, links_waterfill
from sova.scenario import Workload, load_sweep, parse_scenario
from sova.sim import network, workload
from sova.sim.engine import Engine
from sova.sim.network import INF
from sova.sim.state import FileDone, MigrationState, Op
from sova.sim.workload import ACK_BYTES
from sova.sim.world import RESP_BINS, World

ROOT = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------- the readable form


def core_lengths(eng: Engine, stream: str) -> Callable[[np.ndarray, int], np.ndarray]:
    """New cycle lengths of the VMs ``idx`` at renewal pass ``i`` of this tick, from the
    core's stream ``stream``: draw ``i`` of each VM's key at the tick's number."""
    p = eng.profile

    def lengths(idx: np.ndarray, i: int) -> np.ndarray:
        u = uniforms(eng.seed, stream, idx, np.full(idx.size, eng.ticks), i)
        return p.cycle_min + (p.cycle_max - p.cycle_min) * u

    return lengths


def ref_on_fraction(
    eng: Engine,
    start: np.ndarray,
    length: np.ndarray,
    duty: np.ndarray,
    t0: float,
    t1: float,
    lengths: Callable[[np.ndarray, int], np.ndarray],
) -> np.ndarray:
    """Each VM's on-time share of ``(t0, t1]``, renewing the cycles that end inside it
    with ``lengths(vms, pass)`` (the core's streams here; numpy's old one in
    tests/test_draw_streams.py)."""
    frac = np.where(duty >= 1.0, 1.0, 0.0)
    live = np.flatnonzero((duty > 0.0) & (duty < 1.0))
    if live.size == 0:
        return frac
    s, ln, d = start[live], length[live], duty[live]
    end = s + ln
    on = np.clip(np.minimum(np.minimum(t1, end), s + d * ln) - t0, 0.0, None)
    k = np.flatnonzero(end <= t1)
    for i in range(64):
        if k.size == 0:
            break
        cur = end[k]
        s[k] = cur
        ln[k] = lengths(live[k], i)
        if i == 63:
            break
        end_k = cur + ln[k]
        end[k] = end_k
        on[k] += np.clip(np.minimum(np.minimum(t1, end_k), cur + d[k] * ln[k]) - cur, 0.0, None)
        k = k[end_k <= t1]
    start[live], length[live] = s, ln
    frac[live] = on / (t1 - t0)
    return frac


def ref_offer(eng: Engine, t0: float, t1: float) -> SimpleNamespace:
    p = eng.profile
    dt = t1 - t0
    N = eng.N
    net_frac = ref_on_fraction(
        eng, eng.net_start, eng.net_len, eng.net_duty, t0, t1, core_lengths(eng, "net_cycle")
    )
    cpu_frac = ref_on_fraction(
        eng, eng.cpu_start, eng.cpu_len, eng.cpu_duty, t0, t1, core_lengths(eng, "cpu_cycle")
    )
    asks = np.flatnonzero(eng.req_rate)
    d = draws(eng.seed, eng.ticks, N, p.rate_jitter, p.cpu_jitter, asks, eng.req_rate[asks] * dt)
    jit, cj, arrivals = d.jit, d.cj, d.arrivals
    if eng._ingress_limited:
        allowed = eng.ingress_limit * dt / (8.0 * np.maximum(eng.req_bytes, 1.0))
        arrivals = np.minimum(arrivals, allowed)
    kind = eng.kind
    offered = np.where(kind <= 1, net_frac * eng.rate * eng.streams * jit, 0.0)
    req_bits = arrivals * eng.resp_bytes * 8.0
    offered = offered + (req_bits + eng.backlog_bits) / dt * (kind == 2)
    is_file = (kind == 3) & (eng.file_left > 0)
    offered = np.where(is_file, eng.rate, offered)
    paused = eng.paused_until > t0
    offered[paused] = 0.0
    want = np.minimum(offered, np.minimum(eng.guest_limit, eng.guest_pps * eng.pkt_bytes * 8))
    return SimpleNamespace(
        dt=dt,
        cpu_frac=cpu_frac,
        cj=cj,
        arrivals=arrivals,
        offered=offered,
        req_bits=req_bits,
        is_file=is_file,
        paused=paused,
        want=want,
    )


def ref_share(eng: Engine, o: SimpleNamespace, t0: float) -> SimpleNamespace:
    p = eng.profile
    dt = o.dt
    N, H = eng.N, eng.H
    h = eng.host
    kind = eng.kind
    cpu_frac, cj, arrivals, paused = o.cpu_frac, o.cj, o.arrivals, o.paused
    want, is_file = o.want, o.is_file
    pkt_bits = eng.pkt_bytes * 8.0
    virt = ~eng.on_vf
    ns_pkt = p.guest_ns_per_packet + p.virtio_guest_ns_per_packet * virt
    pkts_per_bit = (1.0 + eng.rx_share * eng.pkt_bytes / ACK_BYTES) / pkt_bits
    net_cost = (
        want * pkts_per_bit * ns_pkt + want / 8.0 * eng.ns_per_byte
    ) / 1e9 + arrivals / dt * p.guest_ns_per_request / 1e9
    cpu_busy = np.clip(cpu_frac * cj, 0.0, 1.0) * eng.vcpus
    if p.tcp_link_clocked:
        need0 = cpu_busy + net_cost
        own = want * np.where(need0 > eng.vcpus, eng.vcpus / np.maximum(need0, 1e-12), 1.0)
        busy0 = np.bincount(h, np.minimum(need0, eng.vcpus), minlength=H)
        own = own * np.minimum(1.0, eng.cores / np.maximum(busy0, 1e-12))[h]
        fair = links_waterfill(eng.capacity, eng.links(), own, np.maximum(eng.streams, 1.0))
        link_cap = np.where(fair < own * (1.0 - 1e-9), fair, INF)
        want = np.where((kind <= 1) | (kind == 3), np.minimum(want, link_cap), want)
        net_cost = (
            want * pkts_per_bit * ns_pkt + want / 8.0 * eng.ns_per_byte
        ) / 1e9 + arrivals / dt * p.guest_ns_per_request / 1e9
    need = cpu_busy + net_cost
    vm_scale = np.where(need > eng.vcpus, eng.vcpus / np.maximum(need, 1e-12), 1.0)
    vm_scale[paused] = 0.0
    want = want * vm_scale
    backend_ns = want * pkts_per_bit * p.virtio_host_ns_per_packet * virt
    if eng._dedicated_backend:
        ded = eng.backend_cores > 0
        shared_ns = np.where(ded[h], 0.0, backend_ns)
        host_need = np.bincount(h, need * vm_scale + shared_ns / 1e9, minlength=H)
    else:
        host_need = np.bincount(h, need * vm_scale + backend_ns / 1e9, minlength=H)
    backend_vm_frac: np.ndarray = np.zeros(H)
    if p.virtio_backend_ns_per_vm:
        n_virt = np.bincount(h, (virt & (want > 0)).astype(float), minlength=H)
        backend_vm_frac = n_virt * p.virtio_backend_ns_per_vm / 1e9
        host_need = np.add(host_need, backend_vm_frac)
    host_scale = np.minimum(1.0, eng.cores / np.maximum(host_need, 1e-12))
    want = want * host_scale[h]
    backend_scale = host_scale
    if eng._dedicated_backend:
        dd_need = np.bincount(
            h, np.where(ded[h], backend_ns, 0.0) * host_scale[h] / 1e9, minlength=H
        )
        dd_scale = np.where(
            ded, np.minimum(1.0, eng.backend_cores / np.maximum(dd_need, 1e-12)), 1.0
        )
        want = np.where(virt, want * dd_scale[h], want)
        backend_scale = np.where(ded, 1.0, host_scale)
    eng._host_scale_vm = host_scale[h]
    vcpu_load = need / np.maximum(eng.vcpus * host_scale[h], 1e-12)
    want = np.where(eng.on_vf, np.minimum(want, eng.vf_max), np.minimum(want, p.virtio_flow_limit))
    vi = virt & (want > 0)
    pps_limit = p.virtio_pps_limit * backend_scale * np.maximum(0.01, 1.0 - backend_vm_frac)
    backend_pps = np.zeros(H)
    if vi.any():
        got = links_waterfill(pps_limit, eng.links(), want / pkt_bits, member=vi)
        want = np.where(vi, got * pkt_bits, want)
        backend_pps = np.bincount(h, got, minlength=H).astype(np.float64)
    # the PF's egress, shared with the migration streams copying now
    mig_active = [
        m for m in eng.migrations.values() if m.copy_from_s <= t0 and eng.paused_until[m.vm] <= t0
    ]
    M = len(mig_active)
    groups = np.r_[h, [m.src for m in mig_active]].astype(np.int64)
    demands = np.r_[want, [m.cap_bps for m in mig_active]]
    weights = np.r_[np.maximum(eng.streams, 1.0), np.ones(M)]
    if eng.vf_min.any():
        floors = np.r_[np.where(eng.on_vf, np.minimum(want, eng.vf_min), 0.0), np.zeros(M)]
        got_pf = floored_waterfill(eng.capacity, groups, demands, weights, floors)
    else:
        got_pf = grouped_waterfill(eng.capacity, groups, demands, weights)
    tx = got_pf[:N]
    if is_file.any():
        tx = np.where(is_file, np.minimum(tx, eng.file_left * 8.0 / dt), tx)
    rx = tx * eng.rx_share + arrivals * eng.req_bytes * 8.0 / dt
    rx_host = np.bincount(h, rx, minlength=H)
    mig_rate = np.zeros(M)
    for k, m in enumerate(mig_active):
        # a stream also competes for the target's ingress: it gets what the VMs leave
        room = max(0.0, eng.capacity[m.dst] - rx_host[m.dst])
        mig_rate[k] = min(got_pf[N + k], room)
        rx_host[m.dst] += mig_rate[k]
    tx_host = np.bincount(h, tx, minlength=H)
    tx_by_host = tx_host.copy()
    for k, m in enumerate(mig_active):
        tx_host[m.src] += mig_rate[k]
    return SimpleNamespace(**{k: v for k, v in locals().items() if k not in ("eng", "o", "p")})


def ref_count(eng: Engine, o: SimpleNamespace, s: SimpleNamespace) -> None:
    p, h, H, dt = eng.profile, eng.host, eng.H, o.dt
    tx, rx = s.tx, s.rx
    pk_tx = tx / s.pkt_bits
    pk_rx = rx / (8.0 * ACK_BYTES)
    cpu_used = (
        s.cpu_busy
        + (tx * s.pkts_per_bit * s.ns_pkt + tx / 8.0 * eng.ns_per_byte) / 1e9
        + o.arrivals / dt * p.guest_ns_per_request / 1e9
    ) * s.host_scale[h]
    cpu_used = np.minimum(cpu_used, eng.vcpus)
    cpu_used[o.paused] = 0.0
    wanted_cpu = np.minimum(s.need, eng.vcpus)
    eng.steal_ns += np.maximum(0.0, wanted_cpu - cpu_used) * dt * 1e9 * (s.host_scale[h] < 1)
    eng.cpu_ns += cpu_used * dt * 1e9
    eng.tx_b += tx * dt / 8.0
    eng.rx_b += rx * dt / 8.0
    eng.tx_pk += pk_tx * dt
    eng.rx_pk += pk_rx * dt
    backend_used = np.bincount(
        h, tx * s.pkts_per_bit * p.virtio_host_ns_per_packet * s.virt, minlength=H
    )
    backend_used = np.add(backend_used, s.backend_vm_frac * 1e9)
    eng.h_cpu_ns += (np.bincount(h, cpu_used, minlength=H) * 1e9 + backend_used) * dt
    eng.h_tx_b += s.tx_host * dt / 8.0
    eng.h_rx_b += s.rx_host * dt / 8.0
    eng.host_cpu_util = np.minimum(1.0, s.host_need / eng.cores)
    eng.host_net_util = np.maximum(s.tx_host, s.rx_host) / eng.capacity
    eng.offered, eng.tx, eng.rx = o.offered, tx, rx
    eng.cpu_use = cpu_used / eng.vcpus


def ref_latency(eng: Engine, o: SimpleNamespace, s: SimpleNamespace) -> None:
    """The request VMs' latency through the tick's sharing ``s``."""
    p, dt = eng.profile, o.dt
    tx, tx_host, backend_pps, pps_limit, host_need = (
        s.tx,
        s.tx_host,
        s.backend_pps,
        s.pps_limit,
        s.host_need,
    )
    eng.resp_s[:] = 0.0
    eng.served_req[:] = 0.0
    idx = np.flatnonzero(eng.kind == 2)
    if not idx.size:
        return
    h = eng.host
    resp_bits = eng.resp_bytes[idx] * 8.0
    hh = h[idx]
    # the rate this VM could get right now: what the others leave of the link
    residual = np.maximum(eng.capacity[hh] - (tx_host[hh] - tx[idx]), 1e3)
    path_cap = np.where(eng.on_vf[idx], eng.vf_max[idx], p.virtio_flow_limit)
    service = np.minimum(residual, path_cap)
    rho_link = np.minimum(0.99, tx_host[hh] / eng.capacity[hh])
    rho_b = np.minimum(0.99, backend_pps[hh] / np.maximum(pps_limit[hh], 1.0))
    rho_c = np.minimum(0.99, host_need[hh] / eng.cores[hh])
    sched = p.sched_quantum * rho_c / (1.0 - rho_c)
    path = np.where(
        eng.on_vf[idx],
        p.vf_latency + sched,
        p.virtio_latency / (1.0 - rho_b) + 2.0 * sched,
    )
    transfer = resp_bits / service / (1.0 - rho_link)
    # httperf opens a connection per request: handshake and request/response each
    # cross the host's path and wake the vCPU (and on virtio the backend) again.
    path = path * p.request_round_trips + p.request_fixed_latency
    if p.request_service_latency:
        # The server's own work on the request (Apache + the packets' guest cost) at a
        # vCPU that gets only host_scale of a core, queued M/M/1 behind its other work.
        ns_pkt = p.guest_ns_per_packet + p.virtio_guest_ns_per_packet * ~eng.on_vf[idx]
        pkts = resp_bits * s.pkts_per_bit[idx]
        s_req = (p.guest_ns_per_request + pkts * ns_pkt) / 1e9
        s_req = s_req / np.maximum(s.host_scale[eng.host[idx]], 1e-3)
        rho_v = np.minimum(0.99, s.vcpu_load[idx])
        path = path + s_req / (1.0 - rho_v)
    # what could not be sent this tick waits; its delay is how long it takes to drain
    sent = tx[idx]
    total_bits = o.offered[idx] * dt
    backlog = np.maximum(0.0, total_bits - sent * dt)
    eng.backlog_bits[idx] = backlog
    wait = backlog / np.maximum(sent, 1e3) / 2.0
    eng.resp_s[idx] = path + transfer + wait
    eng.served_req[idx] = np.where(
        resp_bits > 0, np.minimum(total_bits, sent * dt) / resp_bits, 0.0
    )


def ref_files(eng: Engine, o: SimpleNamespace, s: SimpleNamespace, t1: float) -> None:
    """The file transfers' bytes left after the tick, and those that finished."""
    h, dt, is_file, tx = eng.host, o.dt, o.is_file, s.tx
    eng.file_left = np.where(is_file, np.maximum(0.0, eng.file_left - tx * dt / 8.0), eng.file_left)
    for i in np.flatnonzero(is_file & (eng.file_left <= 0)):
        eng.files_done.append(
            FileDone(
                eng.vm_names[i],
                eng.host_names[h[i]],
                float(eng.file_start[i]),
                t1,
                int(eng.file_size[i]),
            )
        )


def ref_tick(eng: Engine, t0: float, t1: float) -> None:
    o = ref_offer(eng, t0, t1)
    s = ref_share(eng, o, t0)
    ref_latency(eng, o, s)
    ref_count(eng, o, s)
    if o.is_file.any():
        ref_files(eng, o, s, t1)
    eng.ticks += 1


# ---------------------------------------------------------------- random clusters

STATE = [
    "cpu_ns", "steal_ns", "rx_b", "tx_b", "rx_pk", "tx_pk", "h_cpu_ns", "h_rx_b", "h_tx_b",
    "offered", "tx", "rx", "cpu_use", "resp_s", "served_req", "backlog_bits",
    "host_cpu_util", "host_net_util", "file_left", "net_start", "net_len", "cpu_start",
    "cpu_len", "_host_scale_vm",
]  # fmt: skip


def workloads(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(["duty", "duty", "bulk", "requests", "file", "idle"]))
    rate = draw(st.floats(1e6, 9e9))
    if kind == "duty":
        return {
            "net": draw(st.sampled_from([0.0, 1.0, draw(st.floats(0.0, 1.0))])),
            "cpu": draw(st.sampled_from([0.0, 1.0, draw(st.floats(0.0, 1.0))])),
            "rate": rate,
        }
    if kind == "bulk":
        return {"kind": "bulk", "rate": rate, "streams": draw(st.integers(1, 8))}
    if kind == "requests":
        return {
            "kind": "requests",
            "requests_per_s": draw(st.floats(1.0, 5000.0)),
            "response": draw(st.integers(100, 200_000)),
            "request": draw(st.integers(0, 2000)),
        }
    if kind == "file":
        return {"kind": "file", "size": draw(st.integers(1, 2 * 10**9)), "rate": rate,
                "ns_per_byte": draw(st.floats(0.0, 5.0))}  # fmt: skip
    return {"cpu": draw(st.floats(0.0, 1.0))}


@st.composite
def clusters(draw: Any) -> tuple[dict[str, Any], list[dict[str, float]]]:
    hosts = draw(st.integers(1, 5))
    per = [draw(st.integers(1 if i == 0 else 0, 6)) for i in range(hosts)]
    names = [f"vm{k}" for k in range(sum(per))]
    profile = {
        "tcp_link_clocked": draw(st.booleans()),
        "request_service_latency": draw(st.booleans()),
        "virtio_backend_ns_per_vm": draw(st.sampled_from([0.0, 2e4])),
        "virtio_guest_ns_per_packet": draw(st.sampled_from([0.0, 800.0])),
        "guest_ns_per_request": draw(st.sampled_from([0.0, 5e4])),
        "rate_jitter": draw(st.sampled_from([0.0, 0.05])),
        "cpu_jitter": draw(st.sampled_from([0.0, 0.03])),
        "cycle_min": 0.5,
        "cycle_max": draw(st.sampled_from([1.0, 16.0])),
        "request_round_trips": draw(st.sampled_from([1.0, 3.0])),
        "request_fixed_latency": draw(st.sampled_from([0.0, 2e-4])),
        "sched_quantum": draw(st.sampled_from([3e-3, 1e-2])),
    }
    host_list, k = [], 0
    for i, n in enumerate(per):
        host: dict[str, Any] = {
            "name": f"h{i}",
            "cores": draw(st.integers(1, 32)),
            "memory": "64GiB",
            "nic": {"capacity": draw(st.floats(1e8, 4e10)), "vf_pool": 8},
            "vms": names[k : k + n],
        }
        if draw(st.booleans()) and draw(st.booleans()):
            host["backend_cores"] = draw(st.floats(0.5, 4.0))
        host_list.append(host)
        k += n
    vms = []
    for name in names:
        vm: dict[str, Any] = {"name": name, "vcpus": draw(st.integers(1, 8))}
        if draw(st.integers(0, 5)) == 0:
            vm["ingress_limit"] = draw(st.floats(1e5, 1e9))
        vms.append(vm)
    data = {
        "name": "tick-forms",
        "seed": draw(st.integers(0, 1000)),
        "duration": 60,
        "tick": 1.0,
        "profile": profile,
        "hosts": host_list,
        "vms": vms,
        "workload": [{"at": 0, "vms": {n: workloads(draw) for n in names}}],
    }
    # the NIC and guest state the controller and operations would leave behind
    nic = [
        {
            "vf": float(draw(st.booleans())),
            "vf_max": draw(st.sampled_from([INF, draw(st.floats(1e6, 1e10))])),
            "vf_min": draw(st.sampled_from([0.0, 0.0, draw(st.floats(0.0, 5e9))])),
            "guest": draw(st.sampled_from([INF, INF, draw(st.floats(1e5, 1e10))])),
            "pps": draw(st.sampled_from([INF, INF, draw(st.floats(1e2, 1e6))])),
            "paused": draw(st.sampled_from([-INF, -INF, -INF, draw(st.floats(0.0, 6.0))])),
        }
        for _ in names
    ]
    return data, nic


def engine(data: dict[str, Any], nic: list[dict[str, float]]) -> Engine:
    eng = Engine(parse_scenario(data, "tick-forms"))
    for i, s in enumerate(nic):
        eng.on_vf[i] = bool(s["vf"])
        eng.vf_max[i], eng.vf_min[i] = (s["vf_max"], s["vf_min"]) if s["vf"] else (INF, 0.0)
        eng.guest_limit[i], eng.guest_pps[i] = s["guest"], s["pps"]
        # migration.advance writes both when it stops a VM for its downtime
        eng.paused_until[i] = s["paused"]
        eng.paused_through = max(eng.paused_through, s["paused"])
    return eng


@settings(max_examples=120, deadline=None)
@given(clusters(), st.integers(0, 1))
def test_tick_matches_its_readable_form(case: Any, change: int) -> None:
    data, nic = case
    fast, spec = engine(data, nic), engine(data, nic)
    for k in range(8):
        t0, t1 = float(k), float(k + 1)
        if k == 4 and change and fast.N:
            # a workload change mid-run: the derived arrays are rebuilt
            w = Workload(kind="bulk", rate=3e9, streams=3)
            fast.set_workload(0, w, t0)
            spec.set_workload(0, w, t0)
        fast.tick(t0, t1)
        ref_tick(spec, t0, t1)
        for name in STATE:
            a, b = getattr(fast, name), getattr(spec, name)
            assert a.tobytes() == b.tobytes(), (name, k, a, b)
        assert fast.files_done == spec.files_done
        assert fast.ticks == spec.ticks == k + 1


SHARES = [
    "want", "tx", "rx", "tx_host", "rx_host", "mig_rate", "backend_pps", "pps_limit",
    "host_need", "host_scale", "backend_vm_frac", "ns_pkt", "cpu_busy", "need",
]  # fmt: skip


@st.composite
def copying(draw: Any, eng: Engine) -> list[MigrationState]:
    """Live migrations of random VMs to random hosts (the source itself too: the
    arithmetic does not care), some not copying yet, with random stream caps."""
    migs = []
    for i in sorted(set(draw(st.lists(st.integers(0, eng.N - 1), max_size=4)))):
        migs.append(
            MigrationState(
                vm=i,
                src=int(eng.host[i]),
                dst=draw(st.integers(0, eng.H - 1)),
                op=cast(Op, None),  # never completed here
                cap_bps=draw(st.sampled_from([INF, draw(st.floats(1e6, 4e10))])),
                start_s=0.0,
                copy_from_s=draw(st.sampled_from([0.0, 0.0, 3.0])),
                round_left_bytes=1e9,
            )
        )
    return migs


@settings(max_examples=200, deadline=None)
@given(clusters(), st.data(), st.integers(0, 5))
def test_share_with_migrations_matches_its_readable_form(
    case: Any, data: st.DataObject, k: int
) -> None:
    """The sharing and the latency alone, with migration streams on the PF and the
    target's ingress (the tick test above starts none): every figure the same bytes as
    the readable form's."""
    cfg, nic = case
    fast, spec = engine(cfg, nic), engine(cfg, nic)
    migs = data.draw(copying(fast))
    fast.migrations = {f"m{j}": m for j, m in enumerate(migs)}
    spec.migrations = dict(fast.migrations)
    t0, t1 = float(k), float(k + 1)
    got = network.share(fast, workload.offer(fast, t0, t1), t0)
    o = ref_offer(spec, t0, t1)
    ref = ref_share(spec, o, t0)
    ref_latency(spec, o, ref)
    for name in SHARES:
        a, b = getattr(got, name), getattr(ref, name)
        assert a.tobytes() == b.tobytes(), (name, a, b)
    for name in ("resp_s", "served_req", "backlog_bits"):  # the latency through them
        assert getattr(fast, name).tobytes() == getattr(spec, name).tobytes(), name
    assert [m.vm for m in got.mig_active] == [m.vm for m in ref.mig_active]
    assert fast.tx_by_host is not None
    assert fast.tx_by_host.tobytes() == ref.tx_by_host.tobytes()
    assert fast._host_scale_vm.tobytes() == spec._host_scale_vm.tobytes()


def test_load_static_follows_set_workload() -> None:
    """The derived arrays are rebuilt after a change, not kept from before it."""
    data = {
        "name": "s", "seed": 1, "duration": 10, "tick": 1.0,
        "hosts": [{"name": "h", "cores": 4, "memory": "8GiB",
                   "nic": {"capacity": 1e10, "vf_pool": 2}, "vms": ["a", "b"]}],
        "vms": [{"name": "a"}, {"name": "b"}],
        "workload": [{"at": 0, "vms": {"a": {"net": 0.5, "rate": 1e9}, "b": {"cpu": 1.0}}}],
    }  # fmt: skip
    eng = Engine(parse_scenario(data, "s"))
    before = workload.load_static(eng)
    assert before.net_live.tolist() == [0] and before.req_idx.size == 0
    eng.set_workload(1, Workload(kind="requests", requests_per_s=10.0), 0.0)
    after = workload.load_static(eng)
    assert after is not before
    assert after.req_idx.tolist() == [1] and after.asks.tolist() == [1]


@settings(max_examples=60, deadline=None)
@given(clusters(), st.lists(st.integers(0, 40), max_size=12), st.floats(0.0, 1e4))
def test_reset_each_draws_what_resetting_vm_by_vm_drew(
    case: Any, picks: list[int], t: float
) -> None:
    """New cycles for several VMs at once (a VM may come twice) leave the cycles and the
    reset counts that resetting one VM at a time, two draws per process, left."""
    data, nic = case
    fast, spec = engine(data, nic), engine(data, nic)
    idx = [k % fast.N for k in picks]
    workload.reset_each(fast, idx, t)
    p = spec.profile
    for i in idx:  # the readable form: four draws per VM, the net process's first
        spec.resets[i] += 1
        nth = spec.resets[[i]] - 1
        for col, (start, length) in enumerate(
            ((spec.net_start, spec.net_len), (spec.cpu_start, spec.cpu_len))
        ):
            u = uniforms(spec.seed, "reset", np.array([i]), nth, 2 * col)
            ln = p.cycle_min + (p.cycle_max - p.cycle_min) * u
            length[[i]] = ln
            start[[i]] = t - uniforms(spec.seed, "reset", np.array([i]), nth, 2 * col + 1) * ln
    for name in ("net_start", "net_len", "cpu_start", "cpu_len", "resets"):
        assert getattr(fast, name).tobytes() == getattr(spec, name).tobytes(), name


# ---------------------------------------------------------------- the run's statistics


def ref_accumulate(
    st: SimpleNamespace,
    eng: Any,
    dt: float,
    guarantee: np.ndarray,
    tolerance: float,
    measure: bool,
) -> None:
    """One tick into the run's statistics ``st``, as World._accumulate wrote it in numpy
    (``eng``: the tick's tx, rx, tx_by_host, served_req, resp_s, offered)."""
    st.tx_bits += eng.tx * dt
    st.rx_bits += eng.rx * dt
    st.host_tx_bits += eng.tx_by_host * dt
    w = eng.served_req
    if w.any() and measure:
        st.req_weight += w
        st.req_time += w * eng.resp_s
        idx = np.flatnonzero(w > 0)
        bins = np.clip(np.searchsorted(RESP_BINS, eng.resp_s[idx]) - 1, 0, 239)
        np.add.at(st.resp_hist, bins, w[idx])
    if guarantee.any():
        offering = (guarantee > 0) & (eng.offered >= guarantee)
        st.guar_intervals += offering
        st.guar_met += offering & (eng.tx >= (1.0 - tolerance) * guarantee)


SUMS = [
    "tx_bits", "rx_bits", "host_tx_bits", "req_weight", "req_time", "resp_hist",
    "guar_intervals", "guar_met",
]  # fmt: skip


def zero_sums(n: int, hosts: int) -> SimpleNamespace:
    sums = {k: np.zeros(n) for k in SUMS}
    sums["host_tx_bits"], sums["resp_hist"] = np.zeros(hosts), np.zeros(240)
    return SimpleNamespace(**sums)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """The same bytes, but for NaN's sign and payload: IEEE leaves those of an operation on
    two NaNs to the hardware and the operands' order, which the compiler may swap in a sum
    (no output tells one NaN from another)."""
    nan = np.isnan(a)
    return bool((nan == np.isnan(b)).all()) and a[~nan].tobytes() == b[~nan].tobytes()


# rates, including none, tiny and huge, and response times below, inside and above the
# histogram's edges (1 us .. 1000 s), on an edge, infinite and NaN
RATES = st.sampled_from([0.0, 0.0, 1.0, 3e-7, 2.5e6, 9.9e9, 1e300])
TIMES = st.sampled_from([0.0, 1e-7, 1e-6, 3.7e-4, 0.01, 1.0, 999.0, 1e3, 5e4, INF, np.nan])


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 12), st.integers(1, 4), st.data())
def test_tally_matches_its_readable_form(n: int, hosts: int, data: st.DataObject) -> None:
    """Several ticks of random figures (served requests at any response time, VMs offering
    around their guarantee, some ticks before the response times count) into the sums:
    every sum the same bytes as the numpy form's."""

    def col(values: st.SearchStrategy[float], size: int) -> np.ndarray:
        return np.array(data.draw(st.lists(values, min_size=size, max_size=size)), dtype=float)

    guarantee = col(st.sampled_from([0.0, 0.0, 1e6, 2.5e6]), n)
    tolerance = data.draw(st.sampled_from([0.0, 0.05]))
    g = None
    if guarantee.any():
        g = Guarantees(guarantee > 0, guarantee, (1.0 - tolerance) * guarantee)
    fast, spec = zero_sums(n, hosts), zero_sums(n, hosts)
    sums = Sums(*(getattr(fast, k) for k in SUMS))
    for _ in range(data.draw(st.integers(1, 4))):
        eng = SimpleNamespace(
            tx=col(RATES, n),
            rx=col(RATES, n),
            tx_by_host=col(RATES, hosts),
            served_req=col(st.sampled_from([0.0, 0.0, 1.0, 2.5, 40.0]), n),
            resp_s=col(TIMES, n),
            offered=col(RATES, n),
        )
        dt, measure = data.draw(st.sampled_from([0.1, 1.0])), data.draw(st.booleans())
        tally(
            eng.tx, eng.rx, eng.tx_by_host, eng.served_req, eng.resp_s, eng.offered, g,
            RESP_BINS, sums, dt, measure,
        )  # fmt: skip
        ref_accumulate(spec, eng, dt, guarantee, tolerance, measure)
        for name in SUMS:
            assert same(getattr(fast, name), getattr(spec, name)), name


def test_world_statistics_match_the_readable_form() -> None:
    """A world with request VMs and a guaranteed VM, its controllers acting (VFs, limits,
    migrations) and the response times counted from a later tick: after every tick the
    run's statistics are the same bytes as the numpy form's of the engine's figures."""
    scn = load_sweep(ROOT / "scenarios" / "sova-tour.yaml")[0]
    metrics = {**scn.metrics, "response_from_s": 40.0}
    scn = scn.model_copy(update={"duration": 120.0, "metrics": metrics})
    world = World(scn, scn.policy_specs[0])
    eng = world.engine
    spec = zero_sums(eng.N, eng.H)
    guarantee = np.array([v.sla.bandwidth.minimum for v in eng.vms], dtype=float)
    assert guarantee.any() and (eng.kind == 2).any()  # what the test is about
    tolerance = float(metrics.get("guarantee_tolerance", 0.05))
    while world.k < 120:
        world.advance()
        if eng.tx_by_host is None:  # a VM moved since the tick
            eng.tx_by_host = np.bincount(eng.host, eng.tx, minlength=eng.H)
        ref_accumulate(spec, eng, world.tick_s, guarantee, tolerance, world.now > 40.0)
        for name in SUMS:
            a, b = getattr(world.run.stats, name), getattr(spec, name)
            assert a.tobytes() == b.tobytes(), (name, world.k)  # (no NaN here)
    assert spec.resp_hist.sum() > 0 and spec.guar_intervals.sum() > 0
