"""The planning pipeline (docs/design.md#the-planning-pipeline): each stage's built-in
plug-ins, table-driven, the registries, and an out-of-tree filter installed through an
entry point changing a round."""

from __future__ import annotations

import random
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sova.manager.decisions.core import ManagerCore
from sova.manager.decisions.oneshot import plan_reports
from sova.manager.decisions.pipeline import (
    BINDS,
    FILTERS,
    PERMITS,
    RESERVES,
    Code,
    Lease,
    Move,
    Round,
    Stage,
    Status,
    build_pipeline,
)
from sova.manager.decisions.placement import Placement, PlacementSpec, RuleSpec
from sova.manager.decisions.stages import DEFAULT_STAGES, default_pipeline
from sova.plugins import RegistryError
from sova.policy.hotspot import (
    HostReport,
    HotspotDetector,
    MigrationSignal,
    Utilisation,
    VMLoad,
    coordinate,
)

# Three reports (n = 3, k = 2, alpha 0.75) of: hot (net 0.9 > 0.75 in 3 of 3: hot) with
# one VM, and three calm hosts. Their volumes 1/((1-cpu)(1-mem)(1-net)), the coldest first:
#   cold-a (0.1, 0.1, 0.05): 1/(0.9*0.9*0.95) = 1.30
#   cold-b (0.1, 0.1, 0.20): 1/(0.9*0.9*0.80) = 1.54
#   cold-c (0.1, 0.1, 0.40): 1/(0.9*0.9*0.60) = 2.06
# so Alg. 2 sends vm0 to cold-a, and to cold-b when cold-a may not take it.
LOADS = {
    "hot": Utilisation(0.2, 0.2, 0.9),
    "cold-a": Utilisation(0.1, 0.1, 0.05),
    "cold-b": Utilisation(0.1, 0.1, 0.2),
    "cold-c": Utilisation(0.1, 0.1, 0.4),
}
VM = VMLoad(Utilisation(0.05, 0.05, 0.2), 2**30)
T = 30.0  # the last report's time


def _core(**kw: Any) -> ManagerCore:
    core = ManagerCore(detector=HotspotDetector(2, 3, 0.75), stale_after_s=1e9, **kw)
    for t in (10.0, 20.0, T):
        for h, u in LOADS.items():
            core.ingest(h, u, {"vm0": VM} if h == "hot" else {}, at=t)
    return core


def _round(core: ManagerCore) -> Round:
    return core.begin_round(T, first_id=7)


# ------------------------------------------------------------------------------ filter


def _departed(core: ManagerCore) -> None:
    # vm0 left cold-a at 20 s and cold-b at -900 s: at T = 30 s, 30-20 = 10 < 900 (barred),
    # 30-(-900) = 930 >= 900 (free again)
    core.departed["vm0"] = {"cold-a": 20.0, "cold-b": -900.0}


def _lease(core: ManagerCore) -> None:
    core.leases["vm9"] = Lease("vm9", "cold-c", "cold-b", 0.0, 1)


def _rule(core: ManagerCore) -> None:
    # vm0 must stay on the hosts of group {hot, cold-c}: every other host is barred for it
    spec = PlacementSpec(
        host_groups={"g": ["hot", "cold-c"]},
        rules=[RuleSpec(name="stay", kind="vm-host-must", vms=["vm0"], group="g")],
    )
    core.placement = Placement.from_spec(spec)


FILTER_CASES: list[
    tuple[str, Callable[[ManagerCore], None], dict[str, str], set[str], dict[str, set[str]]]
] = [
    # plug-in, setup, fenced, leased, barred (vm -> hosts)
    (
        "maintenance",
        lambda c: c.maintenance.update({"cold-a": "disk swap"}),
        {"cold-a": "host in maintenance (disk swap)"},
        set(),
        {},
    ),
    (
        "draining",
        lambda c: c.draining.add("cold-b"),
        {"cold-b": "host in maintenance (draining)"},
        set(),
        {},
    ),
    ("in-flight", _lease, {}, {"cold-c", "cold-b"}, {}),
    ("return-tabu", _departed, {}, set(), {"vm0": {"cold-a"}}),
    ("placement", _rule, {}, set(), {"vm0": {"cold-a", "cold-b"}}),
    # nothing set: each filter lets every host take part
    *((name, lambda c: None, {}, set(), {}) for name in DEFAULT_STAGES[Stage.FILTER]),
]


@pytest.mark.parametrize(("name", "setup", "fenced", "leased", "barred"), FILTER_CASES)
def test_filters(
    name: str,
    setup: Callable[[ManagerCore], None],
    fenced: dict[str, str],
    leased: set[str],
    barred: dict[str, set[str]],
) -> None:
    core = _core()
    setup(core)
    r = _round(core)
    FILTERS[name]().filter(r)
    assert r.fenced == fenced
    assert {h: s.plugin for h, s in r.fences.items()} == dict.fromkeys(fenced, name)
    assert r.leased == leased
    got = {vm: set(r.barred[vm]) for vm in barred} if r.barred is not None else {}
    assert got == barred


