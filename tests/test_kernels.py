"""The array kernels decide exactly what the readable per-host specification decides.

:mod:`sova.policy.kernels` and :mod:`sova.agent.bandwidth` are what every agent runs (one
host) and what ``World`` runs (all hosts at once). Equality is demanded, not closeness: a
simulated run must be byte-identical whichever form decided, so each kernel is fed random
heterogeneous clusters (hosts of different link speeds and VM counts, including empty
hosts) beside the per-host function it implements and must return the same floats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tests import bandwidth_oracle, loads_oracle, sensing_oracle
from tests.test_bandwidth_props import flows

from sova.agent import bandwidth as bw
from sova.model import MBIT, SLA, VM, HostCounters, HostSample, ResourceTuple, VMCounters
from sova.policy.bandwidth import FlowDemand, SovaAllocator
from sova.policy.kernels import Groups, load_shares
from sova.policy.metering import RateMeter, measure
from sova.policy.sensing import (
    HostSensor,
    LoadShares,
    SensorKernel,
    VMFactors,
    host_load,
    vm_loads,
)
from sova.record import EventRow
from sova.scenario import Scenario, load_sweep
from sova.sim.world import World

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- exact sums

_U = 2.0**-53  # unit roundoff of float64
_MANTISSA = (1 << 52) - 1  # a float64's fraction bits: all 0 on a power of two


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def numpy_row_fsum(m: np.ndarray) -> np.ndarray:
    """``math.fsum`` of every row of a finite matrix, as numpy computed it before the
    compiled core's ``links_fsum`` (the oracle beside ``math.fsum``): TwoSum's error terms
    summed in float, the result accepted where a bound proves it correctly rounded, and
    ``math.fsum`` for the rows it cannot."""
    rows, width = m.shape
    if width == 0:
        return np.zeros(rows)
    s = m[:, 0].copy()
    c = np.zeros(rows)
    c_abs = np.zeros(rows)
    for j in range(1, width):
        s, e = _two_sum(s, m[:, j])
        c += e
        c_abs += np.abs(e)
    r, t = _two_sum(s, c)
    delta = 2.0 * width * _U * c_abs
    # half an ulp of r each side, a quarter below a power of two
    a = np.abs(r)
    pow2 = (a.view(np.int64) & _MANTISSA) == 0
    limit = np.spacing(a) * np.where(pow2, 0.25, 0.5)
    ok = (np.abs(t) + delta < limit) | ((delta == 0) & (t == 0))
    for i in np.flatnonzero(~ok).tolist():
        r[i] = math.fsum(m[i].tolist())
    return r


def row_fsum(m: np.ndarray) -> np.ndarray:
    """Each row's sum through the compiled core, as the bandwidth step asks for it: a
    host per row, its flows laid out in a scrambled order."""
    rows, width = m.shape
    host = np.repeat(np.arange(rows, dtype=np.int64), width)
    perm = np.random.default_rng(rows * 7 + width).permutation(host.size)
    return Groups.of(host[perm], rows).fsum(m.ravel()[perm])

finite = st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False)
# values that cancel: sums near rounding ties are where a compensated sum goes wrong
tricky = st.one_of(
    finite,
    st.sampled_from([1.0, -1.0, 2.0**53, -(2.0**53), 1e16, -1e16, 0.1, 0.2, 0.3, 1e-300, 5e-324]),
    st.floats(-1e300, 1e300, allow_nan=False, allow_infinity=False),
)


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.lists(tricky, min_size=6, max_size=6), min_size=1, max_size=20), st.integers(0, 6)
)
def test_row_fsum_is_math_fsum(rows: list[list[float]], width: int) -> None:
    m = np.array([r[:width] for r in rows], dtype=np.float64).reshape(len(rows), width)
    got = row_fsum(m)
    want = np.array([math.fsum(r[:width]) for r in rows])
    assert got.tobytes() == want.tobytes()
    assert got.tobytes() == numpy_row_fsum(m).tobytes()


def test_row_fsum_on_a_tie_that_a_compensated_sum_rounds_wrongly() -> None:
    # 1 + 2^-53 + 2^-106: the exact sum is just above the tie between 1 and 1 + 2^-52, so
    # it rounds up; summing the error terms in float loses the 2^-106 and would round down.
    m = np.array([[1.0, 2.0**-53, 2.0**-106]])
    assert row_fsum(m).tolist() == [math.fsum(m[0].tolist())] == [1.0 + 2.0**-52]


def test_row_fsum_just_under_a_power_of_two() -> None:
    # 1 - 2^-54 - 2^-107: the float sum and its remainder say 1.0 with 2^-54 to spare,
    # which is half an ulp of 1.0 above it but a whole half-ulp below (the ulp under a
    # power of two is half as big): the exact sum is past that tie, so 1 - 2^-53. A check
    # that took half of np.spacing on both sides accepts 1.0 here.
    m = np.array([[1.0, -(2.0**-54), -(2.0**-107)], [-1.0, 2.0**-54, 2.0**-107]])
    want = [math.fsum(r) for r in m.tolist()]
    assert want == [1.0 - 2.0**-53, -(1.0 - 2.0**-53)]
    assert row_fsum(m).tolist() == want


def test_row_fsum_counts_the_rounding_of_its_error_terms() -> None:
    # 1 - 2^-54 - 2^-107 + 3*2^-109 = 1 - 2^-54 - 2^-109: just past the tie under 1.0, so
    # 1 - 2^-53. The error terms summed in float give -2^-54 + 2^-107 (-2^-54 - 2^-107
    # is a tie, rounded to even), a remainder inside the quarter-ulp limit of 1.0: only
    # the bound on that float sum of error terms (delta) sends the row to math.fsum.
    m = np.array([[1.0, -(2.0**-54), -(2.0**-107), 3 * 2.0**-109]])
    want = [math.fsum(r) for r in m.tolist()]
    assert want == [1.0 - 2.0**-53]
    assert row_fsum(m).tolist() == want


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(-1074, 1023),
            st.lists(st.integers(-60, 2), min_size=1, max_size=5),
            st.lists(st.sampled_from([-1.0, 1.0]), min_size=6, max_size=6),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_row_fsum_near_powers_of_two_and_ties(
    rows: list[tuple[int, list[int], list[float]]],
) -> None:
    # rows of a power of two plus and minus a few smaller powers of two: sums that sit
    # on, or a hair off, the ties and the ulp steps of a power of two
    m = np.zeros((len(rows), 6))
    for i, (k, offs, signs) in enumerate(rows):
        vals = [2.0**k] + [math.ldexp(1.0, max(-1074, min(1023, k + o - 52))) for o in offs]
        m[i, : len(vals)] = [sg * v for sg, v in zip(signs, vals, strict=False)]
    want = np.array([math.fsum(r) for r in m.tolist()])
    assert row_fsum(m).tobytes() == want.tobytes() == numpy_row_fsum(m).tobytes()


# --------------------------------------------------------------------------- allocator


@dataclass(frozen=True)
class Cluster:
    capacity: list[float]  # per host
    hosts: list[list[FlowDemand]]


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    n_hosts = draw(st.integers(1, 8))
    caps, hosts = [], []
    seq = 0
    for _ in range(n_hosts):
        caps.append(draw(st.sampled_from([0.0, 1_000.0, 10_000.0, 25_000.0, 3_300.0])) * MBIT)
        fl = []
        for _ in range(draw(st.integers(0, 7))):
            fl.append(draw(flows(f"vm{seq}", seq)))
            seq += 1
        hosts.append(fl)
    return Cluster(caps, hosts)


def flat(c: Cluster) -> tuple[Groups, list[FlowDemand], np.ndarray]:
    host = [h for h, fl in enumerate(c.hosts) for _ in fl]
    demands = [d for fl in c.hosts for d in fl]
    # hosts' flows interleaved: the kernel must not depend on flows being contiguous
    order = sorted(range(len(host)), key=lambda i: (i % 3, i))
    host = [host[i] for i in order]
    demands = [demands[i] for i in order]
    return Groups.of(np.array(host, dtype=np.int64), len(c.hosts)), demands, np.array(c.capacity)


@settings(max_examples=400, deadline=None)
@given(clusters())
def test_sova_kernel_equals_the_allocator_host_by_host(c: Cluster) -> None:
    _kernel_equals_the_allocator(c)


# terms whose plain sum rounds away from the exact one: 2^33 + 2^-20 + 2^-20 is 2^33 added
# left to right (each 2^-20 a tie, rounded to even) but 2^33 + 2^-19 exactly
_TIES = [2.0**33, 2.0**-20, 1e9, 3e9 + 0.1, 0.3, 7.0, 0.0]


@st.composite
def tied_clusters(draw: st.DrawFn) -> Cluster:
    """Hosts whose capacity is their flows' demand or guarantee total, exact or as a
    plain sum, or a float or two beside it: where the kernel's plain sums cannot decide."""
    caps, hosts, seq = [], [], 0
    for _ in range(draw(st.integers(1, 6))):
        fl = []
        for _ in range(draw(st.integers(1, 5))):
            d = draw(st.one_of(st.sampled_from(_TIES), st.floats(0, 1e10)))
            m = draw(st.sampled_from([0.0, d, 2.0**-20]))
            sla = SLA(bandwidth=ResourceTuple(minimum=m))
            fl.append(FlowDemand(f"vm{seq}", d, sla, 1500.0, seq))
            seq += 1
        d_all = [f.demand_bps for f in fl]
        m_all = [f.sla.bandwidth.minimum for f in fl]
        base = draw(st.sampled_from([math.fsum(d_all), sum(d_all), math.fsum(m_all), sum(m_all)]))
        cap = float(base)
        for _ in range(draw(st.integers(0, 2))):
            cap = float(np.nextafter(cap, draw(st.sampled_from([0.0, np.inf]))))
        caps.append(cap)
        hosts.append(fl)
    return Cluster(caps, hosts)


