"""What a round adds to Alg. 2 for fleet controls: placement rules and host drains, as the
planning pipeline's ``should-rules``, ``placement-notes`` and ``drain`` scorers
(:mod:`sova.manager.decisions.stages`), which run after Alg. 2 planned the round with the placement
rules as barred hosts (:class:`sova.manager.decisions.placement.Bars`):

1. **should-rules, relaxed only if needed**: a hot host whose VM found no cold spot while a
   ``vm-host-should`` rule barred some hosts is planned again without the should-rules,
   among the hosts still free this round (the must-rules, domains and anti-affinity stay);
2. **drain** (Watcher's host_maintenance, DRS's maintenance mode): every host being drained
   sends one VM per round — the largest migration factor first, as Alg. 1 chooses — to the
   cold spot the planner's own screening picks (:func:`choose_target`), among hosts that are
   not hot, fenced, leased or already a target this round, and not barred for that VM. The
   permit stage (the brakes: concurrency, hourly budget, cooldown; recommend mode) then
   applies to the drain's moves exactly as to a hot host's.

A drained host is fenced (never a target); its signal says what the drain did or why it is
blocked, which is what ``sova host drain HOST --status`` shows.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from sova.manager.decisions.fastplan import fast_coordinate
from sova.manager.decisions.pipeline import Round
from sova.manager.decisions.placement import Bars
from sova.policy.cold_spots import choose_target
from sova.policy.hotspot import (
    HostReport,
    MigrationSignal,
    Utilisation,
    VMLoad,
    migration_factor,
)

DRAIN = "drain: "  # every drain signal's reason starts so


def relax_should_rules(r: Round, soft: Bars) -> dict[str, MigrationSignal]:
    """Hot hosts left without a cold spot because of a should-rule, planned again without
    it among the hosts the first pass left free (the round's signals as they were
    otherwise)."""
    signals = dict(r.signals)
    hard = replace(soft, soft=False, _cache={})  # the same view, should-rules left out
    retry = {
        h
        for h, s in signals.items()
        if not s.flag
        and s.vm is not None
        and s.target is None
        and "no cold spot" in s.reason
        and soft[s.vm] != hard[s.vm]
    }
    if not retry:
        return signals
    hot = {h for h, s in signals.items() if s.hot_resources or s.flag}
    subset = {h: rep for h, rep in r.reports().items() if h in retry or h not in hot}
    taken = {s.target for s in signals.values() if s.flag and s.target}
    state = r.state
    again = fast_coordinate(
        subset,
        state.detector,
        metric=state.metric,
        ceiling=state.ceiling,
        leased=r.leased | taken,
        barred=hard,
        fenced=r.fenced,
        cost=state.move_cost,
    )
    out = dict(signals)
    for h in sorted(retry):
        s = again.get(h)
        if s is not None and s.flag:
            out[h] = MigrationSignal(
                True,
                s.target,
                f"{s.reason} (a vm-host-should rule is broken: no host of its group could "
                "take the VM)",
                s.vm,
                s.hot_resources,
            )
    return out


def note_bars(signals: dict[str, MigrationSignal], bars: Bars) -> dict[str, MigrationSignal]:
    """A hot host left without a cold spot says which placement rule barred hosts for its
    VM (the screening lists only the hosts it tried)."""
    out = dict(signals)
    for h, s in signals.items():
        if s.flag or s.vm is None or "no cold spot" not in s.reason:
            continue
        ruled = sorted(bars.by_rules(s.vm))
        if ruled:
            why = bars.placement.refusal(s.vm, h, ruled[0], bars.view, soft=bars.soft)
            out[h] = MigrationSignal(
                False,
                None,
                f"{s.reason}; placement rules bar {len(ruled)} host(s), e.g. {why}",
                s.vm,
                s.hot_resources,
            )
    return out


def drain_signals(r: Round) -> dict[str, MigrationSignal]:
    """One move (or why none) per drained host; the other signals as they were. The VMs a
    host's last report names (``state.vms``) include pinned ones (its report leaves those
    out)."""
    state = r.state
    signals, reports = dict(r.signals), r.reports()
    leased, pinned = r.leased, state.pinned
    d = _Drain(r, reports, signals)
    out = dict(signals)
    for host in sorted(state.draining):
        rep = reports.get(host)
        if rep is None:
            # Silent, or its window restarted after a migration: nothing to judge yet.
            out[host] = MigrationSignal(False, None, f"{DRAIN}waiting for the host's next report")
            continue
        hot = signals[host].hot_resources if host in signals else ()
        if host in leased:
            out[host] = MigrationSignal(
                False, None, f"{DRAIN}waiting: a migration of this host is in flight", None, hot
            )
            continue
        movable = sorted(
            (n for n, v in rep.vms.items() if not v.migrating and n not in pinned),
            key=lambda n: (-migration_factor(rep.vms[n], state.metric), n),
        )
        if not movable:
            left = sorted(n for n in state.vms.get(host, rep.vms) if n in pinned)
            # A report names only the host's few top candidates: with every VM it names
            # pinned, unpinned VMs it did not name may still be there.
            why = (
                f"blocked: every VM the host's last report names is pinned "
                f"({', '.join(left)}); unpinned VMs it did not name may remain (a report "
                "names only its top candidates): unpin these, or check the host"
                if left
                else "no VM left to move"
            )
            out[host] = MigrationSignal(False, None, DRAIN + why, None, hot)
            continue
        out[host] = d.move_one(host, rep, movable, hot)
    return out


class _Drain:
    """The hosts a drain may send VMs to this round: every reported host but the hot ones,
    the hot ones' targets, those in flight and the fenced; a drain's target is taken in
    turn, so two drains never pick the same host."""

    def __init__(
        self, r: Round, reports: dict[str, HostReport], signals: dict[str, MigrationSignal]
    ) -> None:
        state = r.state
        self.alpha, self.metric, self.ceiling = state.detector.alpha, state.metric, state.ceiling
        self.bars: Mapping[str, Collection[str]] = r.barred or {}
        self.capacities = r.capacities or None
        self.current: dict[str, Utilisation] = {
            h: rep.history[-1] for h, rep in reports.items() if rep.history
        }
        self.taken = (
            {h for h, s in signals.items() if s.hot_resources or s.flag}
            | {s.target for s in signals.values() if s.flag and s.target}
            | set(r.leased)
            | set(r.fenced)
        )
        bars = self.bars
        self.hard = (
            replace(bars, soft=False, _cache={}) if isinstance(bars, Bars) and bars.soft else None
        )

    def pick(self, host: str, load: VMLoad, barred: set[str]) -> str | None:
        return choose_target(
            self.current,
            host,
            load,
            self.alpha,
            self.taken | barred,
            metric=self.metric,
            ceiling=self.ceiling,
            capacities=self.capacities,
        )

    def move_one(
        self, host: str, rep: HostReport, movable: list[str], hot: tuple[str, ...]
    ) -> MigrationSignal:
        """The first VM of ``movable`` some host can take, or why none could go."""
        bars, hard = self.bars, self.hard
        refused: list[str] = []
        for vm in movable:
            barred = set(bars.get(vm, ()))
            target = self.pick(host, rep.vms[vm], barred)
            broken = ""
            if target is None and hard is not None and hard[vm] != bars.get(vm):
                # As the round does: break a should-rule only when it alone blocks the VM.
                target = self.pick(host, rep.vms[vm], set(hard[vm]))
                broken = " (a vm-host-should rule is broken: no host of its group could take it)"
            if target is not None:
                self.taken.add(target)
                return MigrationSignal(
                    True, target, f"{DRAIN}move {vm} to {target}{broken}", vm, hot
                )
            refused.append(self.refusal(host, vm, barred))
        return MigrationSignal(
            False, None, f"{DRAIN}blocked: no cold spot ({'; '.join(refused)})", movable[0], hot
        )

    def refusal(self, host: str, vm: str, barred: set[str]) -> str:
        """Why no host took ``vm``: how many free hosts were too loaded, how many barred
        (with a rule that barred one, where a placement rule did)."""
        bars = self.bars
        free = [h for h in self.current if h != host and h not in self.taken]
        n_barred = sum(1 for h in free if h in barred)
        example = ""
        if n_barred and isinstance(bars, Bars):
            first = min(h for h in free if h in barred)
            rule = bars.placement.refusal(vm, host, first, bars.view, soft=bars.soft)
            if rule is not None:
                example = f", e.g. {rule}"
        return (
            f"{vm}: {len(free) - n_barred} free host(s) too loaded for it "
            f"(alpha {self.alpha:g}), {n_barred} barred by placement rules or return tabu"
            f"{example}"
        )
