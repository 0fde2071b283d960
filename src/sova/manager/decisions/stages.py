"""The planning pipeline's built-in plug-ins (:mod:`sova.manager.decisions.pipeline`), registered
under their names, and the default pipeline a manager runs (docs/design.md#the-planning-pipeline).

=========  =====================  =========================================================
stage      plug-in                what it decides
=========  =====================  =========================================================
filter     ``maintenance``        hosts an operator put in maintenance sit the round out
filter     ``draining``           hosts being drained are never a target
filter     ``in-flight``          the hosts of a migration in flight (leases) sit it out
filter     ``return-tabu``        a VM is not sent back to a host it left recently
filter     ``placement``          the placement rules' barred hosts, per VM
score      ``hotspot``            Alg. 2: the k-of-n verdicts, the VM and its cold spot
score      ``should-rules``       a should-rule broken only when it alone blocks a VM
score      ``placement-notes``    a blocked hot host names the rule that barred hosts
score      ``drain``              one move per round off each host being drained
permit     ``migration-brakes``   VM cooldown, migrations in flight, the hourly budget
permit     ``recommend``          a recommend-mode source's moves wait for an operator
reserve    ``leases``             a permitted move's lease opens; a proposal is kept
bind       ``decision-record``    the round's decisions, with their inputs
=========  =====================  =========================================================
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from sova.manager.decisions.fastplan import coordinate_windows
from sova.manager.decisions.fleet import DRAIN, drain_signals, note_bars, relax_should_rules
from sova.manager.decisions.pipeline import (
    BINDS,
    FILTERS,
    PERMITS,
    RESERVES,
    SCORES,
    Code,
    Lease,
    MigrationDecision,
    Move,
    Pipeline,
    PlanState,
    Round,
    Stage,
    Status,
    build_pipeline,
)
from sova.manager.decisions.placement import Bars
from sova.policy.hotspot import MigrationSignal

__all__ = ["DEFAULT_STAGES", "brakes", "default_pipeline"]


# ------------------------------------------------------------------------------ filter


class Maintenance:
    name = "maintenance"

    def filter(self, r: Round) -> None:
        for h, why in r.state.maintenance.items():
            r.fence(h, Status(Code.FENCED, self.name, f"host in maintenance ({why})", Stage.FILTER))


class Draining:
    name = "draining"

    def filter(self, r: Round) -> None:
        for h in r.state.draining:
            r.fence(
                h, Status(Code.FENCED, self.name, "host in maintenance (draining)", Stage.FILTER)
            )


class InFlight:
    name = "in-flight"

    def filter(self, r: Round) -> None:
        r.leased |= r.state.leased_hosts()


class ReturnTabu:
    """Anti-thrash (docs/design.md#anti-thrash): a move that leaves its target above alpha
    would otherwise be reversed as soon as the target's window fills."""

    name = "return-tabu"

    def filter(self, r: Round) -> None:
        limit = r.state.return_tabu_s
        if limit <= 0:
            return
        now = r.now_s
        for vm, left in r.state.departed.items():
            r.bar(vm, [h for h, t in left.items() if now - t < limit])


class PlacementRules:
    """The placement rules as each VM's barred hosts, over what the filters before it
    barred (and any barred after: :class:`Bars` reads ``tabu`` when first asked). Without
    rules, nothing: the round is then exactly the papers' Alg. 2."""

    name = "placement"

    def filter(self, r: Round) -> None:
        state = r.state
        if not state.placement.active:
            return
        index: dict[str, str] = {}

        def source_of(vm: str) -> str | None:
            if not index:
                index.update({n: h for h, vms in state.vms.items() for n in vms})
            return index.get(vm)

        if r.tabu is None:
            r.tabu = {}
        r.bars = Bars(state.placement, state.view(), source_of, r.planned, r.tabu)


# ------------------------------------------------------------------------------- score


class Hotspot:
    """Alg. 2 over the filtered round: exactly ``coordinate()`` over every planned host's
    report, vectorised over hosts (:func:`coordinate_windows`)."""

    name = "hotspot"

    def score(self, r: Round) -> MutableMapping[str, MigrationSignal]:
        state = r.state
        return coordinate_windows(
            r.planned,
            *state.windows().windows(r.planned, state.history),
            r.report,
            state.detector,
            metric=state.metric,
            ceiling=state.ceiling,
            leased=r.leased,
            barred=r.barred,
            fenced=r.fenced,
            cost=state.move_cost,
            prefer=state.proposals,
            # what each report carries, without building the report of every host
            capacity=r.capacities.get,
        )


class ShouldRules:
    name = "should-rules"

    def score(self, r: Round) -> MutableMapping[str, MigrationSignal] | None:
        bars = r.bars
        if bars is None:
            return None
        return relax_should_rules(r, bars)


class PlacementNotes:
    name = "placement-notes"

    def score(self, r: Round) -> MutableMapping[str, MigrationSignal] | None:
        return None if r.bars is None else note_bars(dict(r.signals), r.bars)


class Drain:
    name = "drain"

    def score(self, r: Round) -> MutableMapping[str, MigrationSignal] | None:
        state = r.state
        if not state.draining:
            return None
        return drain_signals(r)


# ------------------------------------------------------------------------------ permit


def brakes(state: PlanState, vm: str, now_s: float) -> Status | None:
    """Which cluster-wide limit holds a migration of ``vm`` now, or None. Each migration
    costs both links a copy of the VM's memory, so a cluster whose detector misfires must
    not spend them unbounded (docs/design.md#anti-thrash)."""
    started = state.started
    while started and now_s - started[0] >= 3600.0:
        started.popleft()
    why = None
    cooldown = state.vm_cooldown_s
    if cooldown > 0 and vm in state.last_moved:
        since = now_s - state.last_moved[vm]
        if since < cooldown:
            why = f"held: {vm} moved {since:.0f}s ago (vm_cooldown_s = {cooldown:g})"
    limit = state.max_concurrent_migrations
    if why is None and limit > 0 and len(state.leases) >= limit:
        why = (
            f"held: {len(state.leases)} migration(s) in flight "
            f"(max_concurrent_migrations = {limit})"
        )
    budget = state.max_migrations_per_hour
    if why is None and budget > 0 and len(started) >= budget:
        why = (
            f"held: {len(started)} migration(s) started in the last hour "
            f"(max_migrations_per_hour = {budget})"
        )
    return None if why is None else Status(Code.HELD, MigrationBrakes.name, why, Stage.PERMIT)


class MigrationBrakes:
    name = "migration-brakes"

    def permit(self, r: Round, move: Move) -> Status | None:
        # Leases opened earlier in this round already count (in leases, started).
        return brakes(r.state, move.vm, r.now_s)


class Recommend:
    name = "recommend"

    def permit(self, r: Round, move: Move) -> Status | None:
        if move.host not in r.state.recommend:
            return None
        return Status(
            Code.PROPOSED, self.name, "proposed for approval (recommend mode)", Stage.PERMIT
        )


# ----------------------------------------------------------------------------- reserve


class Leases:
    name = "leases"

    def reserve(self, r: Round, move: Move, verdict: Status | None) -> Status | None:
        lease = Lease(move.vm, move.host, move.target, r.now_s, r.next_id)
        if verdict is None:
            r.opened.append(r.state.open(lease))
            return Status(Code.MOVE, self.name, move.signal.reason, Stage.RESERVE)
        if verdict.code is Code.PROPOSED:
            r.proposed.append(lease)
        return None


# -------------------------------------------------------------------------------- bind


class DecisionRecord:
    """A decision per host that is hot, flagged, held or proposed (a plain "not hot"
    verdict is none), with the inputs that caused it: an operator answers "why did VM1
    move?" from the record alone."""

    name = "decision-record"

    def bind(self, r: Round, host: str, signal: MigrationSignal, decided: Status) -> None:
        waits = decided.stage is Stage.PERMIT
        if not (signal.hot_resources or signal.flag or waits):
            return
        candidates = r.notes.get(self.name)
        if candidates is None:
            # Listed by name up to a hundred; beyond, a count: 10,000 names in every
            # decision row were megabytes per round in the store.
            n = len(r.planned)
            candidates = r.notes[self.name] = sorted(r.planned) if n <= 100 else n
        window = r.report(host).history
        last = window[-1]
        inputs: dict[str, Any] = {
            "utilisation": [last.cpu, last.mem, last.net],
            "history": [[u.cpu, u.mem, u.net] for u in window],
            "candidates": candidates,
        }
        if waits and decided.code is not Code.PROPOSED:
            inputs["held"] = decided.reason
        if decided.code is Code.PROPOSED:
            inputs["proposed"] = True
        if signal.reason.startswith(DRAIN):
            inputs["drain"] = True
        inputs["decided"] = decided.record()
        r.decisions.append(MigrationDecision(r.now_s, host, signal, inputs, r.next_id))
        r.next_id += 1


# ---------------------------------------------------------------------------- registry

for _filter in (Maintenance, Draining, InFlight, ReturnTabu, PlacementRules):
    FILTERS.register(_filter.name, _filter)
for _score in (Hotspot, ShouldRules, PlacementNotes, Drain):
    SCORES.register(_score.name, _score)
for _permit in (MigrationBrakes, Recommend):
    PERMITS.register(_permit.name, _permit)
RESERVES.register(Leases.name, Leases)
BINDS.register(DecisionRecord.name, DecisionRecord)

# What a manager runs unless told otherwise: every built-in, in the order of the table
# above (the placement filter after the return tabu it extends; the drain after the
# should-rules, whose hosts it must not take).
DEFAULT_STAGES: dict[Stage, tuple[str, ...]] = {
    Stage.FILTER: ("maintenance", "draining", "in-flight", "return-tabu", "placement"),
    Stage.SCORE: ("hotspot", "should-rules", "placement-notes", "drain"),
    Stage.PERMIT: ("migration-brakes", "recommend"),
    Stage.RESERVE: ("leases",),
    Stage.BIND: ("decision-record",),
}


def default_pipeline(**extra: tuple[str, ...]) -> Pipeline:
    """The default pipeline, with ``extra`` plug-ins (by stage name: ``filter=("x",)``)
    run after each stage's built-ins."""
    unknown = set(extra) - {s.value for s in Stage}
    if unknown:
        raise ValueError(f"planning: unknown stage(s) {sorted(unknown)}; choose from {list(Stage)}")
    names = {s: (*DEFAULT_STAGES[s], *extra.get(s.value, ())) for s in Stage}
    return build_pipeline(
        names[Stage.FILTER],
        names[Stage.SCORE],
        names[Stage.PERMIT],
        names[Stage.RESERVE],
        names[Stage.BIND],
    )