@settings(max_examples=400, deadline=None)
@given(tied_clusters())
def test_sova_kernel_equals_the_allocator_at_the_capacity(c: Cluster) -> None:
    # capacities at and an ulp either side of the flows' exact total: the core's sums are
    # math.fsum's, so it takes the same branch (all at demand, water-fill, scale) as the
    # readable form
    _kernel_equals_the_allocator(c)


def test_a_plain_sum_at_the_capacity_is_not_trusted() -> None:
    # 2^33 + 2^-20 + 2^-20 on a 2^33 link: the exact demand total is over the link by
    # 2^-19, so the specification water-fills (each flow's weight-fair share); its plain
    # sum equals the link and would leave every flow at its demand. And as guarantees:
    # over-committed by 2^-19, scaled down (the scale needs the exact total).
    for guaranteed in (False, True):
        d = [2.0**33, 2.0**-20, 2.0**-20]
        fl = [
            FlowDemand(f"vm{k}", x, SLA(bandwidth=ResourceTuple(minimum=x * guaranteed)), 1500.0, k)
            for k, x in enumerate(d)
        ]
        _kernel_equals_the_allocator(Cluster([2.0**33], [fl]))


def test_a_plain_sum_several_ulps_off_the_capacity_is_not_trusted() -> None:
    # 2^33 + 8 * 2^-20 on a link of 2^33 + 3 * 2^-19 (3 ulps of 2^33 above it): each 2^-20
    # is a tie that a plain sum rounds away, so the plain total is 2^33, 3 ulps below the
    # link, but the exact total is 2^33 + 4 ulps, above it: the specification water-fills
    # (as guarantees: over-committed, scaled). A check that trusts the plain sum beyond a
    # couple of ulps of the capacity, without its error bound, leaves every flow at demand.
    for guaranteed in (False, True):
        d = [2.0**33] + [2.0**-20] * 8
        fl = [
            FlowDemand(f"vm{k}", x, SLA(bandwidth=ResourceTuple(minimum=x * guaranteed)), 1500.0, k)
            for k, x in enumerate(d)
        ]
        assert sum(d) == 2.0**33 < 2.0**33 + 3 * 2.0**-19 < math.fsum(d)
        _kernel_equals_the_allocator(Cluster([2.0**33 + 3 * 2.0**-19], [fl]))