def test_the_first_filter_to_fence_a_host_gives_the_reason() -> None:
    core = _core(maintenance={"cold-a": "disk swap"}, draining={"cold-a"})
    r = _round(core)
    for name in ("maintenance", "draining"):
        FILTERS[name]().filter(r)
    assert r.fenced == {"cold-a": "host in maintenance (disk swap)"}


# ------------------------------------------------------------------------------- score


def _drain(r: Round, host: str) -> None:
    r.state.draining.add(host)
    FILTERS["draining"]().filter(r)


SCORE_CASES: list[tuple[str, Callable[[Round], None], tuple[bool, str | None], str]] = [
    # what the filters left, hot's signal (flag, target), and the scorer that decided it
    ("every host free", lambda r: None, (True, "cold-a"), "hotspot"),
    (
        "cold-a fenced: the next coldest",
        lambda r: r.fence("cold-a", Status(Code.FENCED, "test", "why", Stage.FILTER)),
        (True, "cold-b"),
        "hotspot",
    ),
    (
        "every calm host leased: no cold spot",
        lambda r: r.leased.update({"cold-a", "cold-b", "cold-c"}),
        (False, None),
        "hotspot",
    ),
    (
        "hot drained (so fenced): the drain's move, to the coldest",
        lambda r: _drain(r, "hot"),
        (True, "cold-a"),
        "drain",
    ),
]


@pytest.mark.parametrize(("case", "setup", "signal", "by"), SCORE_CASES)
def test_scores(
    case: str, setup: Callable[[Round], None], signal: tuple[bool, str | None], by: str
) -> None:
    core = _core()
    r = _round(core)
    setup(r)
    build_pipeline((), DEFAULT_STAGES[Stage.SCORE], (), (), ()).score(r)
    sig = r.signals["hot"]
    assert (sig.flag, sig.target) == signal, sig.reason
    assert r.scored_by.get("hot", "hotspot") == by


# ------------------------------------------------------------------------------ permit

MOVE = Move("hot", "vm0", "cold-a", MigrationSignal(True, "cold-a", "hot", "vm0", ("net",)))

PERMIT_CASES: list[tuple[str, dict[str, Any], Callable[[ManagerCore], None], str | None]] = [
    # plug-in, core settings, state, the verdict's reason (None: permitted)
    ("migration-brakes", {}, lambda c: None, None),
    (
        "migration-brakes",
        {"vm_cooldown_s": 300.0},
        # vm0 sent somewhere at 10 s: 30 - 10 = 20 s < 300 s
        lambda c: c.last_moved.update({"vm0": 10.0}),
        "held: vm0 moved 20s ago (vm_cooldown_s = 300)",
    ),
    (
        "migration-brakes",
        {"max_concurrent_migrations": 1, "vm_cooldown_s": 0.0},
        _lease,  # one in flight, at most 1
        "held: 1 migration(s) in flight (max_concurrent_migrations = 1)",
    ),
    (
        "migration-brakes",
        {"max_migrations_per_hour": 2, "vm_cooldown_s": 0.0},
        # starts at -3600 s (30 - (-3600) >= 3600: out of the hour), 0 s and 5 s: 2 in it
        lambda c: c.started.extend([-3600.0, 0.0, 5.0]),
        "held: 2 migration(s) started in the last hour (max_migrations_per_hour = 2)",
    ),
    ("recommend", {}, lambda c: None, None),
    (
        "recommend",
        {},
        lambda c: c.recommend.add("hot"),
        "proposed for approval (recommend mode)",
    ),
]


@pytest.mark.parametrize(("name", "settings", "setup", "reason"), PERMIT_CASES)
def test_permits(
    name: str, settings: dict[str, Any], setup: Callable[[ManagerCore], None], reason: str | None
) -> None:
    core = _core(**settings)
    setup(core)
    verdict = PERMITS[name]().permit(_round(core), MOVE)
    assert (verdict and verdict.reason) == reason
    if verdict is not None:
        assert (verdict.plugin, verdict.stage) == (name, Stage.PERMIT)
        assert verdict.code is (Code.PROPOSED if name == "recommend" else Code.HELD)


# ----------------------------------------------------------------------------- reserve

RESERVE_CASES: list[tuple[Status | None, int, int, Code | None]] = [
    # the permit's verdict; leases opened, proposals kept; the reserve's status
    (None, 1, 0, Code.MOVE),
    (Status(Code.PROPOSED, "recommend", "proposed", Stage.PERMIT), 0, 1, None),
    (Status(Code.HELD, "migration-brakes", "held: x", Stage.PERMIT), 0, 0, None),
]


