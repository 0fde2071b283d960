"""The compiled cold-spot screening (``sova.policy.cold_spots.screen_round``) decides
what the per-mover walk it replaced decided (tests/coordinate_oracle.py).

``coordinate`` (the readable round: the daemons' small rounds, Watcher's plug-in, the
simulator's), the manager's round over window arrays (``coordinate_windows``) and the
one-VM screening (``choose_target``: fleet controls, an operator's move) all run the same
core; on random heterogeneous clusters (identical hosts or three generations of
capacity, a few hot or many, hosts leased, fenced, barred for a VM, last round's
proposals, movers tried one or three at a time) each must return the oracle's signals,
reasons included, and the oracle's target.
"""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tests import coordinate_oracle as oracle

from sova.manager.decisions.fastplan import coordinate_windows
from sova.policy.cold_spots import choose_target
from sova.policy.hotspot import (
    PAPERS_MOVE,
    HostCapacity,
    HostReport,
    HotspotDetector,
    MoveCost,
    Utilisation,
    VMLoad,
    coordinate,
)

GENERATIONS = (HostCapacity(16, 64, 10), HostCapacity(32, 256, 25), HostCapacity(64, 512, 40))
COSTS = (PAPERS_MOVE, MoveCost(), MoveCost(min_relief=0.1, tries=3))


def _util(rng: random.Random, hot: bool) -> Utilisation:
    r = rng.random()
    if r < 0.05:
        return Utilisation(0.75, 0.75, 0.75)  # at alpha exactly
    if r < 0.08:
        return Utilisation(0.0, 0.0, 0.0)
    if r < 0.10:
        return Utilisation(1.0, 1.04, 0.9995)  # past the volume clamp
    base = rng.uniform(0.7, 1.0) if hot else rng.uniform(0.0, 0.8)
    return Utilisation(rng.uniform(0, 0.9), rng.uniform(0, 0.9), base)


def _cluster(seed: int, hosts: int, n: int) -> tuple[dict[str, HostReport], dict[str, object]]:
    rng = random.Random(seed)
    names = [f"h{i:03d}" for i in range(hosts)]
    hot_share = rng.choice((0.0, 0.05, 0.2, 0.5))
    with_caps = rng.random() < 0.5
    reports = {}
    for i, h in enumerate(names):
        hot = rng.random() < hot_share
        history = tuple(_util(rng, hot) for _ in range(rng.randint(0, n + 1)))
        vms = {
            f"vm{i}-{j}": VMLoad(
                Utilisation(rng.uniform(0, 0.3), rng.uniform(0, 0.3), rng.uniform(0, 0.5)),
                rng.choice((1, 2, 8)) * 2**30,
                migrating=rng.random() < 0.05,
            )
            for j in range(rng.randint(0, 4))
        }
        reports[h] = HostReport(history, vms, rng.choice(GENERATIONS) if with_caps else None)
    all_vms = [(h, v) for h, rep in reports.items() for v in rep.vms]
    some = rng.sample(names, min(len(names), rng.randint(0, 3)))
    options: dict[str, object] = {
        "metric": rng.choice(("volume", "skewness")),
        "ceiling": rng.choice((None, 0.9, 0.7)),
        "leased": set(some[:1]),
        "fenced": {h: "maintenance" for h in some[1:2]},
        "barred": {
            v: set(rng.sample(names, min(len(names), rng.randint(1, 5))))
            for _, v in rng.sample(all_vms, min(len(all_vms), rng.randint(0, 6)))
        },
        "prefer": {
            h: (v, rng.choice(names))
            for h, v in rng.sample(all_vms, min(len(all_vms), rng.randint(0, 6)))
        },
        "cost": rng.choice(COSTS),
    }
    return reports, options


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), hosts=st.integers(1, 60), n=st.integers(1, 5))
def test_the_round_decides_what_the_walk_decided(seed: int, hosts: int, n: int) -> None:
    reports, options = _cluster(seed, hosts, n)
    detector = HotspotDetector(max(1, n // 2), n, 0.75)
    want = oracle.coordinate(reports, detector, **options)  # type: ignore[arg-type]
    assert coordinate(reports, detector, **options) == want  # type: ignore[arg-type]
    # the manager's round: the same hosts' windows as arrays, every observation count
    names = list(reports)
    groups = []
    last = np.zeros((len(names), 3))
    for length in sorted({len(r.history[-n:]) for r in reports.values()}):
        sel = np.array([j for j, h in enumerate(names) if len(reports[h].history[-n:]) == length])
        windows = np.array(
            [[u.as_tuple() for u in reports[names[j]].history[-n:]] for j in sel.tolist()]
        ).reshape(len(sel), length, 3)
        if length:
            last[sel] = windows[:, -1]
        groups.append((length, sel, windows))
    got = coordinate_windows(
        names, groups, last, reports.__getitem__, detector, **options  # type: ignore[arg-type]
    )
    assert dict(got) == want


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), hosts=st.integers(1, 40))
def test_one_vm_goes_where_the_walk_sent_it(seed: int, hosts: int) -> None:
    rng = random.Random(seed)
    loads = {f"h{i}": _util(rng, rng.random() < 0.2) for i in range(hosts)}
    caps = {h: rng.choice(GENERATIONS) for h in loads} if rng.random() < 0.5 else None
    src = rng.choice([*loads, "elsewhere"])
    if caps is not None:
        caps[src] = rng.choice(GENERATIONS)
    vm = VMLoad(Utilisation(rng.uniform(0, 0.4), rng.uniform(0, 0.4), rng.uniform(0, 0.6)), 1)
    taken = set(rng.sample(list(loads), min(hosts, rng.randint(0, 3))))
    kw = {"metric": rng.choice(("volume", "skewness")), "ceiling": rng.choice((None, 0.8))}
    want, _ = oracle.choose_target(loads, src, vm, 0.75, taken, capacities=caps, **kw)  # type: ignore[arg-type]
    assert choose_target(loads, src, vm, 0.75, taken, capacities=caps, **kw) == want  # type: ignore[arg-type]


def test_a_fleet_with_no_fit_is_refused_host_by_host_as_before() -> None:
    # the benchmark's shape (benchmarks/hot_round.py) at 600 hosts: every hot host walks
    # the whole ranking, its refusal lists the first 8 and counts the rest
    rng = random.Random(3)
    reports = {}
    for i in range(600):
        hot = i < 100
        net = rng.uniform(0.85, 0.95) if hot else rng.uniform(0.3, 0.6)
        vms = {f"v{i}": VMLoad(Utilisation(0.05, 0.05, 0.5 if hot else 0.02), 2**31)}
        reports[f"h{i:04d}"] = HostReport(tuple(Utilisation(0.2, 0.3, net) for _ in range(5)), vms)
    detector = HotspotDetector(3, 5, 0.75)
    got = coordinate(reports, detector)
    assert got == oracle.coordinate(reports, detector)
    refused = [s for s in got.values() if s.hot_resources and not s.flag]
    assert len(refused) == 100
    assert all(s.reason.endswith("492 more host(s) refused)") for s in refused)