def _kernel_equals_the_allocator(c: Cluster) -> None:
    groups, demands, capacity = flat(c)
    vms = [VM(d.vm, 1, 1, sla=d.sla) for d in demands]
    rate, pps = bw.allocate(
        [SovaAllocator()] * len(c.hosts),
        groups,
        capacity,
        np.array([d.demand_bps for d in demands]),
        np.array([d.packet_bytes for d in demands]),
        vms.__getitem__,
    )
    want, one = {}, {}
    for h, fl in enumerate(c.hosts):
        want.update(bandwidth_oracle.SovaAllocator().allocate(c.capacity[h], fl))
        one.update(SovaAllocator().allocate(c.capacity[h], fl))  # the registered object
    assert one == want
    for k, d in enumerate(demands):
        assert rate[k] == want[d.vm].rate_bps, d.vm
        assert (None if math.isnan(pps[k]) else pps[k]) == want[d.vm].pps_cap


def test_congested_and_overcommitted_hosts_in_one_round() -> None:
    # host 0: two 6 Gbit/s guarantees on a 10 Gbit/s link (over-committed: scaled to 5 each);
    # host 1: 4 + 8 Gbit/s demand on 10 Gbit/s, weights 1:1 -> water level 5: 4 and 6;
    # host 2: 1 Gbit/s on 10 (uncongested: its demand).
    g = SLA(bandwidth=ResourceTuple(minimum=6e9))
    cl = Cluster(
        [10e9, 10e9, 10e9],
        [
            [FlowDemand("a", 7e9, g), FlowDemand("b", 7e9, g)],
            [FlowDemand("c", 4e9, SLA()), FlowDemand("d", 8e9, SLA())],
            [FlowDemand("e", 1e9, SLA())],
        ],
    )
    groups, demands, capacity = flat(cl)
    vms = [VM(d.vm, 1, 1, sla=d.sla) for d in demands]
    rate, _ = bw.allocate(
        [SovaAllocator()] * 3,
        groups,
        capacity,
        np.array([d.demand_bps for d in demands]),
        np.full(len(demands), 1500.0),
        vms.__getitem__,
    )
    got = {d.vm: rate[k] for k, d in enumerate(demands)}
    assert got == {"a": 5e9, "b": 5e9, "c": 4e9, "d": 6e9, "e": 1e9}


def test_a_bad_flow_is_refused_naming_the_field() -> None:
    groups = Groups.of(np.zeros(1, dtype=np.int64), 1)
    with pytest.raises(ValueError, match="packet_bytes"):
        bw.allocate(
            [SovaAllocator()],
            groups,
            np.array([1e9]),
            np.array([1e6]),
            np.array([0.0]),
            lambda k: VM("a", 1, 1),
        )


# --------------------------------------------------------------------------- the loop


def spec_reserve(
    capacity: float,
    bps: dict[str, float],
    limits: dict[str, float | None],
    probe: float,
    slas: dict[str, FlowDemand],
    reservations: dict[str, tuple[int, float, bool]],
    demand: dict[str, float],
    fast: dict[str, bool],
) -> None:
    """A guaranteed VM's reservation (docs/design.md#guarantees), one VM at a time: updates
    ``reservations`` (absent: none) and raises a reserved VM's ``demand`` to its minimum."""
    full = math.fsum(bps.values()) >= bw.FULL_LINK * capacity
    hold = bw.HOLD_PERIODS
    for vm, r in sorted(bps.items()):
        m = slas[vm].sla.bandwidth.minimum
        if not (m > 0 and r < m):
            reservations.pop(vm, None)  # at or over its minimum (or none): its reading
            continue
        q, level, was_fast = reservations.get(vm, (-1, 0.0, False))
        if q >= 0 and was_fast != fast[vm]:
            q, level = -1, 0.0  # a VF gained or lost: what it read then says nothing now
        cap = limits.get(vm)
        busy = full or (cap is not None and r >= (1.0 - probe) * cap)
        if q < 0:  # free: reserved at once if the reading may be congestion
            q, level = (0, 0.0) if busy else (-1, 0.0)
        elif q < hold:  # reserved: one more quiet period, or start again
            q, level = (0, 0.0) if busy else (q + 1, max(level, r))
        elif r > (1.0 + probe / 2) * max(level, probe * m):  # released; sends more than then
            q, level = 0, 0.0
        if q < 0:
            reservations.pop(vm, None)
        else:
            reservations[vm] = (q, level, fast[vm])
        if 0 <= q < hold:
            demand[vm] = min(max(demand[vm], m), capacity)


def spec_limits(
    capacity: float,
    bps: dict[str, float],
    limits: dict[str, float | None],
    probe: float,
    spread_spare: bool,
    slas: dict[str, FlowDemand],
    reservations: dict[str, tuple[int, float, bool]] | None = None,
    fast: dict[str, bool] | None = None,
    lift: bool = False,
) -> dict[str, tuple[float | None, float | None]]:
    """The agent's bandwidth period for one host as it was written before the kernels
    (HostAgent.bandwidth_step): the readable specification of sova.agent.bandwidth.decide.
    ``lift``: no cap on a calm link without guarantees (docs/design.md#open-link) for a VM
    without an SLA maximum or packet cap."""
    lifted: set[str] = set()
    if (
        lift
        and not any(slas[vm].sla.bandwidth.minimum > 0 for vm in bps)
        and math.fsum(bps.values()) <= bw.FULL_LINK * capacity
    ):
        lifted = {vm for vm in bps if slas[vm].sla.bandwidth.maximum is None}
    want: dict[str, float] = {}
    for vm, rate_bps in sorted(bps.items()):
        cap = limits.get(vm)
        demand = rate_bps
        if cap is not None and rate_bps >= (1.0 - probe) * cap:
            demand = max(rate_bps, cap) * (1.0 + probe)
        want[vm] = min(demand, capacity)
    if spread_spare and reservations is not None and fast is not None:
        spec_reserve(capacity, bps, limits, probe, slas, reservations, want, fast)
    demands = []
    for vm, demand in sorted(want.items()):
        d = slas[vm]
        demands.append(FlowDemand(vm, demand, d.sla, d.packet_bytes))
    alloc = bandwidth_oracle.SovaAllocator().allocate(capacity, demands)
    extra = 0.0
    if spread_spare and alloc:
        spare = capacity - math.fsum(a.rate_bps for a in alloc.values())
        extra = max(0.0, spare) / len(alloc)
    out: dict[str, tuple[float | None, float | None]] = {}
    for vm, a in sorted(alloc.items()):
        rate: float | None = a.rate_bps + extra
        if rate is not None and probe > 0:
            rate = max(rate, probe * capacity / len(demands))
        at_line = rate is not None and rate >= capacity * (1 - 1e-9)
        if (at_line or vm in lifted) and a.pps_cap is None:
            rate = None
        current = limits.get(vm)
        if (current is None or rate is None) and current is rate:
            continue
        if (
            current is not None
            and rate is not None
            and abs(current - rate) <= 0.01 * max(current, rate)
        ):
            continue
        out[vm] = (rate, a.pps_cap)
    return out


