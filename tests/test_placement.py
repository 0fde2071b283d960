"""Issue 24: placement rules and host drain in the planner (table-driven, arithmetic inline).

The cluster, alpha = 0.75, k = 3 of n = 5, three reports each (cpu, mem, net):

    h1  (0.20, 0.30, 0.90)  hot: net 3/3 over 0.75, forecast 0.90
    h2  (0.05, 0.10, 0.05)  volume 1/(0.95*0.90*0.95) = 1.231   the coldest
    h3  (0.10, 0.20, 0.10)  volume 1/(0.90*0.80*0.90) = 1.543
    h4  (0.10, 0.20, 0.30)  volume 1/(0.90*0.80*0.70) = 1.984   net 0.30 + 0.50 = 0.80 >= 0.75:
                                                                too full for db1
    h5  (0.15, 0.25, 0.15)  volume 1/(0.85*0.75*0.85) = 1.845

h1 runs db1 (0.05, 0.10, 0.50; 2 GiB): MF = 1/(0.95*0.90*0.50) / 2 GiB = 2.339 / 2 GiB, and
big (0.05, 0.10, 0.30; 8 GiB): 1.671 / 8 GiB, so db1 is Alg. 1's choice. Without rules it
goes to the coldest host that stays under 0.75: h2 (net 0.05 + 0.50 = 0.55). Each other
host runs one small VM named in the cases (x2..x5 unless a case renames it).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from pydantic import ValidationError

from sova.manager.decisions.core import Lease, ManagerCore
from sova.manager.decisions.fastplan import FAST_MIN_HOSTS, fast_coordinate
from sova.manager.decisions.placement import Bars, Placement, PlacementSpec, View
from sova.policy.hotspot import (
    HostReport,
    HotspotDetector,
    Utilisation,
    VMLoad,
    coordinate,
)

GIB = 2**30
UTIL = {
    "h1": (0.20, 0.30, 0.90),
    "h2": (0.05, 0.10, 0.05),
    "h3": (0.10, 0.20, 0.10),
    "h4": (0.10, 0.20, 0.30),
    "h5": (0.15, 0.25, 0.15),
}
TINY = (0.01, 0.01, 0.01, 1)


def _core(guests: dict[str, dict[str, Any]] | None = None, **kw: Any) -> ManagerCore:
    core = ManagerCore(detector=HotspotDetector(3, 5, 0.75), **kw)
    vms: dict[str, dict[str, Any]] = {
        "h1": {"db1": (0.05, 0.10, 0.50, 2), "big": (0.05, 0.10, 0.30, 8)},
        **{h: {f"x{h[1]}": TINY} for h in ("h2", "h3", "h4", "h5")},
    }
    for h, extra in (guests or {}).items():
        vms[h] = {**vms.get(h, {}), **extra}
    for t in range(3):
        for h, u in UTIL.items():
            core.ingest(
                h,
                Utilisation(*u),
                {
                    n: VMLoad(Utilisation(c, m, n_), gib * GIB)
                    for n, (c, m, n_, gib) in vms[h].items()
                },
                at=10.0 * t,
            )
    return core


def _placement(**spec: Any) -> Placement:
    return Placement.from_spec(PlacementSpec.model_validate(spec))


GROUPS = {
    "rack-a": ["h1", "h3"],
    "rack-b": ["h4"],
    "skylake": ["h1", "h3", "h5"],
    "icelake": ["h2", "h4"],
}


@pytest.mark.parametrize(
    ("spec", "guests", "target", "reason_has"),
    [
        # no rules: db1 to the coldest host that fits, h2 (1.231)
        ({}, {}, "h2", "move db1 to h2"),
        # anti-affinity db1/db2, db2 on h2: h2 barred, next coldest h3 (1.543)
        (
            {"rules": [{"name": "apart", "kind": "anti-affinity", "vms": ["db1", "db2"]}]},
            {"h2": {"db2": TINY}},
            "h3",
            "move db1 to h3",
        ),
        # affinity db1/cache1, cache1 on h5 (1.845): only h5 may take db1
        (
            {"rules": [{"name": "with", "kind": "affinity", "vms": ["db1", "cache1"]}]},
            {"h5": {"cache1": TINY}},
            "h5",
            "move db1 to h5",
        ),
        # affinity with cache1 on h1 too: moving db1 alone would part them: no move
        (
            {"rules": [{"name": "with", "kind": "affinity", "vms": ["db1", "cache1"]}]},
            {"h1": {"cache1": TINY}},
            None,
            "affinity rule with: cache1 is on h1",
        ),
        # must rack-a = {h1, h3}: h3
        (
            {
                "host_groups": GROUPS,
                "rules": [{"name": "r", "kind": "vm-host-must", "vms": ["db1"], "group": "rack-a"}],
            },
            {},
            "h3",
            "move db1 to h3",
        ),
        # must rack-b = {h4}: h4 would reach net 0.30 + 0.50 = 0.80 >= 0.75: no move
        (
            {
                "host_groups": GROUPS,
                "rules": [{"name": "r", "kind": "vm-host-must", "vms": ["db1"], "group": "rack-b"}],
            },
            {},
            None,
            "vm-host-must rule r",
        ),
        # should rack-b: h4 cannot take it, so the rule is broken for the coldest, h2
        (
            {
                "host_groups": GROUPS,
                "rules": [
                    {"name": "r", "kind": "vm-host-should", "vms": ["db1"], "group": "rack-b"}
                ],
            },
            {},
            "h2",
            "vm-host-should rule is broken",
        ),
        # should rack-a: h3 can take it: kept
        (
            {
                "host_groups": GROUPS,
                "rules": [
                    {"name": "r", "kind": "vm-host-should", "vms": ["db1"], "group": "rack-a"}
                ],
            },
            {},
            "h3",
            "move db1 to h3",
        ),
        # domains: h1 is skylake = {h1, h3, h5}; h2 and h4 are icelake: h3
        ({"host_groups": GROUPS, "migration_domains": ["skylake", "icelake"]}, {}, "h3", "to h3"),
        # domains and anti-affinity with db2 on h3: h5 (the only skylake host left)
        (
            {
                "host_groups": GROUPS,
                "migration_domains": ["skylake", "icelake"],
                "rules": [{"name": "apart", "kind": "anti-affinity", "vms": ["db1", "db2"]}],
            },
            {"h3": {"db2": TINY}},
            "h5",
            "to h5",
        ),
    ],
)
def test_rules_in_the_planner(
    spec: dict[str, Any], guests: dict[str, Any], target: str | None, reason_has: str
) -> None:
    core = _core(guests, placement=_placement(**spec))
    sig = core.plan(30.0).signals["h1"]
    assert sig.vm == "db1"
    assert (sig.flag, sig.target if sig.flag else None) == (target is not None, target), sig.reason
    assert reason_has in sig.reason
    # The approval re-check agrees with the planner on the target it chose.
    if target is not None and "should" not in reason_has:
        assert core.placement_refusal("db1", "h1", target) is None


def test_a_peer_in_flight_bars_both_its_hosts() -> None:
    """db2 is migrating h4 -> h2 (a lease): until it ends, it is on both; db1 goes to h3."""
    core = _core(
        {"h4": {"db2": TINY}},
        placement=_placement(
            rules=[{"name": "apart", "kind": "anti-affinity", "vms": ["db1", "db2"]}]
        ),
        max_concurrent_migrations=0,
    )
    core.open(Lease("db2", "h4", "h2", 25.0, 7))
    sig = core.plan(30.0).signals["h1"]
    assert (sig.flag, sig.target) == (True, "h3"), sig.reason
    assert core.placement_refusal("db1", "h1", "h2") == "anti-affinity rule apart: db2 is on h2"


def _report(core: ManagerCore, host: str, vms: dict[str, Any], t: float) -> None:
    """One more report of ``host`` (its utilisation as in the table) naming only ``vms``."""
    core.ingest(
        host,
        Utilisation(*UTIL[host]),
        {n: VMLoad(Utilisation(c, m, n_), gib * GIB) for n, (c, m, n_, gib) in vms.items()},
        at=t,
    )


APART = [{"name": "apart", "kind": "anti-affinity", "vms": ["db1", "db2"]}]
WITH = [{"name": "with", "kind": "affinity", "vms": ["db1", "cache1"]}]


@pytest.mark.parametrize(
    ("rules", "history", "target", "why"),
    [
        # db2 named by h2 at t=0..20, then idle: h2's report at 25 names only x2 (a report
        # names a few candidates). db2 is still on h2: h2 barred, next coldest h3 (1.543).
        (APART, [("h2", {"db2": TINY}), ("h2", {"x2": TINY})], "h3", None),
        # db2 never named by any report: its host is unknown, so db1 may not move at all.
        (APART, [], None, "anti-affinity rule apart: peer db2's host unknown"),
        # db2 sent h4 -> h2 (a lease), the source reports it succeeded; h2's next report
        # does not name db2: it is on h2 (the target), so h2 is barred: h3 (1.543).
        (APART, [("h4", {"db2": TINY}), ("lease", "db2", "h4", "h2", True)], "h3", None),
        # the same migration failed (rolled back): db2 is on h4, not h2: h2 (1.231) again.
        (APART, [("h4", {"db2": TINY}), ("lease", "db2", "h4", "h2", False)], "h2", None),
        # cache1 named by h5 (1.845) once, then idle: db1 may join it only there: h5.
        (WITH, [("h5", {"cache1": TINY}), ("h5", {"x5": TINY})], "h5", None),
        # cache1 never named: db1 stays (affinity with an unknown peer refuses the move).
        (WITH, [], None, "affinity rule with: peer cache1's host unknown"),
    ],
)
def test_rules_see_vms_the_latest_reports_do_not_name(
    rules: list[dict[str, Any]], history: list[tuple[Any, ...]], target: str | None, why: str | None
) -> None:
    """Issue 24 review: a rule peer idle on a host (not among its report's candidates)."""
    # (the windows are not restarted by the migrations: every host reports as in the table)
    core = _core(
        placement=_placement(rules=rules),
        max_concurrent_migrations=0,
        restart_window_after_migration=False,
    )
    t = 21.0
    for step in history:
        if step[0] == "lease":
            _, vm, src, dst, ok = step
            core.open(Lease(vm, src, dst, t, 7))
            core.release(vm, lease_id=7, landed=ok)
        else:
            _report(core, step[0], step[1], t)
        t += 1.0
    sig = core.plan(30.0).signals["h1"]
    assert sig.vm == "db1"
    assert (sig.flag, sig.target if sig.flag else None) == (target is not None, target), sig.reason
    if target is not None:
        assert core.placement_refusal("db1", "h1", target) is None
        if target != "h2" and rules is APART:
            assert core.placement_refusal("db1", "h1", "h2") == (
                "anti-affinity rule apart: db2 is on h2"
            )
    else:
        assert why is not None and why in sig.reason
        assert core.placement_refusal("db1", "h1", "h2") == why


def test_a_drain_says_which_rule_peer_is_unknown() -> None:
    """h1 drained; db1 and big are anti-affine with db2 and db9, never reported: each
    VM's every host is barred, and the status names the unknown peer."""
    core = _core(
        placement=_placement(
            rules=[
                *APART,
                {"name": "apart2", "kind": "anti-affinity", "vms": ["big", "db9"]},
            ]
        ),
        draining={"h1"},
    )
    sig = core.plan(30.0).signals["h1"]
    assert not sig.flag, sig.reason
    assert "peer db2's host unknown" in sig.reason and "peer db9's host unknown" in sig.reason


def test_an_anti_affinity_pair_is_never_put_on_one_host_by_a_drain() -> None:
    """h1 drained with db1, db2 (anti-affine) and big: one VM a round, each lease ended
    before the next round (the windows are not restarted, so every host reports as in the
    table above)."""
    core = _core(
        {"h1": {"db2": (0.05, 0.10, 0.40, 2)}},
        placement=_placement(
            rules=[{"name": "apart", "kind": "anti-affinity", "vms": ["db1", "db2"]}]
        ),
        draining={"h1"},
        vm_cooldown_s=0,
        restart_window_after_migration=False,
    )
    moves = []
    t = 30.0
    for _ in range(4):
        r = core.plan(t)
        for lease in r.opened:
            moves.append((lease.vm, lease.dst))
            core.release(lease.vm, lease_id=lease.id)
            # The VM now reports from its target (the next reports are the new placement).
            vms = dict(core.vms[lease.src])
            moved = vms.pop(lease.vm)
            core.vms[lease.src] = vms
            core.vms[lease.dst] = {**core.vms[lease.dst], lease.vm: moved}
        t += 10.0
    # db1: volume 1/(0.95*0.9*0.5) = 2.339 per 2 GiB; db2: 1/(0.95*0.9*0.6) = 1.949 per 2 GiB;
    # big: 1.671 per 8 GiB. Coldest first: h2, then h3 (db2 may not join db1 on h2; and h2
    # is still the coldest by its report), then h2 again for big.
    assert moves == [("db1", "h2"), ("db2", "h3"), ("big", "h2")]
    hosts_of = {vm: dst for vm, dst in moves}
    assert hosts_of["db1"] != hosts_of["db2"]
    sig = core.plan(t).signals["h1"]
    assert not sig.flag and "no VM left to move" in sig.reason


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"rules": [{"name": "a", "kind": "affinity", "vms": ["v"]}]}, "needs two VMs"),
        (
            {"rules": [{"name": "a", "kind": "vm-host-must", "vms": ["v"], "group": "nope"}]},
            "rules[0].group = 'nope': not a host group",
        ),
        ({"migration_domains": ["cpu"]}, "migration_domains: 'cpu' is not a host group"),
        ({"rules": [{"name": "a", "kind": "sideways", "vms": ["v", "w"]}]}, "rules.0.kind"),
        (
            {
                "rules": [
                    {"name": "a", "kind": "affinity", "vms": ["v", "w"]},
                    {"name": "a", "kind": "anti-affinity", "vms": ["v", "w"]},
                ]
            },
            "rules[1].name = 'a': another rule has this name",
        ),
    ],
)
def test_bad_rules_are_named(spec: dict[str, Any], error: str) -> None:
    with pytest.raises(ValidationError) as e:
        PlacementSpec.model_validate(spec)
    text = str(e.value)
    assert error in text or error in ".".join(str(x) for x in e.value.errors()[0]["loc"]), text


