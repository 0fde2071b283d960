"""The orderings Sova Table 1 and DSR-IOV Table 2 establish, checked on a run.

Acceptance is by decisions and orderings, not by the papers' exact values (docs/design.md#sensing-acceptance): the
papers' absolute IF/NF numbers depend on XenMon's and netperf's internals, but the
orderings are what the scheduler relies on.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from sova.record import TimelineRow
from sova.scenario import ClassificationSpec

FACTORS = ("io_degree", "io_factor", "net_degree", "net_factor")


def steady_means(timeline: Sequence[TimelineRow], skip_s: float) -> dict[str, dict[str, float]]:
    """Mean of each factor per VM over the periods after the first full window."""
    acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in timeline:
        if r.time_s > skip_s:
            for f in FACTORS:
                acc[r.vm][f].append(float(getattr(r, f)))
    return {vm: {f: sum(v) / len(v) for f, v in fs.items()} for vm, fs in acc.items()}


def check_orderings(
    spec: ClassificationSpec, means: dict[str, dict[str, float]]
) -> list[dict[str, Any]]:
    def vals(group: list[str], f: str) -> list[float]:
        return [means[vm][f] for vm in group]

    def increasing(xs: list[float]) -> bool:
        return all(a < b for a, b in pairwise(xs))

    def decreasing(xs: list[float]) -> bool:
        return all(a > b for a, b in pairwise(xs))

    checks: list[tuple[str, bool]] = []
    cpu, net, hyb = spec.cpu, spec.network, spec.hybrid
    if cpu and net:
        checks.append(
            (
                "IF of every CPU-bound VM < IF of every network VM",
                max(vals(cpu, "io_factor")) < min(vals(net, "io_factor")),
            )
        )
        checks.append(
            (
                "io_degree of every CPU-bound VM < io_degree of every network VM",
                max(vals(cpu, "io_degree")) < min(vals(net, "io_degree")),
            )
        )
    if cpu:
        checks.append(
            ("CPU-bound: IF falls as lookbusy runs longer", decreasing(vals(cpu, "io_factor")))
        )
        checks.append(
            (
                "CPU-bound: io_degree falls as lookbusy runs longer",
                decreasing(vals(cpu, "io_degree")),
            )
        )
        checks.append(
            (
                "CPU-bound: NF = 0 and net_degree = 0",
                max(vals(cpu, "net_factor") + vals(cpu, "net_degree")) == 0.0,
            )
        )
    if net:
        checks.append(
            ("network: NF grows with the netperf share", increasing(vals(net, "net_factor")))
        )
        checks.append(
            (
                "network: net_degree grows with the netperf share",
                increasing(vals(net, "net_degree")),
            )
        )
    if hyb and net:
        checks.append(
            (
                "hybrids have low IF: every hybrid's IF < every network VM's IF",
                max(vals(hyb, "io_factor")) < min(vals(net, "io_factor")),
            )
        )
    if hyb:
        checks.append(
            (
                "hybrid: io_degree falls as the benchmarks run longer",
                decreasing(vals(hyb, "io_degree")),
            )
        )
        checks.append(
            ("hybrid: net_degree grows with the netperf share", increasing(vals(hyb, "net_degree")))
        )
    return [{"check": name, "holds": ok} for name, ok in checks]