# The per-VM draws' strategies, built once rather than at every draw of every example
# (each new one was validated and labelled again, its lambda's source compiled). The same
# strategies: a seed gives the same examples as before.
_CURRENT_LIMIT = st.one_of(
    st.none(), st.floats(0, 12_000, allow_subnormal=False).map(lambda x: x * MBIT)
)
_NEAR_CURRENT = st.sampled_from([0.5, 0.97, 1.0, 1.3])
_RESERVATION = st.one_of(
    st.none(),
    st.tuples(
        st.integers(0, bw.HOLD_PERIODS),
        st.floats(0, 2_500, allow_subnormal=False).map(lambda x: x * MBIT),
        st.booleans(),
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    clusters(),
    st.data(),
    st.sampled_from([0.0, 0.05, 0.1]),
    st.booleans(),
    st.booleans(),
)
def test_the_period_equals_the_per_host_loop(
    c: Cluster, data: st.DataObject, probe: float, spread: bool, sova: bool
) -> None:
    # the compiled core's whole period (sova: one call; else the core's demands and caps
    # around a plug-in allocator's per-host calls, here the readable Sova allocator) on a
    # random cluster, the VMs' columns in another order than the flows, against the
    # readable per-host loop, host by host
    groups, demands, capacity = flat(c)
    assume(all(cap > 0 for cap, fl in zip(c.capacity, c.hosts, strict=True) if fl))
    current: dict[str, float | None] = {d.vm: data.draw(_CURRENT_LIMIT) for d in demands}
    # the same measured rates, with the current limits nearby half the time
    bps = {
        d.vm: (current[d.vm] or 1e9) * data.draw(_NEAR_CURRENT)
        if data.draw(st.booleans())
        else d.demand_bps
        for d in demands
    }
    # each guaranteed VM's reservation: free, reserved after some quiet periods, or released
    held = {d.vm: data.draw(_RESERVATION) for d in demands}
    on_vf = {d.vm: data.draw(st.booleans()) for d in demands}
    reservations = {vm: s for vm, s in held.items() if s is not None}
    # flow k is VM where[k] of the columns; two more VMs, not flows, must stay untouched
    n = len(demands)
    where = np.array(data.draw(st.permutations(range(n + 2)))[:n], dtype=np.int64)
    at = {d.vm: int(where[k]) for k, d in enumerate(demands)}

    def column(value: dict[str, float], fill: float) -> np.ndarray:
        out = np.full(n + 2, fill)
        for vm, x in value.items():
            out[at[vm]] = x
        return out

    sla = {d.vm: d.sla for d in demands}
    before = bw.Reservations.of([None] * (n + 2))
    before.quiet[:] = 3  # the two VMs that are not flows: reserved, and must stay so
    for vm, st8 in held.items():
        one = bw.Reservations.of([st8])
        before.quiet[at[vm]], before.level[at[vm]] = one.quiet[0], one.level[0]
        before.fast[at[vm]] = one.fast[0]
    cols = bw.VmColumns(
        column(bps, math.nan),
        column({d.vm: d.packet_bytes for d in demands}, 1500.0),
        column({vm: math.nan if x is None else x for vm, x in current.items()}, math.nan),
        column({vm: s.bandwidth.minimum for vm, s in sla.items()}, 0.0),
        column({vm: math.inf if s.bandwidth.maximum is None else s.bandwidth.maximum
                for vm, s in sla.items()}, math.inf),  # fmt: skip
        column({vm: math.nan if s.max_pps is None else s.max_pps for vm, s in sla.items()}, 1.0),
        column({vm: s.weight for vm, s in sla.items()}, 1.0),
        column({vm: float(f) for vm, f in on_vf.items()}, 0.0).astype(bool),
    )
    vms = [VM(d.vm, 1, 1, sla=d.sla) for d in demands]
    allocator = SovaAllocator() if sova else bandwidth_oracle.SovaAllocator()
    d = bw.decide(
        [allocator] * len(c.hosts), groups, capacity, where, cols, vms.__getitem__,
        sova=sova, probe=probe, spread_spare=spread, held=before if spread else None,
    )  # fmt: skip
    got = {
        e.vm: (
            None if math.isnan(d.new[k]) else float(d.new[k]),
            None if math.isnan(d.pps[k]) else float(d.pps[k]),
        )
        for k, e in enumerate(demands)
        if k in set(d.changed.tolist())
    }
    assert d.changed.tolist() == sorted(d.changed.tolist())
    want: dict[str, tuple[float | None, float | None]] = {}
    for h, fl in enumerate(c.hosts):
        if fl:
            want.update(
                spec_limits(
                    c.capacity[h],
                    {e.vm: bps[e.vm] for e in fl},
                    current,
                    probe,
                    spread,
                    {e.vm: e for e in fl},
                    reservations,
                    on_vf,
                    lift=spread and sova,
                )
            )
    assert got == want
    if spread:
        got_reserved = {e.vm: x for e in demands if (x := before.entry(at[e.vm])) is not None}
        assert got_reserved == reservations
        others = np.setdiff1d(np.arange(n + 2), where)
        assert (before.quiet[others] == 3).all()


def test_the_period_refuses_a_bad_column_by_name() -> None:
    groups = Groups.of(np.zeros(1, dtype=np.int64), 1)
    one = np.ones(1)
    cols = bw.VmColumns(one, np.zeros(1), one, one, one, one, one, np.zeros(1, dtype=bool))
    with pytest.raises(ValueError, match="packet_bytes must be finite and > 0.*got 0.0"):
        bw.decide(
            [SovaAllocator()], groups, np.array([1e9]), np.zeros(1, dtype=np.int64), cols,
            lambda k: VM("a", 1, 1), sova=True, probe=0.1, spread_spare=True,
        )  # fmt: skip
    with pytest.raises(ValueError, match="flows\\[0\\]: VM 1 outside 0..1"):
        bw.decide(
            [SovaAllocator()], groups, np.array([1e9]), np.ones(1, dtype=np.int64), cols,
            lambda k: VM("a", 1, 1), sova=True, probe=0.1, spread_spare=True,
        )  # fmt: skip


class ReadableRateMeter:
    """Rate metering's readable form, one VM at a time on whole counters: the oracle
    sova.policy.metering (the compiled core) is held to."""

    def __init__(self) -> None:
        self._last: HostSample | None = None

    def observe(self, sample: HostSample) -> dict[str, tuple[float, float]]:
        prev, self._last = self._last, sample
        out: dict[str, tuple[float, float]] = {}
        if prev is None:
            return out
        dt = sample.time_s - prev.time_s
        if dt <= 0:
            return out
        for vm, c in sample.vms.items():
            p = prev.vms.get(vm)
            if p is None:
                continue
            d_tx, d_pk = c.tx_bytes - p.tx_bytes, c.tx_packets - p.tx_packets
            if d_tx < 0 or d_pk < 0:
                continue
            out[vm] = (8.0 * d_tx / dt, d_tx / d_pk if d_pk > 0 else 1500.0)
        return out


# Whole counters below 2^53, where a float64 holds every value and every difference exactly
# (a 10 Gbit/s link needs 228 years to count 2^53 bytes): the core's float arithmetic is
# then the integer form's, bit for bit.
counter = st.integers(0, 2**53 - 1)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(counter, counter, counter, counter), min_size=1, max_size=12),
    st.sampled_from([0.2, 1.0, 3.7]),
)
def test_measure_equals_the_readable_rate_meter(
    readings: list[tuple[int, int, int, int]], dt: float
) -> None:
    # (previous tx bytes, previous tx packets, tx bytes, tx packets); some go backwards
    def sample(t: float, which: int) -> HostSample:
        return HostSample(
            "h",
            t,
            {
                f"vm{k}": VMCounters(f"vm{k}", 1, 0, 0, 0, r[which], 0, r[which + 1])
                for k, r in enumerate(readings)
            },
            HostCounters(0, 0, 0, 0),
        )

    meter = ReadableRateMeter()
    meter.observe(sample(10.0, 0))
    want = meter.observe(sample(10.0 + dt, 2))
    arr = np.array(readings, dtype=np.float64)
    m = measure(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], (10.0 + dt) - 10.0)
    got = {f"vm{k}": (m.bps[k], m.packet_bytes[k]) for k in range(len(readings)) if m.valid[k]}
    assert got == want


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.2, 1.0, -0.5, 3.7]),  # time step (none or backwards too)
            st.dictionaries(
                st.sampled_from([f"vm{k}" for k in range(8)]),  # VMs come and go
                st.tuples(counter, counter),
                max_size=8,
            ),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_rate_meter_equals_the_readable_form_over_a_host_s_samples(
    steps: list[tuple[float, dict[str, tuple[int, int]]]],
) -> None:
    core, readable = RateMeter(), ReadableRateMeter()
    t = 100.0
    for dt, vms in steps:
        t += dt
        sample = HostSample(
            "h",
            t,
            {vm: VMCounters(vm, 1, 0, 0, 0, tx, 0, pk) for vm, (tx, pk) in vms.items()},
            HostCounters(0, 0, 0, 0),
        )
        assert core.observe(sample) == readable.observe(sample)