@pytest.mark.parametrize("seed", range(12))
def test_the_fast_round_applies_the_rules_exactly(seed: int) -> None:
    """Rule bars over a cluster the vectorised round handles: equal to ``coordinate``."""
    rng = random.Random(seed)
    n = FAST_MIN_HOSTS + 50 * seed
    names = [f"h{i:04d}" for i in range(n)]
    reports: dict[str, HostReport] = {}
    for i, h in enumerate(names):
        hot = rng.random() < 0.05
        hist = tuple(
            Utilisation(
                rng.uniform(0, 0.6),
                rng.uniform(0, 0.6),
                rng.uniform(0.8, 1.0) if hot else rng.uniform(0, 0.7),
            )
            for _ in range(3)
        )
        vms = {
            f"v{i}-{j}": VMLoad(
                Utilisation(rng.uniform(0, 0.2), rng.uniform(0, 0.2), rng.uniform(0, 0.3)),
                rng.choice((1, 2, 8)) * GIB,
            )
            for j in range(3)
        }
        reports[h] = HostReport(hist, vms)
    every = [vm for r in reports.values() for vm in r.vms]
    pairs = [rng.sample(every, 2) for _ in range(n // 4)]
    groups = {"a": rng.sample(names, n // 3), "b": rng.sample(names, n // 2)}
    spec = PlacementSpec.model_validate(
        {
            "host_groups": groups,
            "migration_domains": ["a"] if seed % 2 else [],
            "rules": [
                {"name": f"p{k}", "kind": "anti-affinity", "vms": p} for k, p in enumerate(pairs)
            ]
            + [
                {"name": "must", "kind": "vm-host-must", "vms": rng.sample(every, 50), "group": "b"}
            ],
        }
    )
    placement = Placement.from_spec(spec)
    index = {vm: h for h, r in reports.items() for vm in r.vms}
    view = View.of({h: r.vms for h, r in reports.items()}, only=placement.members)
    det = HotspotDetector(3, 5, 0.75)
    fast = fast_coordinate(reports, det, barred=Bars(placement, view, index.get, names))
    slow = coordinate(reports, det, barred=Bars(placement, view, index.get, names))
    assert fast == slow
    flagged = [s for s in fast.values() if s.flag]
    assert flagged, "the case moves something"
    for h, s in fast.items():
        if s.flag:
            assert s.vm is not None and s.target is not None
            assert placement.refusal(s.vm, h, s.target, view) is None


@pytest.mark.parametrize(
    ("kw", "setup", "flag", "reason_has"),
    [
        # nothing in the way: db1 (the largest MF) to the coldest, h2
        ({}, None, True, "drain: move db1 to h2"),
        # one migration already in flight elsewhere (h4 -> h5) and at most one at a time
        (
            {"max_concurrent_migrations": 1},
            ("x4", "h4", "h5"),
            False,
            "held: 1 migration(s) in flight (max_concurrent_migrations = 1)",
        ),
        # db1 left h2 at t=0: the return tabu (900 s) bars h2, so h3 (1.543) takes it
        ({}, ("tabu", "h2", 0.0), True, "drain: move db1 to h3"),
        # db1 was sent somewhere 10 s ago: its cooldown (300 s) holds the drain's move
        ({}, ("cooldown", "", 20.0), False, "held: db1 moved 10s ago (vm_cooldown_s = 300)"),
    ],
)
def test_a_drain_obeys_the_migration_limits(
    kw: dict[str, Any], setup: tuple[Any, ...] | None, flag: bool, reason_has: str
) -> None:
    core = _core(draining={"h1"}, **kw)
    if setup is not None and setup[0] == "tabu":
        core.departed["db1"] = {setup[1]: setup[2]}
    elif setup is not None and setup[0] == "cooldown":
        core.last_moved["db1"] = setup[2]
    elif setup is not None:
        core.open(Lease(setup[0], setup[1], setup[2], 25.0, 9))
    sig = core.plan(30.0).signals["h1"]
    assert sig.flag == flag and reason_has in sig.reason, sig.reason


@pytest.mark.parametrize("seed", range(30))
def test_each_filters_bars_are_exactly_its_refusals(seed: int) -> None:
    """A round asks a filter for a VM's barred hosts by set operations; approval asks it
    host by host. Both must say the same (random groups, domains, rules, leases)."""
    rng = random.Random(seed)
    hosts = [f"h{i}" for i in range(12)]
    vms = [f"v{i}" for i in range(12)]
    on = {vm: rng.choice(hosts) for vm in vms[:10]}  # v10, v11: never reported
    flights = [(vm, on[vm], rng.choice(hosts)) for vm in rng.sample(vms[:10], 2)]
    groups = {g: rng.sample(hosts, rng.randint(1, 8)) for g in ("a", "b", "c")}
    rules: list[dict[str, Any]] = []
    for k in range(4):
        kind = rng.choice(["anti-affinity", "affinity", "vm-host-must", "vm-host-should"])
        rule: dict[str, Any] = {"name": f"r{k}", "kind": kind}
        if kind.startswith("vm-host"):
            rule |= {"vms": rng.sample(vms, 3), "group": rng.choice(list(groups))}
        else:
            rule |= {"vms": rng.sample(vms, rng.randint(2, 4))}
        rules.append(rule)
    placement = _placement(
        host_groups=groups, migration_domains=rng.sample(list(groups), 2), rules=rules
    )
    located = {vm: frozenset((h,)) for vm, h in on.items()}
    view = View.last_known(located, flights, placement.members)
    every = frozenset(hosts)
    for f in placement.filters:
        for vm in vms[:10]:
            if not f.applies(vm):
                continue
            src = on[vm]
            slow = {h for h in hosts if h != src and f.refuses(vm, src, h, view) is not None}
            assert f.bars(vm, src, every, view) - {src} == slow, (f.name, vm, src)


@pytest.mark.parametrize(
    ("spec", "pinned", "flag", "reason_has"),
    [
        # should "solo" = {h1} for db1 and big: no other host is in the group, so the
        # rule alone blocks both; as a round does, the drain breaks it for db1 (the larger
        # MF, 2.339 / 2 GiB) and sends it to the coldest, h2 (net 0.05 + 0.50 = 0.55).
        (
            {
                "host_groups": {"solo": ["h1"]},
                "rules": [
                    {"name": "s", "kind": "vm-host-should", "vms": ["db1", "big"], "group": "solo"}
                ],
            },
            set(),
            True,
            "drain: move db1 to h2 (a vm-host-should rule is broken",
        ),
        # the must-rule twin stays binding: no move
        (
            {
                "host_groups": {"solo": ["h1"]},
                "rules": [
                    {"name": "s", "kind": "vm-host-must", "vms": ["db1", "big"], "group": "solo"}
                ],
            },
            set(),
            False,
            "e.g. vm-host-must rule s: h2 is not in host group solo",
        ),
        # every VM h1's report names is pinned: unreported ones may remain, and it says so
        ({}, {"db1", "big"}, False, "unpinned VMs it did not name may remain"),
    ],
)
def test_a_drain_breaks_should_rules_as_a_round_does(
    spec: dict[str, Any], pinned: set[str], flag: bool, reason_has: str
) -> None:
    core = _core(placement=_placement(**spec), draining={"h1"}, pinned=pinned)
    sig = core.plan(30.0).signals["h1"]
    assert sig.flag == flag and reason_has in sig.reason, sig.reason
