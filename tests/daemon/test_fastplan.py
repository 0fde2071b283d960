"""The vectorised planning round returns exactly what ``coordinate`` returns."""

from __future__ import annotations

import random

import pytest

from sova.manager.fastplan import FAST_MIN_HOSTS, fast_coordinate
from sova.policy.hotspot import HostReport, HotspotDetector, Utilisation, VMLoad, coordinate


def _cluster(seed: int, hosts: int) -> tuple[dict[str, HostReport], set[str], dict[str, list[str]]]:
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
        reports[f"h{i:04d}"] = HostReport(tuple(hist), vms)
    names = sorted(reports)
    leased = set(rng.sample(names, k=min(len(names), rng.randint(0, 10))))
    barred = {f"vm{i}-0": rng.sample(names, k=3) for i in range(0, hosts, 7)}
    return reports, leased, barred


@pytest.mark.parametrize("seed", range(40))
def test_fast_round_equals_coordinate(seed: int) -> None:
    reports, leased, barred = _cluster(seed, FAST_MIN_HOSTS + seed * 25)
    det = HotspotDetector(3, 5, 0.75)
    for metric in ("volume", "skewness"):
        for ceiling in (None, 0.9):
            kw = {"metric": metric, "ceiling": ceiling, "leased": leased, "barred": barred}
            assert fast_coordinate(reports, det, **kw) == coordinate(reports, det, **kw)  # type: ignore[arg-type]