def test_measure_refuses_mismatched_columns() -> None:
    one, two = np.zeros(1), np.zeros(2)
    with pytest.raises(ValueError, match="prev_pk: 2 values for 1 VMs"):
        measure(one, two, one, one, 1.0)


# --------------------------------------------------------------------------- sensing


@st.composite
def counter_runs(draw: st.DrawFn) -> dict[str, object]:
    """Cumulative counters of VMs on hosts over several readings, with resets and moves."""
    hosts = draw(st.integers(1, 3))
    n = draw(st.integers(1, 6))
    steps = draw(st.integers(1, 10))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    host = rng.integers(0, hosts, n)
    vcpus = rng.choice([1, 2, 4], n).astype(float)
    c = np.zeros((6, n))
    times: list[float] = []
    hosts_at: list[np.ndarray] = []
    readings: list[np.ndarray] = []
    ceilings: list[np.ndarray] = []
    virtio: list[np.ndarray] = []
    # path ceilings at and near the levels' tx rates (8 x level), so periods land on both
    # sides of the censoring margin
    caps = np.array([np.inf, np.inf, 8e6, 8.5e6, 2.4e8, 1e9])
    t = 0.0
    # a few discrete traffic levels so NF sees ties and single-level hosts (span 0)
    levels = np.array([0.0, 0.0, 100.0, 5_000.0, 1e6, 1e6, 3e7])
    for _ in range(steps + 1):
        t += float(rng.choice([10.0, 10.0, 7.5, 0.25]))
        dt = t - (times[-1] if times else 0.0)
        c[0] += np.floor(rng.uniform(0, 1.05, n) * dt * 1e9 * vcpus)
        c[1] += np.floor(rng.uniform(0, 0.2, n) * dt * 1e9)
        rate = rng.choice(levels, n)
        c[2] += np.floor(rate * dt * 0.02)
        c[3] += np.floor(rate * dt)
        c[4] += np.floor(rate * dt / 1500 * rng.choice([0.5, 1.0], n))
        c[5] += np.floor(rate * dt / 1500)
        reset = rng.uniform(size=n) < 0.08
        c[:, reset] = np.floor(c[:, reset] * rng.uniform(0, 0.5))
        move = rng.uniform(size=n) < 0.08
        host = np.where(move, rng.integers(0, hosts, n), host)
        times.append(t)
        hosts_at.append(host.copy())
        readings.append(c.copy())
        ceilings.append(rng.choice(caps, n))
        virtio.append(rng.uniform(size=n) < 0.5)
    return {
        "hosts": hosts,
        "times": times,
        "host": hosts_at,
        "c": readings,
        "ceiling": ceilings,
        "virtio": virtio,
        "margin": draw(st.sampled_from([0.0, 0.10, 0.5])),
        "saturation": draw(st.sampled_from([0.5, 0.95, 1.0])),
        "vcpus": vcpus,
        "num": draw(st.integers(1, 6)),
        "epsilon": draw(st.sampled_from([0.0, 0.3, 0.7, 1.0])),
        "threshold": draw(st.sampled_from([0.0, 10_000.0, 1e6])),
    }


