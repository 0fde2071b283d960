"""The simulated VMs' workloads: what each VM offers to send in one tick.

A benchmark that "runs X % of the time" (the papers' netperf/lookbusy duty cycles) is an
on/off process: cycles of random length in ``[cycle_min, cycle_max]``, on for the first
``X·length`` of each, with a random phase. The on-time inside any interval is integrated
exactly, so a 10 s sample sees the true share of on-time of the cycles it overlaps: the
long-run mean is X, and samples vary with where the cycle boundaries fall — the kind of
sample-to-sample variation real counters show. Bulk streams are always on; httperf-like
request VMs get Poisson arrivals plus whatever they could not send before (a backlog);
scp-like file transfers send until their file is done; traces replay a CSV. Guest-side
rate limits (DAQS's HTB) cap the offer.

Functions of the :class:`~sova.sim.engine.Engine`'s arrays, split from it by concern. The
random draws are the compiled core's counter-based streams (:mod:`sova.policy.tick`): each
is a function of the scenario's seed, the quantity, the VM and the tick (or the VM's reset
number), so no draw depends on another VM's or on the order they are made in.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sova.policy.tick import Cycles, Load, OfferParams, offer_load, uniforms
from sova.scenario import Workload
from sova.sim.state import LoadStatic

if TYPE_CHECKING:
    from sova.sim.state import EngineState

ACK_BYTES = 66.0
KIND = {"duty": 0, "bulk": 1, "requests": 2, "file": 3, "trace": 4}


@dataclass
class Offer:
    """One tick's offered load, before the host and the network have their say."""

    dt: float
    cpu_frac: np.ndarray  # share of the tick the CPU benchmark runs
    cj: np.ndarray  # CPU jitter factor
    arrivals: np.ndarray  # requests arrived (and admitted) this tick
    offered: np.ndarray  # bit/s each VM would send
    req_bits: np.ndarray  # response bits of this tick's requests
    is_file: np.ndarray  # file transfers with bytes left
    paused: np.ndarray  # VMs stopped for a migration's downtime
    want: np.ndarray  # offered, capped by the guest's own limits
    any_paused: bool = True  # False: ``paused`` is all False (the writes to it are skipped)
    any_file: bool = True  # False: ``is_file`` is all False
    arrival_cost: np.ndarray | None = None  # guest CPU of this tick's requests (cores)


def load_static(eng: EngineState) -> LoadStatic:
    """The cached :class:`LoadStatic` of the current workloads (built after a change)."""
    st = eng._load_static
    if st is None:
        st = eng._load_static = _derive(eng)
    return st


