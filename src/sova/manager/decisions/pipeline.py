"""A planning round as a pipeline of named stages over one per-round context
(docs/design.md#the-planning-pipeline).

The stages, in the order a round runs them (the Kubernetes scheduler framework's extension
points, named for what they do here):

1. **filter**: who may take part. A filter fences hosts (neither source nor target: an
   operator's maintenance, a drain, a migration in flight) or bars hosts for a VM (the
   return tabu, placement rules). It writes into the :class:`Round`; nothing is planned yet.
2. **score**: what each hot host should do. The first scorer runs Alg. 2 (hotness ranking
   and the cold-spot screening) over the filtered round; later ones revise its signals (a
   should-rule relaxed, a drain's one move). A scorer returns the revised signals or None.
3. **permit**: may a chosen move start now? A permit answers with no status (yes), a
   ``held`` status (not this round: the brakes) or a ``proposed`` one (an operator decides:
   recommend mode). The first answer that is not yes stands.
4. **reserve**: a permitted move takes its lease (its hosts are then leased for the rest of
   the round and until it ends); a proposed one is kept as a proposal.
5. **bind**: the round's decisions are recorded, each with the status of the stage that
   decided it (``inputs["decided"]``).

Permit runs before reserve (the reverse of Kubernetes): a lease is what starts a migration
here, so nothing is reserved that a brake would have to take back.

Every stage's plug-ins are registered by name (:data:`FILTERS`, :data:`SCORES`,
:data:`PERMITS`, :data:`RESERVES`, :data:`BINDS`): a name taken twice is refused, and
installed packages add theirs through the entry-point groups ``sova.planning.filters``,
``.scores``, ``.permits``, ``.reserves`` and ``.binds``. A :class:`Pipeline` is built from
names (:func:`build_pipeline`), each checked against its registry.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from sova.manager.decisions.fastplan import WindowArrays, notable
from sova.manager.decisions.placement import Bars, Placement, View
from sova.plugins import Registry, RegistryError
from sova.policy.hotspot import (
    HostCapacity,
    HostReport,
    HotnessMetric,
    HotspotDetector,
    MigrationSignal,
    MoveCost,
    VMLoad,
)

__all__ = [
    "BINDS",
    "FILTERS",
    "PERMITS",
    "RESERVES",
    "SCORES",
    "Bind",
    "Code",
    "Filter",
    "Lease",
    "MigrationDecision",
    "Move",
    "Permit",
    "Pipeline",
    "Reserve",
    "Round",
    "Score",
    "Stage",
    "Status",
    "build_pipeline",
]


@dataclass(frozen=True)
class Lease:
    """A migration in flight: ``vm`` leaves ``src`` for ``dst``, signalled at ``since_s``
    by decision ``id`` (the daemon's directive id; 0 where nothing numbers decisions)."""

    vm: str
    src: str
    dst: str
    since_s: float
    id: int = 0


@dataclass(frozen=True)
class MigrationDecision:
    time_s: float
    host: str
    signal: MigrationSignal
    inputs: Mapping[str, Any]
    id: int = 0  # numbered from ``plan``'s ``first_id``, in order


class Stage(StrEnum):
    FILTER = "filter"
    SCORE = "score"
    PERMIT = "permit"
    RESERVE = "reserve"
    BIND = "bind"


class Code(StrEnum):
    """What a stage's plug-in decided."""

    FENCED = "fenced"  # a host is neither source nor target this round
    MOVE = "move"  # a migration starts (its lease is open)
    STAY = "stay"  # a hot host moves nothing (no VM, no cold spot, waiting)
    HELD = "held"  # a chosen move waits for a brake
    PROPOSED = "proposed"  # a chosen move waits for an operator


@dataclass(frozen=True)
class Status:
    """A plug-in's verdict: ``reason`` is the clause the signal carries, worded once."""

    code: Code
    plugin: str
    reason: str
    stage: Stage

    def record(self) -> dict[str, str]:
        """As a decision's ``inputs["decided"]``."""
        return {"stage": self.stage.value, "plugin": self.plugin, "code": self.code.value}


class PlanState(Protocol):
    """What the plug-ins read of the manager (:class:`sova.manager.decisions.core.ManagerCore`): a
    protocol, so the pipeline does not import the core that runs it."""

    detector: HotspotDetector
    metric: HotnessMetric | str
    ceiling: float | None
    move_cost: MoveCost
    return_tabu_s: float
    vm_cooldown_s: float
    max_concurrent_migrations: int
    max_migrations_per_hour: int
    proposals: dict[str, tuple[str, str]]
    departed: dict[str, dict[str, float]]
    last_moved: dict[str, float]
    started: deque[float]
    leases: dict[str, Lease]
    history: dict[str, Any]
    maintenance: dict[str, str]
    draining: set[str]
    pinned: set[str]
    recommend: set[str]
    placement: Placement
    vms: dict[str, Mapping[str, VMLoad]]

    def open(self, lease: Lease) -> Lease: ...
    def leased_hosts(self) -> set[str]: ...
    def view(self) -> View: ...
    def windows(self) -> WindowArrays: ...


@dataclass
class Move:
    """A move the score stage chose: ``vm`` from ``host`` to ``target``."""

    host: str
    vm: str
    target: str
    signal: MigrationSignal


@dataclass
class Round:
    """One round's context: what the filters decided, the signals, what was reserved and
    recorded. Every stage reads and writes this, never the manager's own state beyond the
    lease it opens (reserve)."""

    state: PlanState
    now_s: float
    planned: list[str]  # the hosts that reported and are not stale
    report: Callable[[str], HostReport]  # a planned host's report, built when first asked
    capacities: Mapping[str, HostCapacity]  # empty unless every planned host has one
    next_id: int  # the next decision's id
    # host -> why it is neither source nor target (the words the screening shows)
    fenced: dict[str, str] = field(default_factory=dict)
    fences: dict[str, Status] = field(default_factory=dict)
    leased: set[str] = field(default_factory=set)
    # VM -> hosts it may not go to (None: no filter barred anything)
    tabu: dict[str, list[str]] | None = None
    bars: Bars | None = None  # the placement rules over ``tabu``, when rules are set
    signals: MutableMapping[str, MigrationSignal] = field(default_factory=dict)
    # host -> the score plug-in whose signal it carries, where that is not the first's
    scored_by: dict[str, str] = field(default_factory=dict)
    opened: list[Lease] = field(default_factory=list)
    proposed: list[Lease] = field(default_factory=list)
    decisions: list[MigrationDecision] = field(default_factory=list)
    # plug-ins' scratch for this round (what one works out once and reads per host)
    notes: dict[str, Any] = field(default_factory=dict)
    _reports: dict[str, HostReport] | None = None

    def fence(self, host: str, status: Status) -> None:
        """``host`` sits the round out; the first filter to fence it gives the reason."""
        if host not in self.fenced:
            self.fenced[host] = status.reason
            self.fences[host] = status

    def bar(self, vm: str, hosts: Iterable[str]) -> None:
        """``vm`` may not be sent to ``hosts`` this round."""
        if self.tabu is None:
            self.tabu = {}
        self.tabu.setdefault(vm, []).extend(hosts)

    @property
    def barred(self) -> Mapping[str, Collection[str]] | None:
        return self.bars if self.bars is not None else self.tabu

    def reports(self) -> dict[str, HostReport]:
        """Every planned host's report (the fleet controls re-plan among them all)."""
        if self._reports is None:
            self._reports = {h: self.report(h) for h in self.planned}
        return self._reports


@runtime_checkable
class Filter(Protocol):
    """Fences hosts (:meth:`Round.fence`) or bars hosts for a VM (:meth:`Round.bar`)."""

    name: str

    def filter(self, r: Round) -> None: ...


@runtime_checkable
class Score(Protocol):
    """The round's signals, revised (None: unchanged)."""

    name: str

    def score(self, r: Round) -> MutableMapping[str, MigrationSignal] | None: ...


@runtime_checkable
class Permit(Protocol):
    """None lets ``move`` start; a ``held`` or ``proposed`` status does not."""

    name: str

    def permit(self, r: Round, move: Move) -> Status | None: ...


@runtime_checkable
class Reserve(Protocol):
    """Takes what a permitted (or proposed) move needs; its status if it decided."""

    name: str

    def reserve(self, r: Round, move: Move, verdict: Status | None) -> Status | None: ...


@runtime_checkable
class Bind(Protocol):
    """Records the decision about ``host`` (``decided``: the stage that made it)."""

    name: str

    def bind(self, r: Round, host: str, signal: MigrationSignal, decided: Status) -> None: ...


def _adapter(kind: str) -> Callable[[str, Any], Callable[[], Any]]:
    """What an entry point may name: a factory (a class, or a function taking nothing)
    whose product implements the stage's protocol, checked when it is built."""

    def adapt(name: str, obj: Any) -> Callable[[], Any]:
        if not callable(obj):
            raise RegistryError(f"{kind} {name!r}: {obj!r} is not a factory")
        return obj  # type: ignore[no-any-return]

    return adapt


FILTERS: Registry[Callable[[], Filter]] = Registry(
    "planning filter", "sova.planning.filters", _adapter("planning filter")
)
SCORES: Registry[Callable[[], Score]] = Registry(
    "planning score", "sova.planning.scores", _adapter("planning score")
)
PERMITS: Registry[Callable[[], Permit]] = Registry(
    "planning permit", "sova.planning.permits", _adapter("planning permit")
)
RESERVES: Registry[Callable[[], Reserve]] = Registry(
    "planning reserve", "sova.planning.reserves", _adapter("planning reserve")
)
BINDS: Registry[Callable[[], Bind]] = Registry(
    "planning bind", "sova.planning.binds", _adapter("planning bind")
)

_PROTOCOLS: dict[Stage, tuple[Registry[Any], type]] = {
    Stage.FILTER: (FILTERS, Filter),
    Stage.SCORE: (SCORES, Score),
    Stage.PERMIT: (PERMITS, Permit),
    Stage.RESERVE: (RESERVES, Reserve),
    Stage.BIND: (BINDS, Bind),
}


def _build(stage: Stage, names: Sequence[str]) -> list[Any]:
    registry, protocol = _PROTOCOLS[stage]
    if len(set(names)) != len(names):
        raise ValueError(f"planning.{stage.value}: a plug-in is named twice in {list(names)}")
    out = []
    for name in names:
        plugin = registry[registry.check(name)]()
        if not isinstance(plugin, protocol) or getattr(plugin, "name", None) != name:
            raise ValueError(
                f"planning.{stage.value}: {name!r} builds {plugin!r}, not a "
                f"{protocol.__name__} named {name!r}"
            )
        out.append(plugin)
    return out


@dataclass(frozen=True, eq=False)
class Pipeline:
    """The plug-ins of each stage, in the order they run. Two pipelines of the same names
    are the same configuration (a plug-in is built from its name), so they compare equal."""

    filters: tuple[Filter, ...]
    scores: tuple[Score, ...]
    permits: tuple[Permit, ...]
    reserves: tuple[Reserve, ...]
    binds: tuple[Bind, ...]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pipeline) and self.names() == other.names()

    def __hash__(self) -> int:
        return hash(tuple(tuple(v) for v in self.names().values()))

    def names(self) -> dict[str, list[str]]:
        return {
            Stage.FILTER.value: [p.name for p in self.filters],
            Stage.SCORE.value: [p.name for p in self.scores],
            Stage.PERMIT.value: [p.name for p in self.permits],
            Stage.RESERVE.value: [p.name for p in self.reserves],
            Stage.BIND.value: [p.name for p in self.binds],
        }

    def filter(self, r: Round) -> None:
        for f in self.filters:
            f.filter(r)

    def score(self, r: Round) -> None:
        """Each scorer in turn; a host whose signal a later one replaced is marked as
        decided by it (``r.scored_by``)."""
        first = True
        for s in self.scores:
            out = s.score(r)
            if out is not None:
                if not first:
                    prev = r.signals
                    r.scored_by.update(
                        (h, s.name) for h, sig in out.items() if prev.get(h) is not sig
                    )
                r.signals = out
            first = False

    def run(self, r: Round) -> Round:
        """The round through every stage. The plain "not hot" verdicts are left out of
        permit, reserve and bind: never flagged, held or proposed."""
        self.filter(r)
        self.score(r)
        scorer = self.scores[0].name if self.scores else ""
        for host, sig in notable(r.signals):
            decided: Status | None = None
            if sig.flag and sig.target and sig.vm:
                move = Move(host, sig.vm, sig.target, sig)
                verdict = next(
                    (v for p in self.permits if (v := p.permit(r, move)) is not None), None
                )
                for res in self.reserves:
                    got = res.reserve(r, move, verdict)
                    decided = decided or got
                if verdict is not None:
                    sig = r.signals[host] = _amend(sig, verdict)
                    decided = verdict
            if decided is None:
                decided = Status(
                    Code.MOVE if sig.flag else Code.STAY,
                    r.scored_by.get(host, scorer),
                    sig.reason,
                    Stage.SCORE,
                )
            for b in self.binds:
                b.bind(r, host, sig, decided)
        return r


def _amend(sig: MigrationSignal, verdict: Status) -> MigrationSignal:
    """A chosen move a permit did not let start: not flagged (nothing acts on it); a
    proposal keeps its target for the operator."""
    target = sig.target if verdict.code is Code.PROPOSED else None
    return MigrationSignal(
        False, target, f"{sig.reason}; {verdict.reason}", sig.vm, sig.hot_resources
    )


def build_pipeline(
    filters: Sequence[str],
    scores: Sequence[str],
    permits: Sequence[str],
    reserves: Sequence[str],
    binds: Sequence[str],
) -> Pipeline:
    """A pipeline of the named plug-ins; an unknown name is one error naming the stage and
    the name (and the known ones)."""
    return Pipeline(
        tuple(_build(Stage.FILTER, filters)),
        tuple(_build(Stage.SCORE, scores)),
        tuple(_build(Stage.PERMIT, permits)),
        tuple(_build(Stage.RESERVE, reserves)),
        tuple(_build(Stage.BIND, binds)),
    )