def _sample(host: int, t: float, c: np.ndarray, hosts: np.ndarray, vcpus: np.ndarray) -> HostSample:
    vms = {
        f"vm{i}": VMCounters(
            f"vm{i}",
            int(vcpus[i]),
            int(c[0, i]),
            int(c[1, i]),
            int(c[2, i]),
            int(c[3, i]),
            int(c[4, i]),
            int(c[5, i]),
        )
        for i in np.flatnonzero(hosts == host)
    }
    return HostSample(f"h{host}", t, vms, HostCounters(0, 0, 0, 0))


@settings(max_examples=300, deadline=None)
@given(counter_runs())
def test_sensor_kernel_equals_host_sensor(run: dict[str, object]) -> None:
    # The compiled sensor, over every VM at once (the simulator) and through HostSensor
    # one host at a time (the agent), against the readable per-host form
    # (tests/sensing_oracle.py): every factor of every VM after every reading, == on
    # floats, not approx, and whether each host has measured a period yet (what the VF
    # policies are told).
    hosts, times, vcpus = run["hosts"], run["times"], run["vcpus"]
    assert isinstance(hosts, int) and isinstance(times, list) and isinstance(vcpus, np.ndarray)
    num, eps, thr = run["num"], run["epsilon"], run["threshold"]
    assert isinstance(num, int) and isinstance(eps, float) and isinstance(thr, float)
    margin, sat = run["margin"], run["saturation"]
    assert isinstance(margin, float) and isinstance(sat, float)
    scalar = [sensing_oracle.HostSensor(num, eps, thr, margin, sat) for _ in range(hosts)]
    agents = [HostSensor(num, eps, thr, margin, sat) for _ in range(hosts)]
    batch = SensorKernel(vcpus.size, num, eps, thr, margin, sat)
    for t, host, c, cap, virt in zip(  # type: ignore[call-overload]
        times, run["host"], run["c"], run["ceiling"], run["virtio"], strict=True
    ):
        for h in range(hosts):
            on = np.flatnonzero(host == h)
            caps = {f"vm{i}": float(cap[i]) for i in on if np.isfinite(cap[i])}
            sample = _sample(h, t, c, host, vcpus)
            virtio = {f"vm{i}" for i in on if virt[i]}
            scalar[h].observe(sample, caps, virtio)
            agents[h].observe(sample, caps, virtio)
        batch.observe(t, c, vcpus, host, cap, virt)
        f = batch.factors(host, hosts)
        for h in range(hosts):
            sf = scalar[h].factors()
            assert set(sf) == {f"vm{i}" for i in np.flatnonzero(host == h)}
            # the agent's: the same VMs in the same order, the same floats
            assert list(agents[h].factors().items()) == list(sf.items())
            assert agents[h].resets == scalar[h].resets
            for name, s in sf.items():
                i = int(name[2:])
                got = VMFactors(
                    name,
                    f.cpu_usage[i],
                    f.io_degree[i],
                    f.io_factor[i],
                    f.net_degree[i],
                    f.net_factor[i],
                    bool(f.has_traffic[i]),
                    f.demand_bps[i],
                    f.last_rate_bps[i],
                    f.tx_bps[i],
                    f.rx_bps[i],
                    bool(f.censored[i]),
                    f.demand_est_bps[i],
                )
                want = s
                assert got == want, (name, got, want)
            has = bool((f.count[host == h] > 0).any())
            assert has == any(scalar[h].windows().values()) == agents[h].measured()
            assert agents[h].periods() == {vm: len(w) for vm, w in scalar[h].windows().items()}


