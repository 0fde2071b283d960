"""DSR-IOV VF scheduling (docs/design.md#vf-scheduling): I/O filter, tolerance ranking, PQ with hysteresis and dwell."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests import vfsched_oracle
from tests.vfsched_oracle import io_filter, rank

from sova.policy.vfkernel import schedule_one
from sova.policy.vfsched import Candidate, VFDecision, VFSchedulerConfig


def c(
    vm: str, net: float, io: float = 100.0, traffic: bool = True, eligible: bool = True
) -> Candidate:
    return Candidate(vm=vm, io_score=io, net_score=net, has_traffic=traffic, eligible=eligible)


def schedule(
    candidates: list[Candidate],
    holders: dict[str, float],
    vf_count: int,
    now_s: float,
    config: VFSchedulerConfig,
) -> VFDecision:
    """The compiled scheduler (``schedule_one``), held on every call to the readable form
    (tests/vfsched_oracle.py): the same queues, ranking and reasons, in the same order."""
    want = vfsched_oracle.schedule(candidates, holders, vf_count, now_s, config)
    got = schedule_one(candidates, holders, vf_count, now_s, config)
    assert (got.pq, got.gq, got.ranking) == (want.pq, want.gq, want.ranking)
    assert list(got.reasons.items()) == list(want.reasons.items())
    return got


# no hysteresis, no dwell, no tolerance unless a test asks for it
PLAIN = VFSchedulerConfig(io_threshold=0.0, tolerance=0.0, hysteresis=0.0, min_dwell_s=0.0)


def cfg(**kw: Any) -> VFSchedulerConfig:
    base: dict[str, Any] = {
        "io_threshold": 0.0,
        "tolerance": 0.0,
        "hysteresis": 0.0,
        "min_dwell_s": 0.0,
    }
    base.update(kw)
    return VFSchedulerConfig(**base)


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "kw", [{"tolerance": -0.1}, {"hysteresis": -0.01}, {"min_dwell_s": -1.0}, {"top_q": -1}]
)
def test_config_rejects_negative(kw: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        VFSchedulerConfig(**kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- io_filter


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        # θ_io = 65: keeps io ≥ 65 (65 itself included), drops 64.99 and 10
        (VFSchedulerConfig(io_threshold=65.0), {"a", "b", "d"}),
        (VFSchedulerConfig(io_threshold=0.0), {"a", "b", "c", "d", "e"}),
        (VFSchedulerConfig(io_threshold=100.1), set()),
        # top-q by io score (a 90, d 80, b 65, c 64.99, e 10): q = 2 -> a, d; q = 3 adds b
        (VFSchedulerConfig(io_filter="top-q", top_q=2), {"a", "d"}),
        (VFSchedulerConfig(io_filter="top-q", top_q=3), {"a", "d", "b"}),
        # top_q = 0 means all VMs; q larger than the host keeps everyone
        (VFSchedulerConfig(io_filter="top-q", top_q=0), {"a", "b", "c", "d", "e"}),
        (VFSchedulerConfig(io_filter="top-q", top_q=99), {"a", "b", "c", "d", "e"}),
    ],
)
def test_io_filter(config: VFSchedulerConfig, expected: set[str]) -> None:
    pool = [c("a", 1, io=90), c("b", 1, io=65), c("c", 1, io=64.99), c("d", 1, io=80)]
    pool.append(c("e", 1, io=10))
    assert {x.vm for x in io_filter(pool, config)} == expected


def test_io_filter_top_q_ties_by_name() -> None:
    # three VMs at io 50: q = 2 keeps the two first names
    pool = [c("z", 1, io=50), c("m", 1, io=50), c("a", 1, io=50)]
    conf = VFSchedulerConfig(io_filter="top-q", top_q=2)
    assert [x.vm for x in io_filter(pool, conf)] == ["a", "m"]


# --------------------------------------------------------------------------- rank


@pytest.mark.parametrize(
    ("cands", "tolerance", "expected"),
    [
        # tolerance 0: plain net order
        ([c("a", 1.0), c("b", 3.0), c("c", 2.0)], 0.0, ["b", "c", "a"]),
        # tolerance 0.10: b 3.0 leads, threshold 3.0/1.1 = 2.727; c 2.8 joins and has the
        # higher io (90 > 50) so it goes first; a 1.0 is its own group
        ([c("a", 1.0), c("b", 3.0, io=50), c("c", 2.8, io=90)], 0.10, ["c", "b", "a"]),
        # same but c 2.7 < 2.727: separate groups, net order wins over io
        ([c("a", 1.0), c("b", 3.0, io=50), c("c", 2.7, io=90)], 0.10, ["b", "c", "a"]),
        # exactly on the boundary: 2.75·1.1 = 3.025 leader, 3.025/1.1 = 2.75 -> joins
        ([c("b", 3.025, io=50), c("c", 2.75, io=90)], 0.10, ["c", "b"]),
        # same net and io: names decide
        ([c("y", 2.0), c("x", 2.0), c("z", 2.0)], 0.0, ["x", "y", "z"]),
        # within a group equal io: names decide, whatever the net order inside the group
        ([c("b", 2.0), c("a", 1.95)], 0.10, ["a", "b"]),
        # DSR-IOV Table 3 at 20 min: VM3 (hybrid, io 70) vs VM4 (pure, io 100) at net 300
        ([c("VM3", 300, io=70), c("VM4", 300, io=100)], 0.25, ["VM4", "VM3"]),
        ([], 0.1, []),
    ],
)
def test_rank_tolerance_groups(
    cands: list[Candidate], tolerance: float, expected: list[str]
) -> None:
    assert rank(cands, tolerance) == expected


def test_rank_non_transitive_chain_is_grouped_from_the_leader() -> None:
    # tolerance 0.10. Pairwise: a~b (1.0 vs 0.92: 1.0/1.1 = 0.909 ≤ 0.92) and
    # b~c (0.92/1.1 = 0.836 ≤ 0.84) but not a~c (0.84 < 0.909): not transitive.
    # Greedy from the leader a: threshold 0.909 -> group {a, b}; c starts a new group.
    # c has the highest io but cannot jump over a or b; inside {a, b} b's io wins.
    cands = [c("a", 1.0, io=10), c("b", 0.92, io=50), c("c", 0.84, io=99)]
    expected = ["b", "a", "c"]
    assert rank(cands, 0.10) == expected
    # deterministic whatever the input order
    for perm in ([2, 1, 0], [1, 2, 0], [0, 2, 1]):
        assert rank([cands[i] for i in perm], 0.10) == expected


def test_rank_boost_multiplies_both_scores() -> None:
    # b 1.0·1.05 = 1.05 overtakes a 1.04 (tolerance 0)
    cands = [c("a", 1.04), c("b", 1.0)]
    assert rank(cands, 0.0) == ["a", "b"]
    assert rank(cands, 0.0, boost={"b": 1.05}) == ["b", "a"]
    # with equal nets in one group the io score is boosted too: b io 96·1.05 = 100.8 > 100
    cands = [c("a", 1.0, io=100), c("b", 1.0, io=96)]
    assert rank(cands, 0.0) == ["a", "b"]
    assert rank(cands, 0.0, boost={"b": 1.05}) == ["b", "a"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 100)), min_size=0, max_size=8).map(
        lambda xs: [c(f"vm{i}", n, io=io) for i, (n, io) in enumerate(xs)]
    ),
    st.floats(0, 1),
    st.randoms(use_true_random=False),
)
def test_rank_is_a_deterministic_permutation(
    cands: list[Candidate], tolerance: float, rnd: object
) -> None:
    ordered = rank(cands, tolerance)
    assert sorted(ordered) == sorted(x.vm for x in cands)
    shuffled = list(cands)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert rank(shuffled, tolerance) == ordered
    # a VM is never ranked above one whose net exceeds its own by more than the tolerance
    net = {x.vm: x.net_score for x in cands}
    for i, hi in enumerate(ordered):
        for lo in ordered[i + 1 :]:
            assert net[lo] <= net[hi] * (1 + tolerance) + 1e-9


# --------------------------------------------------------------------------- schedule


def test_schedule_top_p_and_reasons() -> None:
    # nets 5 > 4 > 3 > 2, 2 VFs -> a, b; c, d on virtio; e has no traffic; f is CPU-bound
    cands = [
        c("a", 5),
        c("b", 4),
        c("c", 3),
        c("d", 2),
        c("e", 9, traffic=False),
        c("f", 9, io=30),
        c("g", 9, eligible=False),
    ]
    d = schedule(cands, {}, 2, 0.0, cfg(io_threshold=50.0))
    assert d.pq == ("a", "b")
    assert d.gq == ("c", "d", "e", "f", "g")
    assert d.ranking == ("a", "b", "c", "d")
    assert d.reasons["a"] == "rank 1 of 4"
    assert d.reasons["c"] == "rank 3 of 4, below the 2 VFs"
    assert d.reasons["e"] == "no traffic in window"
    assert d.reasons["f"].startswith("filtered: io_degree=30.00")
    assert d.reasons["g"].startswith("ineligible")
    assert set(d.reasons) == {x.vm for x in cands}


@pytest.mark.parametrize(
    ("vf_count", "pq"),
    [(0, ()), (1, ("a",)), (2, ("a", "b")), (3, ("a", "b", "c")), (10, ("a", "b", "c"))],
)
def test_schedule_p_vfs(vf_count: int, pq: tuple[str, ...]) -> None:
    cands = [c("c", 1), c("a", 3), c("b", 2), c("idle", 5, traffic=False)]
    d = schedule(cands, {}, vf_count, 0.0, PLAIN)
    assert d.pq == pq
    assert "idle" not in d.pq and "idle" in d.gq


def test_schedule_vf_count_zero_revokes_even_dwelling_holder() -> None:
    d = schedule([c("a", 3)], {"a": 99.0}, 0, 100.0, cfg(min_dwell_s=60.0))
    assert d.pq == () and d.gq == ("a",)


def test_schedule_negative_vf_count_raises() -> None:
    with pytest.raises(ValueError, match="vf_count"):
        schedule([c("a", 1)], {}, -1, 0.0, PLAIN)


def test_schedule_no_traffic_excludes_even_a_holder() -> None:
    # a holds the VF (long ago) but sent nothing during the window -> b gets it
    d = schedule([c("a", 9, traffic=False), c("b", 1)], {"a": 0.0}, 1, 1000.0, cfg())
    assert d.pq == ("b",)


@pytest.mark.parametrize("since", [0.0, 95.0, 99.999])
def test_schedule_ineligible_holder_loses_vf_at_once(since: float) -> None:
    # a holds the VF with 60 s dwell; at t=100 it is 100−since s old (even 0.001 s):
    # ineligible (migrating / no backup) -> revoked regardless of dwell, best score, boost
    cands = [c("a", 100, eligible=False), c("b", 1)]
    d = schedule(cands, {"a": since}, 1, 100.0, cfg(min_dwell_s=60.0, hysteresis=0.5))
    assert d.pq == ("b",)
    assert "a" in d.gq and "a" not in d.ranking
    assert d.reasons["a"].startswith("ineligible")


@pytest.mark.parametrize(
    ("challenger_net", "winner"),
    [
        # incumbent a: net 1.00·1.05 = 1.05 (hysteresis 5 %), tolerance 0
        (1.00, "a"),  # equal: boost keeps a
        (1.04, "a"),  # 1.04 < 1.05: slightly better challenger does not take it
        (1.06, "b"),  # 1.06 > 1.05: clearly better, takes it
        (1.50, "b"),
    ],
)
def test_schedule_hysteresis(challenger_net: float, winner: str) -> None:
    cands = [c("a", 1.00), c("b", challenger_net)]
    d = schedule(cands, {"a": 0.0}, 1, 1000.0, cfg(hysteresis=0.05))
    assert d.pq == (winner,)


def test_schedule_hysteresis_with_tolerance() -> None:
    # tolerance 0.10, hysteresis 0.05, equal io: incumbent a 1.0 -> 1.05 (io 105).
    # b 1.15: threshold 1.15/1.1 = 1.045 ≤ 1.05 -> one group, a's boosted io wins -> a keeps.
    # b 1.20: threshold 1.20/1.1 = 1.091 > 1.05 -> b alone ahead -> b.
    # Without the boost b 1.12 already wins (1.12/1.1 = 1.018 > 1.0 -> separate groups).
    conf = cfg(tolerance=0.10, hysteresis=0.05)
    assert schedule([c("a", 1.0), c("b", 1.15)], {"a": 0.0}, 1, 1e3, conf).pq == ("a",)
    assert schedule([c("a", 1.0), c("b", 1.20)], {"a": 0.0}, 1, 1e3, conf).pq == ("b",)
    nohyst = cfg(tolerance=0.10)
    assert schedule([c("a", 1.0), c("b", 1.12)], {"a": 0.0}, 1, 1e3, nohyst).pq == ("b",)


@pytest.mark.parametrize(
    ("now", "holder"),
    [
        # a got its VF at t=100, dwell 30 s: protected while now − 100 < 30
        (100.0, "a"),
        (129.9, "a"),
        (130.0, "b"),  # 30 s elapsed: dwell over, the much better b takes it
        (500.0, "b"),
    ],
)
def test_schedule_min_dwell(now: float, holder: str) -> None:
    cands = [c("a", 1.0), c("b", 10.0)]
    d = schedule(cands, {"a": 100.0}, 1, now, cfg(min_dwell_s=30.0))
    assert d.pq == (holder,)
    if holder == "a":
        # a is 2nd of 2 but keeps the VF because of the dwell
        assert d.reasons["a"] == "rank 2 of 2 (dwell)"
        assert d.reasons["b"] == "rank 1 of 2, below the 1 VFs"
        assert d.ranking == ("b", "a")


def test_schedule_dwell_fills_remaining_vfs_by_rank() -> None:
    # 2 VFs: c dwells (rank 3) and keeps one; the other goes to the best, a; pq in rank order
    cands = [c("a", 9), c("b", 8), c("c", 1)]
    d = schedule(cands, {"c": 95.0}, 2, 100.0, cfg(min_dwell_s=30.0))
    assert d.pq == ("a", "c")
    assert d.gq == ("b",)


def test_schedule_more_dwelling_holders_than_vfs() -> None:
    # the pool shrank to 1 while a and b both dwell: the better-ranked dwelling one keeps it
    cands = [c("a", 2), c("b", 3), c("x", 9)]
    d = schedule(cands, {"a": 99.0, "b": 99.0}, 1, 100.0, cfg(min_dwell_s=30.0))
    assert d.pq == ("b",)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 100), st.floats(0, 100), st.booleans(), st.booleans()),
        max_size=8,
    ),
    st.integers(0, 5),
    st.sets(st.integers(0, 7)),
    st.floats(0, 100),
)
def test_schedule_invariants(
    raw: list[tuple[float, float, bool, bool]], p: int, held: set[int], dwell: float
) -> None:
    cands = [c(f"vm{i}", n, io=io, traffic=t, eligible=e) for i, (n, io, t, e) in enumerate(raw)]
    holders = {f"vm{i}": 50.0 for i in held if i < len(cands)}
    conf = cfg(io_threshold=40.0, tolerance=0.1, hysteresis=0.05, min_dwell_s=dwell)
    d = schedule(cands, holders, p, 60.0, conf)
    # A holder's I/O score counts (1 + hysteresis) times in the filter too: 40 / 1.05 = 38.1.
    ok = {
        x.vm
        for x in cands
        if x.eligible and x.has_traffic and x.io_score * (1.05 if x.vm in holders else 1.0) >= 40.0
    }
    assert set(d.pq) <= ok
    assert len(d.pq) == min(p, len(ok))
    assert set(d.pq) | set(d.gq) == {x.vm for x in cands}
    assert not set(d.pq) & set(d.gq)
    assert set(d.ranking) == ok
    assert set(d.reasons) == {x.vm for x in cands}


# --------------------------------------------------------------------------- DSR-IOV Table 3


# One host, 8 VMs, 4 VFs; the load changes every 10 min (paper Table 3). Scores as the
# sensing layer would give them: io_degree = 100·(1 − cpu share); net score proportional
# to the share of time netperf runs (net share × 1000, e.g. net_degree in arbitrary kB/s).
# Config as scenarios/dsr-iov-table3.yaml: θ_io = 62, tolerance 0.25, hysteresis 0.05,
# dwell 30 s. Each phase is decided with the holders of the phase before, 10 min later.
TABLE3_CONFIG = VFSchedulerConfig(
    io_threshold=62.0, tolerance=0.25, hysteresis=0.05, min_dwell_s=30.0
)

#            (net share, cpu share) per VM
TABLE3_LOADS: list[dict[str, tuple[float, float]]] = [
    # 0 min
    {
        "VM1": (0.55, 0),
        "VM2": (0, 0.40),
        "VM3": (0.30, 0.30),
        "VM4": (0.20, 0),
        "VM5": (0.40, 0),
        "VM6": (0.60, 0),
        "VM7": (0.80, 0),
        "VM8": (1.00, 0),
    },
    # 10 min: VM7 and VM8 turn CPU-only
    {
        "VM1": (0.55, 0),
        "VM2": (0, 0.40),
        "VM3": (0.30, 0.30),
        "VM4": (0.20, 0),
        "VM5": (0.40, 0),
        "VM6": (0.60, 0),
        "VM7": (0, 0.20),
        "VM8": (0, 0.40),
    },
    # 20 min: VM4 rises to 30 % netperf, same net as hybrid VM3
    {
        "VM1": (0.55, 0),
        "VM2": (0, 0.40),
        "VM3": (0.30, 0.30),
        "VM4": (0.30, 0),
        "VM5": (0.40, 0),
        "VM6": (0.60, 0),
        "VM7": (0, 0.20),
        "VM8": (0, 0.40),
    },
    # 30 min: VM7 and VM8 become hybrids again
    {
        "VM1": (0.55, 0),
        "VM2": (0, 0.40),
        "VM3": (0.30, 0.30),
        "VM4": (0.30, 0),
        "VM5": (0.40, 0),
        "VM6": (0.60, 0),
        "VM7": (0.20, 0.20),
        "VM8": (0.40, 0.40),
    },
]

TABLE3_HOLDERS = [
    {"VM1", "VM6", "VM7", "VM8"},
    {"VM1", "VM3", "VM5", "VM6"},
    {"VM1", "VM4", "VM5", "VM6"},
    {"VM1", "VM4", "VM5", "VM6"},
]


def table3_candidates(loads: dict[str, tuple[float, float]]) -> list[Candidate]:
    return [
        Candidate(
            vm=vm,
            io_score=100.0 * (1.0 - cpu),
            net_score=1000.0 * net,
            has_traffic=net > 0,
        )
        for vm, (net, cpu) in loads.items()
    ]


def run_table3(config: VFSchedulerConfig) -> list[set[str]]:
    holders: dict[str, float] = {}
    out = []
    for phase, loads in enumerate(TABLE3_LOADS):
        now = 600.0 * phase
        d = schedule(table3_candidates(loads), holders, 4, now, config)
        holders = {vm: holders.get(vm, now) for vm in d.pq}
        out.append(set(d.pq))
    return out


@pytest.mark.parametrize("phase", range(4))
def test_dsr_iov_table3_phase(phase: int) -> None:
    # 0-10:  nets 1000, 800 | 600, 550 | 400 | 300 | 200 -> groups of 0.25 from each leader
    #        (1000/1.25 = 800: VM7 joins VM8) -> VM7, VM8, VM1, VM6
    # 10-20: VM7, VM8 idle on the net. Boosted holders VM6 630, VM1 577.5 | VM5 400 |
    #        VM3 300 (< 400/1.25 = 320) | VM4 200 -> VM1, VM3, VM5, VM6
    # 20-30: VM3 300·1.05 = 315 (io 73.5) and VM4 300 (io 100): 315/1.25 = 252 ≤ 300 ->
    #        same group; VM4's higher io wins -> VM1, VM4, VM5, VM6
    # 30-40: VM8 net 400 would tie VM5 but io 60 < θ_io 62 -> filtered; VM7 200 too low
    assert run_table3(TABLE3_CONFIG)[phase] == TABLE3_HOLDERS[phase]


def test_dsr_iov_table3_tie_and_filter_details() -> None:
    holders = {"VM1": 600.0, "VM3": 600.0, "VM5": 600.0, "VM6": 600.0}
    d20 = schedule(table3_candidates(TABLE3_LOADS[2]), holders, 4, 1200.0, TABLE3_CONFIG)
    # VM4 ahead of VM3 although VM3 is the incumbent with a boost
    assert d20.ranking.index("VM4") < d20.ranking.index("VM3")
    holders = {"VM1": 0.0, "VM4": 1200.0, "VM5": 600.0, "VM6": 0.0}
    d30 = schedule(table3_candidates(TABLE3_LOADS[3]), holders, 4, 1800.0, TABLE3_CONFIG)
    assert "VM8" not in d30.ranking
    assert d30.reasons["VM8"] == "filtered: io_degree=60.00"
    # VM2 (40 % lookbusy: io 60) is filtered too; VM7 (io 80, net 200) passes but ranks last
    assert d30.reasons["VM2"] == "filtered: io_degree=60.00"
    assert d30.ranking[-1] == "VM7"
    assert d30.reasons["VM7"] == "rank 6 of 6, below the 4 VFs"
    # without the I/O filter VM8 (400, same group as VM5 420) would displace VM4
    no_filter = VFSchedulerConfig(
        io_threshold=0.0, tolerance=0.25, hysteresis=0.05, min_dwell_s=30.0
    )
    d = schedule(table3_candidates(TABLE3_LOADS[3]), holders, 4, 1800.0, no_filter)
    assert set(d.pq) == {"VM1", "VM5", "VM6", "VM8"}


def test_dsr_iov_table3_needs_the_tolerance_tie_break() -> None:
    # with tolerance 0 the hybrid incumbent VM3 (315 boosted) beats VM4 (300) at 20 min
    strict = VFSchedulerConfig(io_threshold=62.0, tolerance=0.0, hysteresis=0.05)
    assert run_table3(strict)[2] == {"VM1", "VM3", "VM5", "VM6"}


def test_holder_at_the_io_threshold_keeps_its_vf() -> None:
    """A holder whose io_degree sags just under θ keeps its VF; a newcomer there does not get one.

    θ = 62, hysteresis 0.05: a holder passes down to 62 / 1.05 = 59.05; a non-holder needs 62.
    """
    conf = cfg(io_threshold=62.0, tolerance=0.25, hysteresis=0.05, min_dwell_s=0.0)
    sagging = [c("vm1", 100.0, io=60.0), c("vm2", 10.0, io=95.0)]
    assert schedule(sagging, {"vm1": 0.0}, 1, 100.0, conf).pq == ("vm1",)
    assert schedule(sagging, {}, 1, 100.0, conf).pq == ("vm2",)
    gone = [c("vm1", 100.0, io=58.0), c("vm2", 10.0, io=95.0)]  # 58 * 1.05 = 60.9 < 62
    assert schedule(gone, {"vm1": 0.0}, 1, 100.0, conf).pq == ("vm2",)


# --------------------------------------------------------------------------- cost and benefit

PAYING = VFSchedulerConfig(
    tolerance=0.0, hysteresis=0.0, min_dwell_s=0.0, top_senders=True, cost_benefit=True
)


def _c(vm: str, demand: float, io: float = 90.0) -> Candidate:
    # net score = demand in Mbit/s, so the ranking follows demand
    return Candidate(vm, io, demand / 1e6, True, True, demand)


@pytest.mark.parametrize("schedule_fn", [schedule, schedule_one])
def test_a_vm_virtio_serves_gets_no_vf_even_a_free_one(schedule_fn: Any) -> None:
    # 2 free VFs; a sends 5 Mbit/s (<= virtio_lossless 100 Mbit/s: not ranked), b 1 Gbit/s
    # (gain 0.9 Gbit/s x 60 s = 54 Gbit > (1 + 1) x 2 s x 1 Gbit/s = 4 Gbit: plugged)
    d = schedule_fn([_c("a", 5e6), _c("b", 1e9)], {}, 2, 100.0, PAYING)
    assert d.pq == ("b",)
    assert d.reasons["a"].startswith("virtio serves it")
    # the papers' scheduler hands a its VF
    assert schedule_fn([_c("a", 5e6), _c("b", 1e9)], {}, 2, 100.0, PAYING.papers()).pq == (
        "b",
        "a",
    )


@pytest.mark.parametrize("schedule_fn", [schedule, schedule_one])
@pytest.mark.parametrize(
    ("entrant", "swaps"),
    [
        # holder h 1.0 Gbit/s. benefit 60 x (gain_e - 0.9 G); cost 2 x 2 s x (d_e + 1.0 G)
        (1.1e9, False),  # 60 x 0.1 G = 6 G    <= 4 x 2.1 G = 8.4 G: h keeps its VF
        (1.2e9, True),  # 60 x 0.2 G = 12 G   >  4 x 2.2 G = 8.8 G
        (3.0e9, True),  # 60 x 2.0 G = 120 G  >  4 x 4.0 G = 16 G
    ],
)
def test_a_holder_is_displaced_only_when_the_move_pays(
    schedule_fn: Any, entrant: float, swaps: bool
) -> None:
    d = schedule_fn([_c("e", entrant), _c("h", 1.0e9)], {"h": 0.0}, 1, 100.0, PAYING)
    assert d.pq == (("e",) if swaps else ("h",))
    if not swaps:
        assert d.reasons["e"].endswith("a move would not pay")


@pytest.mark.parametrize("schedule_fn", [schedule, schedule_one])
def test_entrants_pair_with_the_lowest_gain_leavers_first(schedule_fn: Any) -> None:
    # 2 VFs held by a (1.0 G) and b (2.0 G); c (3.0 G) and d (2.2 G) rank above them.
    # Pairs in rank order against leavers by gain: (c, a): 60 x 2.0 G = 120 G > 4 x 4.0 G;
    # (d, b): 60 x 0.2 G = 12 G <= 4 x 4.2 G = 16.8 G, so b keeps its VF. (Paired the
    # other way, (c, b) and (d, a) would both pay.)
    cands = [_c("a", 1.0e9), _c("b", 2.0e9), _c("c", 3.0e9), _c("d", 2.2e9)]
    d = schedule_fn(cands, {"a": 0.0, "b": 0.0}, 2, 100.0, PAYING)
    assert d.pq == ("c", "b")


@pytest.mark.parametrize("schedule_fn", [schedule, schedule_one])
def test_a_vm_busy_on_cpu_and_network_keeps_its_vf_at_its_peak(schedule_fn: Any) -> None:
    # x sends 5.9 Gbit/s with io_degree 30 (CPU-busy: below the 65 threshold); y 1 Mbit/s
    # idle on CPU. The papers' filter drops x and the VF goes to y; with top_senders x is
    # among the host's 1 highest demands and keeps it.
    cands = [_c("x", 5.9e9, io=30.0), _c("y", 1e6, io=95.0)]
    papers = VFSchedulerConfig(tolerance=0.0, hysteresis=0.0, min_dwell_s=0.0)
    assert schedule_fn(cands, {"x": 0.0}, 1, 100.0, papers).pq == ("y",)
    assert schedule_fn(cands, {"x": 0.0}, 1, 100.0, PAYING).pq == ("x",)


@pytest.mark.parametrize("schedule_fn", [schedule, schedule_one])
def test_a_holder_virtio_would_serve_keeps_its_vf_until_someone_pays_for_it(
    schedule_fn: Any,
) -> None:
    # h holds the one VF and its demand fell to 50 Mbit/s (<= virtio_lossless): unplugging it
    # alone buys nothing, so it stays. e at 60 Mbit/s is served by virtio (not ranked). f at
    # 1 Gbit/s: 60 x (0.9 G - 0) = 54 G > 2 x 2 s x 1.05 G = 4.2 G: f takes the VF.
    assert schedule_fn([_c("h", 50e6), _c("e", 60e6)], {"h": 0.0}, 1, 100.0, PAYING).pq == ("h",)
    assert schedule_fn([_c("h", 50e6), _c("f", 1e9)], {"h": 0.0}, 1, 100.0, PAYING).pq == ("f",)
