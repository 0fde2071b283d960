"""The VF scheduling (policy/vfkernel.py, the compiled core's) against its readable form
(tests/vfsched_oracle.py's schedule):
every host of a random heterogeneous cluster scheduled at once must decide what each host
scheduled alone decides (holders, ranking, queues, reasons in the same order)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.vfsched_oracle import schedule

from sova.policy.vfkernel import Decisions, VFRows, schedule_hosts, schedule_one
from sova.policy.vfsched import Candidate, VFDecision, VFSchedulerConfig

# scores from a small set make exact ties and tolerance-group edges common; the
# floats make the rest arbitrary
score = st.one_of(st.sampled_from([0.0, 10.0, 40.0, 62.0, 65.0, 100.0]), st.floats(0, 100))

vm_st = st.tuples(
    score,  # io
    score,  # net
    st.booleans(),  # traffic
    st.booleans(),  # eligible
    st.booleans(),  # holder
    st.sampled_from([0.0, 30.0, 45.0, 59.9, 60.0]),  # since (now = 60)
    # demand estimates at, around and far above virtio_lossless (100 Mbit/s), equal ones for
    # ties, and ones whose gains differ by about what two blips cost
    st.one_of(st.sampled_from([0.0, 5e6, 100e6, 110e6, 1e9, 1.2e9, 3e9]), st.floats(0, 5e9)),
)

config_st = st.builds(
    VFSchedulerConfig,
    io_filter=st.sampled_from(["threshold", "top-q"]),
    io_threshold=st.sampled_from([0.0, 40.0, 62.0, 65.0]),
    top_q=st.integers(0, 4),
    tolerance=st.sampled_from([0.0, 0.1, 0.25, 1.0]),
    hysteresis=st.sampled_from([0.0, 0.05, 0.5]),
    min_dwell_s=st.sampled_from([0.0, 15.0, 30.0]),
    top_senders=st.booleans(),
    cost_benefit=st.booleans(),
    benefit_margin=st.sampled_from([0.0, 1.0]),
    horizon=st.sampled_from([10.0, 60.0]),
)

cluster_st = st.lists(
    st.tuples(st.integers(0, 6), st.lists(vm_st, max_size=10)),  # (VFs, VMs) per host
    min_size=1,
    max_size=8,
)

NOW = 60.0


def _hosts(
    cluster: list[tuple[int, list[Any]]], seed: int
) -> list[tuple[int, list[Candidate], dict[str, float]]]:
    """Each host's (VFs, candidates, holders); names shuffled so that name order differs
    from row order (the kernel breaks ties by name, as the specification does)."""
    total = sum(len(vms) for _, vms in cluster)
    labels = [f"vm{k}" for k in np.random.default_rng(seed).permutation(total).tolist()]
    out = []
    for vfs, vms in cluster:
        cands, holders = [], {}
        for io, net, traffic, eligible, holder, since, demand in vms:
            name = labels.pop()
            cands.append(Candidate(name, io, net, traffic, eligible, demand))
            if holder:
                holders[name] = since
        out.append((vfs, cands, holders))
    return out


def _same(got: VFDecision, want: VFDecision) -> None:
    assert got.pq == want.pq
    assert got.gq == want.gq
    assert got.ranking == want.ranking
    assert list(got.reasons.items()) == list(want.reasons.items())


@settings(max_examples=400, deadline=None)
@given(cluster_st, config_st, st.integers(0, 2**16))
def test_all_hosts_at_once_decide_as_each_host_alone(
    cluster: list[tuple[int, list[Any]]], config: VFSchedulerConfig, seed: int
) -> None:
    hosts = _hosts(cluster, seed)
    names = [c.vm for _, cands, _ in hosts for c in cands]
    host = np.array([h for h, (_, cands, _) in enumerate(hosts) for _ in cands], dtype=np.int64)
    order = sorted(range(len(names)), key=names.__getitem__)
    name_rank = np.empty(len(names), dtype=np.int64)
    name_rank[order] = np.arange(len(names))
    every = [(c, holders) for _, cands, holders in hosts for c in cands]
    rows = VFRows(
        host=host,
        name_rank=name_rank,
        io_score=np.array([c.io_score for c, _ in every], dtype=float),
        net_score=np.array([c.net_score for c, _ in every], dtype=float),
        has_traffic=np.array([c.has_traffic for c, _ in every], dtype=bool),
        eligible=np.array([c.eligible for c, _ in every], dtype=bool),
        holder=np.array([c.vm in h for c, h in every], dtype=bool),
        since=np.array([h.get(c.vm, NOW) for c, h in every], dtype=float),
        demand=np.array([c.demand_bps for c, _ in every], dtype=float),
    )
    vfs = np.array([v for v, _, _ in hosts], dtype=np.int64)
    result = schedule_hosts(rows, vfs, NOW, config)
    ranked_host = host[result.ranked].tolist()
    ranked = result.ranked.tolist()
    decisions = Decisions(names, rows, result, config)
    for h, (v, cands, holders) in enumerate(hosts):
        members = np.flatnonzero(host == h).tolist()
        ranking = [i for i, hh in zip(ranked, ranked_host, strict=True) if hh == h]
        got = decisions.of(members, ranking, v)
        _same(got, schedule(cands, holders, v, NOW, config))
    # some of the hosts' decisions at once, as a world asks for them (of_hosts: each
    # host's lists are slices of lists over all hosts) are each host's alone
    m_cut = np.searchsorted(host, np.arange(len(hosts) + 1)).tolist()
    r_cut = np.searchsorted(host[result.ranked], np.arange(len(hosts) + 1)).tolist()
    pick = [h for h in range(len(hosts)) if (seed >> h) & 1]
    many = decisions.of_hosts(range(len(names)), m_cut, ranked, r_cut, vfs.tolist(), pick)
    for h, got in zip(pick, many, strict=True):
        v, cands, holders = hosts[h]
        _same(got, schedule(cands, holders, v, NOW, config))
        assert got == decisions.of(
            range(m_cut[h], m_cut[h + 1]), ranked[r_cut[h] : r_cut[h + 1]], v
        )
    # a settled host's agent takes only its PQ and ranking (Decisions.queue): the
    # specification's for each host, picked or not
    rest = [h for h in range(len(hosts)) if h not in pick]
    for h in rest:
        pq, ranking = decisions.queue(ranked[r_cut[h] : r_cut[h + 1]])
        v, cands, holders = hosts[h]
        want = schedule(cands, holders, v, NOW, config)
        assert (pq, ranking) == (want.pq, want.ranking)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 6), st.lists(vm_st, max_size=12), config_st, st.integers(0, 2**16))
def test_one_host_is_the_specification(
    vfs: int, vms: list[Any], config: VFSchedulerConfig, seed: int
) -> None:
    ((_, cands, holders),) = _hosts([(vfs, vms)], seed)
    _same(
        schedule_one(cands, holders, vfs, NOW, config), schedule(cands, holders, vfs, NOW, config)
    )


def test_dwell_beyond_the_pool_is_named() -> None:
    # 1 VF; b holds it since 50 s (dwell 30 s at 60 s: protected) but ranks second:
    # b keeps the VF and its reason says so (rank 2 >= 1 VF)
    cands = [Candidate("a", 100.0, 90.0, True), Candidate("b", 100.0, 10.0, True)]
    conf = VFSchedulerConfig(io_threshold=0.0, tolerance=0.0, hysteresis=0.0, min_dwell_s=30.0)
    d = schedule_one(cands, {"b": 50.0}, 1, NOW, conf)
    assert d.pq == ("b",)
    assert d.reasons["b"] == "rank 2 of 2 (dwell)"
    assert d.reasons["a"] == "rank 1 of 2, below the 1 VFs"


def test_negative_vf_count_is_refused() -> None:
    with pytest.raises(ValueError, match="vf_count must be >= 0, got -1"):
        schedule_one([], {}, -1, NOW, VFSchedulerConfig())


def test_the_holders_boost_counts_in_the_io_tie_break() -> None:
    # a holds the VF: net 50 x 1.05 = 52.5, b's 50 >= 52.5 / 1.1 = 47.7, one group; then
    # by I/O: a 100 x 1.05 = 105 > b 104, so a stays first (unboosted, b would win)
    cands = [Candidate("a", 100.0, 50.0, True), Candidate("b", 104.0, 50.0, True)]
    conf = VFSchedulerConfig(io_threshold=0.0, tolerance=0.1, hysteresis=0.05, min_dwell_s=0.0)
    d = schedule_one(cands, {"a": 0.0}, 1, NOW, conf)
    _same(d, schedule(cands, {"a": 0.0}, 1, NOW, conf))
    assert d.ranking == ("a", "b")
    assert d.pq == ("a",)