@settings(max_examples=300, deadline=None)
@given(counter_runs(), st.integers(0, 2**32 - 1))
def test_load_shares_equal_host_load_and_vm_loads(run: dict[str, object], seed: int) -> None:
    # Every host's load and every VM's share after every reading, == on floats, against
    # host_load/vm_loads of each host's previous and current samples (what the agent's
    # _observe computes): resets of host or VM counters, VMs that moved, hosts without
    # VMs, heterogeneous hosts (and a zero memory or link, the functions' 0.0 branch).
    hosts, times, vcpus = run["hosts"], run["times"], run["vcpus"]
    assert isinstance(hosts, int) and isinstance(times, list) and isinstance(vcpus, np.ndarray)
    rng = np.random.default_rng(seed)
    cores = rng.choice([0.5, 4.0, 32.0], hosts) * 2
    memory = rng.choice([0.0, 2.0**34, 2.0**38], hosts, p=[0.1, 0.45, 0.45])
    capacity = rng.choice([0.0, 1e9, 1e10, 2.5e10], hosts, p=[0.1, 0.3, 0.3, 0.3])
    vm_memory = rng.choice([2.0**30, 2.0**33, 3 * 2.0**30], vcpus.size)
    totals = np.zeros((3, hosts))
    prev: tuple[float, np.ndarray, np.ndarray, np.ndarray] | None = None
    prev_samples: list[HostSample] = []
    for t, host, c in zip(times, run["host"], run["c"], strict=True):  # type: ignore[call-overload]
        totals = totals + np.floor(rng.uniform(0, 2e10, (3, hosts)))
        back = rng.uniform(size=hosts) < 0.1
        totals[:, back] = np.floor(totals[:, back] * rng.uniform(0, 0.9))
        samples = []
        for h in range(hosts):
            s = _sample(h, t, c, host, vcpus)
            mine = np.flatnonzero(host == h)
            vms = {
                n: replace(v, memory_used_bytes=int(vm_memory[int(n[2:])]))
                for n, v in s.vms.items()
            }
            tot = HostCounters(
                int(totals[0, h]), int(totals[1, h]), int(totals[2, h]), int(vm_memory[mine].sum())
            )
            samples.append(replace(s, vms=vms, totals=tot))
        if prev is not None:
            t0, prev_totals, prev_c, prev_host = prev
            a = load_shares(
                t - t0, prev_totals, totals, prev_c, c, host != prev_host, host,
                vm_memory, cores, memory, capacity,
            )  # fmt: skip
            for h in range(hosts):
                args = (int(cores[h]), int(memory[h]), float(capacity[h]))
                want = loads_oracle.host_load(prev_samples[h], samples[h], *args)
                got = (
                    LoadShares(a.host_cpu[h], a.host_mem[h], a.host_net[h])
                    if a.host_ok[h]
                    else None
                )
                assert got == want, (h, got, want)
                # the agent's per-host form: the same core on one host's samples
                assert host_load(prev_samples[h], samples[h], *args) == want
                vms_want = loads_oracle.vm_loads(prev_samples[h], samples[h], *args)
                vms_got = {
                    f"vm{i}": LoadShares(a.vm_cpu[i], a.vm_mem[i], a.vm_net[i])
                    for i in np.flatnonzero((host == h) & a.vm_ok)
                }
                assert vms_got == vms_want
                one = vm_loads(prev_samples[h], samples[h], *args)
                assert list(one.items()) == list(vms_want.items())  # values and order
        prev, prev_samples = (t, totals.copy(), c.copy(), host.copy()), samples


@st.composite
def big_count(draw: st.DrawFn) -> tuple[int, int]:
    """Two readings of a counter past 2**53, a period's growth apart (or gone back)."""
    base = draw(st.integers(2**53, 2**64 - 1))
    return base, base + draw(st.integers(-(2**20), 2**44))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(big_count(), min_size=9, max_size=9),
    st.floats(1e-3, 3600.0),
    st.sampled_from([1, 3, 64]),
    st.sampled_from([0, 2**34, 3 * 2**37 + 1]),
    st.sampled_from([0.0, 1e9, 2.5e10]),
)
def test_per_host_loads_of_counters_past_2_53_equal_the_readable_form(
    pairs: list[tuple[int, int]], dt: float, cores: int, memory: int, capacity: float
) -> None:
    # A host's cpu_busy_ns passes 2**53 after ~104 core-days, so a real agent's counters
    # do; their differences must be taken between the integers (a float64 reading of each
    # would round both), and then divided as Python divides an int by a float. Differences
    # of either sign: a negative one is a reset.
    (c0, c1), (r0, r1), (t0, t1) = pairs[:3]
    mem_used = pairs[0][0] % (memory + 1)  # at most the host's memory
    vm0, vm1 = (
        VMCounters("vm", 2, *(p[k] for p in pairs[3:]), memory_used_bytes=mem_used) for k in (0, 1)
    )
    prev = HostSample("h", 5.0, {"vm": vm0}, HostCounters(c0, r0, t0, 0))
    cur = HostSample("h", 5.0 + dt, {"vm": vm1}, HostCounters(c1, r1, t1, mem_used))
    args = (cores, memory, capacity)
    assert host_load(prev, cur, *args) == loads_oracle.host_load(prev, cur, *args)
    assert vm_loads(prev, cur, *args) == loads_oracle.vm_loads(prev, cur, *args)


# --------------------------------------------------------------------------- the world


def _run(
    scn: Scenario, policy: str, fleet: bool, sensing: bool = True
) -> tuple[
    list[object],
    list[object],
    list[float],
    dict[str, dict[str, float | None]],
    dict[str, dict[str, tuple[int, float, bool]]],
]:
    spec = next(p for p in scn.policy_specs if p.name == policy)
    world = World(scn, spec)
    if not fleet:
        world._bw = None  # every agent's own bandwidth_step, one host at a time
    if not sensing:
        world._sensing = None  # every agent's own HostSensor, one host at a time
    run = world.run_until(scn.duration)
    eng = world.engine
    limits = {h: dict(a.limits) for h, a in world.agents.items()}
    held = {h: dict(a.reservations) for h, a in world.agents.items()}
    return list(run.timeline), list(run.events), eng.guest_limit.tolist(), limits, held


@pytest.mark.parametrize(
    ("name", "policy", "duration", "minimum"),
    [
        ("sova-tour", "sova", 600.0, None),  # Sova allocator, 3 hosts, hot spots, a migration
        ("daqs-fig3", "daqs", 60.0, None),  # DAQS: a stateful allocator called host by host
        # guarantees under their minimum on a full link, reserved and released (G's 1 stream
        # against BE's 5; BE's senders joining one a minute)
        ("daqs-fig3", "sova", 60.0, None),
        ("daqs-fig4", "sova", 480.0, None),
        # every VM guaranteed 1.5 Gbit/s: the VM that migrates carries a reservation
        ("sova-tour", "sova", 600.0, 1.5e9),
    ],
)
def test_world_decides_the_same_with_all_hosts_at_once(
    name: str, policy: str, duration: float, minimum: float | None
) -> None:
    # The world's bandwidth phase (sim/fleet_bandwidth.py: one pass for all hosts, limit
    # calls landing in one batch per round) against every HostAgent.bandwidth_step on its
    # own host: the same timeline, events and applied limits, VM by VM, and the same
    # record in every agent of the limits it applied (written lazily by the world) and
    # of its guaranteed VMs' reservations.
    scn = load_sweep(ROOT / "scenarios" / f"{name}.yaml")[0]
    scn = scn.model_copy(update={"duration": duration})
    if minimum is not None:
        vms = [
            v.model_copy(update={"sla": v.sla.model_copy(update={"min": minimum})}) for v in scn.vms
        ]
        scn = scn.model_copy(update={"vms": vms})
    fast = _run(scn, policy, fleet=True)
    slow = _run(scn, policy, fleet=False)
    assert fast[0] == slow[0]
    assert fast[1] == slow[1]
    assert fast[2] == slow[2]
    assert fast[3] == slow[3]
    assert fast[4] == slow[4]