@pytest.mark.parametrize(("verdict", "opened", "proposed", "code"), RESERVE_CASES)
def test_reserve(verdict: Status | None, opened: int, proposed: int, code: Code | None) -> None:
    core = _core()
    r = _round(core)
    got = RESERVES["leases"]().reserve(r, MOVE, verdict)
    assert (len(r.opened), len(r.proposed)) == (opened, proposed)
    assert len(core.leases) == opened
    assert (got and got.code) == code
    for lease in (*r.opened, *r.proposed):
        # the lease carries the id of the decision the round records next (first_id 7)
        assert (lease.vm, lease.src, lease.dst, lease.id) == ("vm0", "hot", "cold-a", 7)


# -------------------------------------------------------------------------------- bind

HOT = MigrationSignal(False, None, "no cold spot", "vm0", ("net",))
QUIET = MigrationSignal(False, None, "not hot (0 of 3 over alpha)")
STAY = Status(Code.STAY, "hotspot", "no cold spot", Stage.SCORE)
BIND_CASES: list[tuple[MigrationSignal, Status, set[str] | None]] = [
    # the signal, who decided, the decision's inputs beyond utilisation/history/candidates
    (HOT, STAY, {"decided"}),
    (QUIET, STAY, None),  # not hot: no decision
    (QUIET, Status(Code.HELD, "migration-brakes", "held: x", Stage.PERMIT), {"decided", "held"}),
    (QUIET, Status(Code.PROPOSED, "recommend", "p", Stage.PERMIT), {"decided", "proposed"}),
    (MigrationSignal(False, None, "drain: no VM left to move"), STAY, None),
    (
        MigrationSignal(True, "cold-a", "drain: move vm0 to cold-a", "vm0"),
        STAY,
        {"decided", "drain"},
    ),
]


@pytest.mark.parametrize(("signal", "decided", "extra"), BIND_CASES)
def test_bind(signal: MigrationSignal, decided: Status, extra: set[str] | None) -> None:
    r = _round(_core())
    BINDS["decision-record"]().bind(r, "hot", signal, decided)
    if extra is None:
        assert r.decisions == [] and r.next_id == 7
        return
    (d,) = r.decisions
    assert d.id == 7 and r.next_id == 8
    assert set(d.inputs) - {"utilisation", "history", "candidates"} == extra
    assert d.inputs["utilisation"] == [0.2, 0.2, 0.9] and len(d.inputs["history"]) == 3
    assert d.inputs["candidates"] == sorted(LOADS)
    assert d.inputs["decided"] == {
        "stage": decided.stage.value,
        "plugin": decided.plugin,
        "code": decided.code.value,
    }


# ----------------------------------------------------------------- the round, end to end

ROUND_CASES: list[tuple[dict[str, Any], Callable[[ManagerCore], None], dict[str, str]]] = [
    # settings, state; which stage and plug-in decided hot's move
    ({}, lambda c: None, {"stage": "reserve", "plugin": "leases", "code": "move"}),
    (
        {"vm_cooldown_s": 300.0},
        lambda c: c.last_moved.update({"vm0": 10.0}),
        {"stage": "permit", "plugin": "migration-brakes", "code": "held"},
    ),
    (
        {},
        lambda c: c.recommend.add("hot"),
        {"stage": "permit", "plugin": "recommend", "code": "proposed"},
    ),
    (
        {},
        lambda c: c.leases.update(
            {"vm8": Lease("vm8", "cold-a", "cold-b", 0.0), "vm9": Lease("vm9", "cold-c", "x", 0.0)}
        ),
        {"stage": "score", "plugin": "hotspot", "code": "stay"},
    ),
    ({}, lambda c: c.draining.add("hot"), {"stage": "reserve", "plugin": "leases", "code": "move"}),
]


@pytest.mark.parametrize(("settings", "setup", "decided"), ROUND_CASES)
def test_the_decision_record_names_the_stage_that_decided(
    settings: dict[str, Any], setup: Callable[[ManagerCore], None], decided: dict[str, str]
) -> None:
    core = _core(**settings)
    setup(core)
    result = core.plan(T)
    (d,) = (d for d in result.decisions if d.host == "hot")
    assert d.inputs["decided"] == decided, d.signal.reason


# --------------------------------------------------------------------------- registries


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name

    def filter(self, r: Round) -> None:
        pass


def test_a_name_is_registered_once() -> None:
    with pytest.raises(RegistryError, match="'maintenance' is already registered"):
        FILTERS.register("maintenance", lambda: _Named("maintenance"))


