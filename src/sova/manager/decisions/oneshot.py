"""One round of the manager's planning pipeline over reports a caller gathered itself:
Watcher's strategy (:mod:`sova.openstack.watcher_strategy`) keeps no state between audits,
so it gets a core with no history behind the round (docs/design.md#the-planning-pipeline)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from sova.manager.decisions.core import ManagerCore
from sova.manager.decisions.pipeline import Round
from sova.policy.hotspot import (
    PAPERS_MOVE,
    HostReport,
    HotnessMetric,
    HotspotDetector,
    MigrationSignal,
    MoveCost,
)

__all__ = ["plan_reports"]


class _GivenBars:
    """The hosts each VM may not go to, as the caller knows them (Watcher: the nodes its
    model says a VM does not fit)."""

    name = "given-bars"

    def __init__(self, barred: Mapping[str, Iterable[str]]) -> None:
        self.barred = barred

    def filter(self, r: Round) -> None:
        for vm, hosts in self.barred.items():
            r.bar(vm, hosts)


def plan_reports(
    reports: Mapping[str, HostReport],
    detector: HotspotDetector,
    *,
    metric: HotnessMetric | str = HotnessMetric.VOLUME,
    ceiling: float | None = None,
    barred: Mapping[str, Iterable[str]] | None = None,
    cost: MoveCost = PAPERS_MOVE,
) -> dict[str, MigrationSignal]:
    """One round of the manager's pipeline over reports a caller gathered itself (Watcher's
    strategy, which keeps no state between audits): a core with no history, no brakes and
    no return tabu is given each report's window, the default pipeline runs once with
    ``barred`` as one more filter, and its signals are returned (exactly ``coordinate``'s
    over the same reports)."""
    core = ManagerCore(
        detector=detector,
        metric=metric,
        ceiling=ceiling,
        return_tabu_s=0.0,
        max_concurrent_migrations=0,
        max_migrations_per_hour=0,
        vm_cooldown_s=0.0,
        move_cost=cost,
        keep_log=False,
    )
    if barred:
        base = core.pipeline
        core.pipeline = replace(base, filters=(*base.filters, _GivenBars(barred)))
    silent: dict[str, MigrationSignal] = {}
    for host, rep in reports.items():
        window = rep.history[-detector.n :]
        if not window:
            silent[host] = MigrationSignal(False, None, "no observations")
            continue
        for u in window[:-1]:
            core.ingest(host, u, {}, capacity=rep.capacity)
        core.ingest(host, window[-1], rep.vms, capacity=rep.capacity)
    signals = core.plan(0.0).signals
    return {h: silent[h] if h in silent else signals[h] for h in reports}