def _derive(eng: EngineState) -> LoadStatic:
    kind = eng.kind

    def live(duty: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        idx = np.flatnonzero((duty > 0.0) & (duty < 1.0))
        return idx, np.where(duty >= 1.0, 1.0, 0.0), duty[idx]

    net_live, net_full, net_live_duty = live(eng.net_duty)
    cpu_live, cpu_full, cpu_live_duty = live(eng.cpu_duty)
    asks = np.flatnonzero(eng.req_rate)
    pkt_bits = eng.pkt_bytes * 8.0
    is_req = kind == 2
    req_idx = np.flatnonzero(is_req)
    file_kind = kind == 3
    weights = np.maximum(eng.streams, 1.0)
    return LoadStatic(
        net_live=net_live,
        net_full=net_full,
        net_live_duty=net_live_duty,
        cpu_live=cpu_live,
        cpu_full=cpu_full,
        cpu_live_duty=cpu_live_duty,
        asks=asks,
        ask_rate=eng.req_rate[asks],
        streamy=kind <= 1,
        is_req=is_req,
        req_idx=req_idx,
        any_req=bool(req_idx.size),
        file_kind=file_kind,
        any_file_kind=bool(file_kind.any()),
        traces=np.flatnonzero(kind == 4),
        ingress_div=8.0 * np.maximum(eng.req_bytes, 1.0),
        pkt_bits=pkt_bits,
        pkts_per_bit=(1.0 + eng.rx_share * eng.pkt_bytes / ACK_BYTES) / pkt_bits,
        weights=weights,
        weights_whole=bool(np.array_equal(weights, np.trunc(weights))),
        link_clocked=(kind <= 1) | (kind == 3),
        req_resp_bits=eng.resp_bytes[req_idx] * 8.0,
    )


def reset_each(eng: EngineState, idx: Sequence[int], t: float) -> None:
    """New on/off cycles from ``t`` for each VM of ``idx`` (a VM listed twice is reset
    twice and keeps the last reset's cycles): per VM the net process's length in
    ``[cycle_min, cycle_max]`` and its phase, then the CPU process's, four uniform draws
    keyed by the VM's own reset number (``eng.resets``: how many times it was reset)."""
    if len(idx) == 0:
        return
    p = eng.profile
    at, times = np.unique(np.asarray(idx, dtype=np.int64), return_counts=True)
    eng.resets[at] += times
    nth = eng.resets[at] - 1  # the last of this call's resets of each VM
    span = p.cycle_max - p.cycle_min
    for col, (start, length) in enumerate(
        ((eng.net_start, eng.net_len), (eng.cpu_start, eng.cpu_len))
    ):
        ln = span * uniforms(eng.seed, "reset", at, nth, 2 * col)
        ln += p.cycle_min
        length[at] = ln
        start[at] = t - uniforms(eng.seed, "reset", at, nth, 2 * col + 1) * ln


def set_workloads(eng: EngineState, items: Iterable[tuple[int, Workload]], t: float) -> None:
    """:func:`set_workload` of each ``(VM, workload)`` in turn: the same state and the
    same draws, the parameters written a column at a time (a VM listed twice keeps the
    last of its workloads) and the cycles drawn in one call. A world's first workloads
    are every VM's: one numpy write per VM and parameter was most of their cost."""
    items = list(items)
    if not items:
        return
    eng._load_static = None  # the only writer of the workload parameters
    last = dict(items)  # VM -> its last workload, in the order VMs were first listed
    idx = np.fromiter(last, dtype=np.int64, count=len(last))
    ws = list(last.values())
    kinds = [w.kind for w in ws]

    def col(values: list[float]) -> np.ndarray:
        return np.array(values, dtype=float)

    eng.kind[idx] = [KIND[k] for k in kinds]
    eng.net_duty[idx] = col([w.net_duty for w in ws])
    eng.cpu_duty[idx] = col([w.cpu for w in ws])
    eng.rate[idx] = col([w.rate for w in ws])
    eng.streams[idx] = col([w.streams for w in ws])
    eng.pkt_bytes[idx] = col([w.packet_bytes for w in ws])
    eng.rx_share[idx] = col([w.rx_share for w in ws])
    eng.req_rate[idx] = col(
        [w.requests_per_s if k == "requests" else 0.0 for w, k in zip(ws, kinds, strict=True)]
    )
    eng.resp_bytes[idx] = col([w.response for w in ws])
    eng.req_bytes[idx] = col([w.request for w in ws])
    eng.ns_per_byte[idx] = col([w.ns_per_byte for w in ws])
    eng.file_left[idx] = col(
        [float(w.size) if k == "file" else 0.0 for w, k in zip(ws, kinds, strict=True)]
    )
    eng.file_size[idx] = eng.file_left[idx]
    eng.file_start[idx] = t
    eng.backlog_bits[idx] = 0.0
    # a trace's columns (and its errors) as set_workload has them, in the items' order
    for i, w in items:
        if w.kind == "trace":
            _set_trace(eng, i, w)
    reset_each(eng, [i for i, _ in items], t)


def set_workload(eng: EngineState, i: int, w: Workload, t: float) -> None:
    set_workloads(eng, ((i, w),), t)


def _set_trace(eng: EngineState, i: int, w: Workload) -> None:
    """VM ``i``'s trace columns from its workload's CSV (``w.kind`` is ``"trace"``)."""
    assert w.trace is not None and w.column is not None
    cols = load_trace(eng, w.trace)
    if w.column not in cols:
        raise ValueError(f"trace {w.trace}: no column {w.column!r}")
    eng.trace_t[i], eng.trace_col[i] = cols["time_s"], cols[w.column] * 1e6
    if w.cpu_column is not None:
        if w.cpu_column not in cols:
            raise ValueError(f"trace {w.trace}: no column {w.cpu_column!r}")
        eng.trace_cpu[i] = np.clip(cols[w.cpu_column], 0.0, 1.0)
    else:
        eng.trace_cpu[i] = None


def load_trace(eng: EngineState, path: str) -> dict[str, np.ndarray]:
    if path not in eng._trace_cache:
        with Path(path).open() as fh:
            rows = list(csv.DictReader(fh))
        if not rows or "time_s" not in rows[0]:
            raise ValueError(f"trace {path}: needs a header with time_s and one column per VM")
        eng._trace_cache[path] = {k: np.array([float(r[k]) for r in rows]) for k in rows[0]}
    return eng._trace_cache[path]


def offer(eng: EngineState, t0: float, t1: float) -> Offer:
    """One tick's offered load: the core's one call (the duty cycles and their renewals,
    the draws, each VM's offer), then the traces' samples, the VMs paused for a
    migration's downtime and the guests' own limits."""
    p = eng.profile
    st = load_static(eng)
    if st.any_file_kind:
        is_file = st.file_kind & (eng.file_left > 0)
        any_file = bool(is_file.any())
    else:
        is_file, any_file = st.file_kind, False
    net_frac, cpu_frac = st.net_full.copy(), st.cpu_full.copy()  # written by the core
    got = offer_load(
        Cycles(eng.net_start, eng.net_len, st.net_live, st.net_live_duty, net_frac),
        Cycles(eng.cpu_start, eng.cpu_len, st.cpu_live, st.cpu_live_duty, cpu_frac),
        Load(
            eng.rate,
            eng.streams,
            st.streamy,
            eng.resp_bytes,
            eng.backlog_bits,
            st.is_req,
            is_file if any_file else None,
            (eng.ingress_limit, st.ingress_div) if eng._ingress_limited else None,
            st.asks,
            st.ask_rate * (t1 - t0),
        ),
        OfferParams(
            eng.seed,
            eng.ticks,
            t0,
            t1,
            p.cycle_min,
            p.cycle_max,
            p.rate_jitter,
            p.cpu_jitter,
            st.any_req,
            p.guest_ns_per_request,
            eng.threads,
        ),  # fmt: skip
    )
    offered = got.offered
    if st.traces.size:
        _replay_traces(eng, st, t0, got.jit, offered, cpu_frac)
    any_paused = t0 < eng.paused_through
    if any_paused:
        paused = eng.paused_until > t0
        offered[paused] = 0.0
    else:
        paused = eng._no_vms
    cap = eng.guest_pps * eng.pkt_bytes
    cap *= 8
    np.minimum(eng.guest_limit, cap, out=cap)
    want = np.minimum(offered, cap)
    return Offer(
        t1 - t0,
        cpu_frac,
        got.cj,
        got.arrivals,
        offered,
        got.req_bits,
        is_file,
        paused,
        want,
        any_paused,
        any_file,
        got.arrival_cost,
    )


def _replay_traces(
    eng: EngineState,
    st: LoadStatic,
    t0: float,
    jit: np.ndarray,
    offered: np.ndarray,
    cpu_frac: np.ndarray,
) -> None:
    """The trace VMs' samples at ``t0`` into ``offered`` and ``cpu_frac`` (in place)."""
    for i in st.traces:
        tt, col = eng.trace_t[i], eng.trace_col[i]
        assert tt is not None and col is not None
        k = max(0, int(np.searchsorted(tt, t0, side="right")) - 1)
        offered[i] = col[k] * jit[i]
        cpu = eng.trace_cpu[i]
        if cpu is not None:
            # the sample's busy share replaces the duty cycle (cpu is 0 for such VMs, so
            # no on/off process was drawn for them); the CPU jitter applies as to any VM
            cpu_frac[i] = cpu[k]