@pytest.mark.parametrize(
    ("filters", "error"),
    [
        (("maintenance", "nope"), "unknown planning filter 'nope'"),
        (("maintenance", "maintenance"), "planning.filter: a plug-in is named twice"),
    ],
)
def test_a_pipeline_is_built_from_known_names(filters: tuple[str, ...], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        build_pipeline(filters, (), (), (), ())


def test_a_factory_must_build_the_stage_it_is_named_for() -> None:
    FILTERS.register("misnamed", lambda: _Named("other"))
    try:
        with pytest.raises(ValueError, match="planning.filter: 'misnamed' builds"):
            build_pipeline(("misnamed",), (), (), (), ())
    finally:
        FILTERS.unregister("misnamed")


def test_the_default_pipeline_runs_every_built_in_in_order() -> None:
    names = default_pipeline().names()
    assert names == {stage.value: list(DEFAULT_STAGES[stage]) for stage in Stage}
    with pytest.raises(ValueError, match="unknown stage"):
        default_pipeline(filters=("x",))


# ----------------------------------------------------------------- out of tree, by entry point


@pytest.fixture
def throwaway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A distribution installed only on this test's sys.path: one module and the metadata
    that declares its filter in the group ``sova.planning.filters``."""
    (tmp_path / "sova_throwaway_filter.py").write_text(
        textwrap.dedent(
            '''
            from sova.manager.decisions.pipeline import Code, Stage, Status


            class NoColdA:
                """Refuses cold-a as source or target (say, a host of a rack being moved)."""

                name = "no-cold-a"

                def filter(self, r):
                    r.fence("cold-a", Status(Code.FENCED, self.name, "rack move", Stage.FILTER))
            '''
        )
    )
    info = tmp_path / "sova_throwaway_filter-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: sova-throwaway-filter\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text(
        "[sova.planning.filters]\nno-cold-a = sova_throwaway_filter:NoColdA\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    FILTERS.rescan()
    yield "no-cold-a"
    FILTERS.unregister("no-cold-a")


def test_an_out_of_tree_filter_changes_a_round(throwaway: str) -> None:
    assert throwaway in FILTERS
    plain = _core().plan(T)
    assert (plain.signals["hot"].flag, plain.signals["hot"].target) == (True, "cold-a")

    core = _core(pipeline=default_pipeline(filter=(throwaway,)))
    fenced = core.plan(T)
    # cold-a refused: the next coldest, cold-b (1.54 against cold-a's 1.30)
    assert (fenced.signals["hot"].flag, fenced.signals["hot"].target) == (True, "cold-b")
    assert [lease.dst for lease in fenced.opened] == ["cold-b"]


# ------------------------------------------------------------- Watcher's one-shot round


def _random_reports(seed: int, hosts: int) -> dict[str, HostReport]:
    rng = random.Random(seed)
    out = {}
    for i in range(hosts):
        level = rng.choice((0.2, 0.5, 0.85))  # a third of the hosts around 0.85 > alpha
        window = tuple(
            Utilisation(*(min(1.0, max(0.0, level + rng.uniform(-0.1, 0.1))) for _ in range(3)))
            for _ in range(rng.choice((0, 2, 5)))
        )
        vms = {
            f"vm{i}-{j}": VMLoad(Utilisation(*(rng.uniform(0.0, 0.2) for _ in range(3))), 2**30)
            for j in range(rng.randint(0, 3))
        }
        out[f"h{i:02d}"] = HostReport(window, vms)
    return out


@pytest.mark.parametrize(
    ("seed", "hosts", "barred", "ceiling"),
    [
        (1, 6, {}, None),
        (2, 30, {}, None),
        (3, 30, {"vm0-0": {"h01", "h02"}, "vm3-1": {"h05"}}, None),
        (4, 30, {}, 0.9),
    ],
)
def test_the_one_shot_round_is_alg2_over_the_same_reports(
    seed: int, hosts: int, barred: dict[str, set[str]], ceiling: float | None
) -> None:
    # Watcher's strategy runs the pipeline once (plan_reports); with no state behind it,
    # its round must be exactly the papers' coordinate() over the reports it gathered.
    reports = _random_reports(seed, hosts)
    detector = HotspotDetector(3, 5, 0.75)
    want = coordinate(reports, detector, ceiling=ceiling, barred=barred)
    got = plan_reports(reports, detector, ceiling=ceiling, barred=barred)
    assert list(got) == list(reports)
    assert {h: got[h] for h in got} == dict(want)
    assert any(s.flag for s in want.values()) or seed == 1


def test_pipelines_of_the_same_names_are_equal() -> None:
    # built twice from the same names: two sets of plug-in objects, one configuration
    assert default_pipeline() == default_pipeline()
    assert default_pipeline() != build_pipeline(("maintenance",), (), (), (), ())