def _flaky(scn: Scenario, rate: float) -> Scenario:
    """``scn`` on hardware whose VF hot-plugs fail at ``rate`` (the guest does not answer)."""
    profile = scn.profile.model_copy(update={"hotplug_failure_rate": rate})
    return scn.model_copy(update={"profile": profile})


def test_world_decides_the_same_while_hot_plugs_fail() -> None:
    # Hot-plugs that fail (retried, then backed off) leave executors that are not idle
    # at the bandwidth phase: their flows take the executor's per-flow rules in the world
    # too, and the world asks only those executors (FleetBandwidth.tracking).
    scn = load_sweep(ROOT / "scenarios" / "sova-tour.yaml")[0]
    scn = _flaky(scn.model_copy(update={"duration": 600.0}), 0.5)
    fast = _run(scn, "sova", fleet=True)
    slow = _run(scn, "sova", fleet=False)
    failed = [e for e in fast[1] if isinstance(e, EventRow) and e.event == "vf_attach_failed"]
    assert len(failed) > 5
    for k in range(5):
        assert fast[k] == slow[k]


def test_world_asks_every_executor_that_tracks_something() -> None:
    # The world's bandwidth phase asks idle/failing only of the executors marked as
    # tracking something (Executor.on_track -> FleetBandwidth.tracking): an unmarked one
    # must track nothing, after every phase of a run with VF operations in flight,
    # hot-plugs failing and backing off, and a migration.
    scn = load_sweep(ROOT / "scenarios" / "sova-tour.yaml")[0]
    scn = _flaky(scn.model_copy(update={"duration": 600.0}), 0.5)
    world = World(scn, next(p for p in scn.policy_specs if p.name == "sova"))
    fleet = world._bw
    assert fleet is not None
    phase = world._phase
    busy = 0

    def checked(due: object, t: float) -> None:
        nonlocal busy
        phase(due, t)  # type: ignore[arg-type]
        for h, a in enumerate(fleet.agents):
            if not a.executor.tracks_nothing:
                busy += 1
                assert fleet.tracking[h], (t, h)

    world._phase = checked  # type: ignore[method-assign]
    world.run_until(scn.duration)
    assert busy > 50  # executors did track operations and failures


@pytest.mark.parametrize(
    ("name", "policy", "duration"),
    [
        ("sova-tour", "sova", 600.0),  # IF/NF ranking, hot spots, a live migration
        ("dsr-iov-fig7a", "dsr-iov", 120.0),  # io_degree/net_degree ranking, VF tiers off
    ],
)
def test_world_senses_the_same_with_all_hosts_at_once(
    name: str, policy: str, duration: float
) -> None:
    # The world's sensing (sim/fleet_sensing.py: SensorKernel over every VM) against every
    # agent's own HostSensor: the same factors in the timeline, the same decisions.
    scn = load_sweep(ROOT / "scenarios" / f"{name}.yaml")[0]
    scn = scn.model_copy(update={"duration": duration})
    fast = _run(scn, policy, fleet=True)
    slow = _run(scn, policy, fleet=True, sensing=False)
    assert fast[0] == slow[0]
    assert fast[1] == slow[1]
    assert fast[2] == slow[2]


def test_host_factors_built_late_are_the_periods_factors() -> None:
    # Sensed.factors and Loads.vms are built when first read (sim/fleet_sensing.HostFactors,
    # HostLoads): read at the end of a run, every period's mapping must hold what it held
    # in its period (the kernels' arrays are new each period), and a copy travels as a
    # plain dict
    import pickle

    from sova.sim.fleet_sensing import HostFactors, HostLoads

    scn = load_sweep(ROOT / "scenarios" / "sova-tour.yaml")[0]
    scn = scn.model_copy(update={"duration": 600.0})
    world = World(scn, next(p for p in scn.policy_specs if p.name == "sova"))
    sensing = world._sensing
    assert sensing is not None
    sense = sensing.sense
    late: list[tuple[HostFactors | HostLoads, dict[str, object]]] = []

    def spy(e: World) -> object:
        out = sense(e)  # type: ignore[arg-type]
        # the arrays readers of every host take are each host's VMs in index order (the
        # sensor's and vm_loads' order), and what each host's Sensed holds
        names, a, host = world.engine.vm_names, out.loads, world.engine.host
        for hi, (h, s) in enumerate(out.items()):
            assert out.measured[hi] == s.measured and h in out
            on = np.flatnonzero(host == hi)
            assert out.members[out.cut[hi] : out.cut[hi + 1]].tolist() == on.tolist()
            assert [names[i] for i in on] == list(s.factors)
            assert s.loads is not None and s.loads.previous == (a is not None)
            if a is None:
                continue
            shares = LoadShares(*(float(x[hi]) for x in (a.host_cpu, a.host_mem, a.host_net)))
            assert s.loads.host == (shares if a.host_ok[hi] else None)
            vms = on[a.vm_ok[on]]
            assert out.loaded[out.loaded_cut[hi] : out.loaded_cut[hi + 1]].tolist() == vms.tolist()
            want = [(names[i], LoadShares(a.vm_cpu[i], a.vm_mem[i], a.vm_net[i])) for i in vms]
            assert want == list(s.loads.vms.items())
        assert "nowhere" not in out
        for s in out.values():
            f = s.factors
            assert isinstance(f, HostFactors)
            late.append((f, dict(HostFactors(*f._args))))  # the same period, read now
            if s.loads is not None and s.loads.previous:
                v = s.loads.vms
                assert isinstance(v, HostLoads)
                late.append((v, dict(HostLoads(*v._args))))
        return out

    sensing.sense = spy  # type: ignore[method-assign,assignment]
    world.run_until(scn.duration)
    assert len(late) > 20 and any(now for _, now in late)
    assert any(isinstance(f, HostLoads) and now for f, now in late)
    for f, now in late:
        assert dict(f) == now and len(f) == len(now)
        assert pickle.loads(pickle.dumps(f)) == now
