"""The vectorised planning round returns exactly what ``coordinate`` returns."""

from __future__ import annotations

import random

import pytest

from sova.manager.decisions.fastplan import FAST_MIN_HOSTS, fast_coordinate
from sova.policy.hotspot import (
    HostCapacity,
    HostReport,
    HotspotDetector,
    MoveCost,
    Utilisation,
    VMLoad,
    coordinate,
)


def _cluster(
    seed: int, hosts: int, capacities: bool = False
) -> tuple[dict[str, HostReport], set[str], dict[str, list[str]]]:
    rng = random.Random(seed)
    hot_share = rng.choice((0.0, 0.005, 0.05, 0.3))
    reports = {}
    for i in range(hosts):
        n_obs = rng.choice((0, 1, 2, 3, 5, 5, 5, 5))
        hot = rng.random() < hot_share
        hist = []
        for _ in range(n_obs):
            if rng.random() < 0.05:  # constant windows, exact alpha values
                u = Utilisation(0.75, 0.75, 0.75)
            else:
                base = rng.uniform(0.7, 1.0) if hot else rng.uniform(0.0, 0.8)
                u = Utilisation(rng.uniform(0, 0.9), rng.uniform(0, 0.9), base)
            hist.append(u)
        vms = {
            f"vm{i}-{j}": VMLoad(
                Utilisation(rng.uniform(0, 0.3), rng.uniform(0, 0.3), rng.uniform(0, 0.4)),
                rng.choice((1, 2, 8)) * 2**30,
                migrating=rng.random() < 0.05,
            )
            for j in range(rng.randint(0, 5))
        }
        cap = None
        if capacities:  # a fleet of three generations: a VM takes 1/4x to 4x the share
            cap = rng.choice(
                (HostCapacity(16, 64, 10), HostCapacity(32, 256, 25), HostCapacity(64, 512, 40))
            )
        reports[f"h{i:04d}"] = HostReport(tuple(hist), vms, cap)
    names = sorted(reports)
    leased = set(rng.sample(names, k=min(len(names), rng.randint(0, 10))))
    barred = {f"vm{i}-0": rng.sample(names, k=3) for i in range(0, hosts, 7)}
    return reports, leased, barred


@pytest.mark.parametrize("capacities", [False, True], ids=["equal-hosts", "heterogeneous"])
@pytest.mark.parametrize("seed", range(40))
def test_fast_round_equals_coordinate(seed: int, capacities: bool) -> None:
    reports, leased, barred = _cluster(seed, FAST_MIN_HOSTS + seed * 25, capacities)
    det = HotspotDetector(3, 5, 0.75)
    for metric in ("volume", "skewness"):
        for ceiling in (None, 0.9):
            kw = {"metric": metric, "ceiling": ceiling, "leased": leased, "barred": barred}
            assert fast_coordinate(reports, det, **kw) == coordinate(reports, det, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(15))
def test_fast_round_equals_coordinate_with_the_relief_rule_and_kept_proposals(seed: int) -> None:
    """The relief rule (more than one mover tried) and kept proposals (a target anywhere in
    the ranking, the coldest or a busy one) do not break the fast round's exactness."""
    reports, leased, barred = _cluster(seed, FAST_MIN_HOSTS + seed * 25)
    rng = random.Random(seed)
    names = sorted(reports)
    prefer = {
        h: (rng.choice(sorted(rep.vms)), rng.choice(names))
        for h, rep in reports.items()
        if rep.vms and rng.random() < 0.3
    }
    det = HotspotDetector(3, 5, 0.75)
    for cost in (MoveCost(), MoveCost(min_relief=0.1, tries=3)):
        kw = {"leased": leased, "barred": barred, "cost": cost, "prefer": prefer}
        assert fast_coordinate(reports, det, **kw) == coordinate(reports, det, **kw)  # type: ignore[arg-type]


def test_a_round_planned_in_a_child_process_changes_the_core_exactly_like_plan() -> None:
    import copy

    from sova.manager.daemons.service.service import plan_in_child
    from sova.manager.decisions.core import Lease, ManagerCore

    reports, _, _ = _cluster(3, 400)
    core = ManagerCore(
        detector=HotspotDetector(3, 5, 0.75),
        restart_window_after_migration=True,
        return_tabu_s=600.0,
        stale_after_s=30.0,
        keep_log=False,
    )
    for k in range(5):
        for h, rep in reports.items():
            if rep.history and not (h.endswith("7") and k > 1):  # some go stale
                core.ingest(h, rep.history[k % len(rep.history)], rep.vms, at=10.0 * k)
    names = sorted(reports)
    core.restore(
        [
            Lease("gone", "h0007", names[1], 0.0),  # its source is stale
            Lease("old", names[2], names[3], -1000.0),  # timed out
        ]
    )
    twin = copy.deepcopy(core)
    direct = core.plan(50.0)
    forked = plan_in_child(twin, 50.0)
    assert twin.leases == {
        "gone": Lease("gone", "h0007", names[1], 0.0),
        "old": Lease("old", names[2], names[3], -1000.0),
    }  # the child's changes stay in the child
    twin.apply_round(forked)
    assert forked == direct
    assert direct.opened and {e.why for e in direct.closed} == {"stale", "timeout"}
    assert twin.leases == core.leases and twin.departed == core.departed
    assert {h: list(w) for h, w in twin.history.items()} == {
        h: list(w) for h, w in core.history.items()
    }
    assert twin._skip == core._skip
