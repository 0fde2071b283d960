"""The manager's round from its window arrays decides exactly what ``coordinate`` decides,
and its batch intake (``ingest_arrays``) does exactly what per-host ``ingest`` does.

``ManagerCore`` keeps each host's detector window once, in
:class:`sova.manager.decisions.fastplan.WindowArrays` (a host x window ring the round reads in one
pass); ``history`` holds views of it (or deques put in from outside, a restore's). Random heterogeneous clusters go through random report sequences
(windows short, full and wrapped, hosts silent past ``stale_after_s``, migrations whose end
restarts both windows and drops the next report, hosts forgotten, windows put in by a
restore) and the round must return, signal by signal and reason by reason, what the
readable ``coordinate`` returns for the reports built from the deques.
"""

from __future__ import annotations

import random
from collections import deque

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sova.manager.decisions.core import Lease, ManagerCore
from sova.manager.decisions.fastplan import Signals, WindowArrays, notable
from sova.policy.hotspot import (
    HostCapacity,
    HostReport,
    HotspotDetector,
    Utilisation,
    VMLoad,
    coordinate,
)

GENERATIONS = (HostCapacity(16, 64, 10), HostCapacity(32, 256, 25), HostCapacity(64, 512, 40))


def _util(rng: random.Random, hot: bool) -> Utilisation:
    r = rng.random()
    if r < 0.05:  # a constant window at exactly alpha
        return Utilisation(0.75, 0.75, 0.75)
    if r < 0.08:
        return Utilisation(0.0, 0.0, 0.0)
    if r < 0.10:  # past the volume clamp
        return Utilisation(1.0, 1.04, 0.9995)
    base = rng.uniform(0.7, 1.0) if hot else rng.uniform(0.0, 0.8)
    return Utilisation(rng.uniform(0, 0.9), rng.uniform(0, 0.9), base)


def _vms(rng: random.Random, host: int) -> dict[str, VMLoad]:
    return {
        f"vm{host}-{j}": VMLoad(
            Utilisation(rng.uniform(0, 0.3), rng.uniform(0, 0.3), rng.uniform(0, 0.4)),
            rng.choice((1, 2, 8)) * 2**30,
            migrating=rng.random() < 0.05,
        )
        for j in range(rng.randint(0, 4))
    }


def _run(seed: int, hosts: int, n: int, k: int, metric: str, ceiling: float | None) -> None:
    rng = random.Random(seed)
    core = ManagerCore(
        detector=HotspotDetector(k, n, 0.75),
        metric=metric,
        ceiling=ceiling,
        # no brakes and no return tabu: the round's signals are coordinate()'s, unedited
        return_tabu_s=0.0,
        max_concurrent_migrations=0,
        max_migrations_per_hour=0,
        vm_cooldown_s=0.0,
        lease_timeout_s=1e9,
        stale_after_s=25.0,
    )
    names = [f"h{i:04d}" for i in range(hosts)]
    heterogeneous = rng.random() < 0.5
    caps = {h: rng.choice(GENERATIONS) for h in names}
    hot_share = rng.choice((0.0, 0.01, 0.1, 0.4))
    hot = {h for h in names if rng.random() < hot_share}
    vms = {h: _vms(rng, i) for i, h in enumerate(names)}
    silent = {h for h in names if rng.random() < 0.1}
    t = 0.0
    for rnd in range(rng.randint(1, 2 * n + 2)):
        t = 10.0 * rnd
        batch = [
            (h, _util(rng, h in hot), vms[h], caps[h] if heterogeneous else None)
            for h in names
            if not (h in silent and 1 <= rnd <= 3) and rng.random() < 0.95
        ]
        r = rng.random()
        if r < 0.35:
            core.ingest_many(batch, at=t)
        elif r < 0.7:  # a simulated world's path: the loads as one array
            core.ingest_arrays(
                tuple(h for h, _, _, _ in batch),
                np.array([u.as_tuple() for _, u, _, _ in batch]).reshape(-1, 3),
                [v for _, _, v, _ in batch],
                [c for _, _, _, c in batch],
                at=t,
            )
        else:
            for h, u, v, c in batch:  # the daemon's path: a batch of one
                core.ingest(h, u, v, at=t, capacity=c)
        if rng.random() < 0.2 and len(names) > 2:  # a migration ends: both windows restart
            src, dst = rng.sample(names, 2)
            core.open(Lease(f"moved{rnd}", src, dst, t))
            core.release(f"moved{rnd}")
        if rng.random() < 0.05:
            gone = rng.choice(names)
            core.forget(gone)
        if rng.random() < 0.05:  # a restore puts in an empty window of its own
            core.history.pop(h := rng.choice(names), None)
            core.history.setdefault(h, deque(maxlen=n))
    now = t + 5.0
    fresh = [h for h, w in core.history.items() if w and now - core.seen[h] <= 25.0]
    for i, h in enumerate(rng.sample(fresh, min(len(fresh), rng.randint(0, 3)))):
        core.open(Lease(f"leased{i}", h, rng.choice(names), now))
    if fresh and rng.random() < 0.3:
        core.maintenance[rng.choice(fresh)] = "disk"
    if rng.random() < 0.3:
        core.pinned = {f"vm{i}-0" for i in range(0, hosts, 3)}

    stale = core.stale(now)
    planned = {h: w for h, w in core.history.items() if w and h not in stale}
    with_caps = all(h in core.capacity for h in planned)
    reports = {
        h: HostReport(
            tuple(w),
            {m: v for m, v in core.vms.get(h, {}).items() if m not in core.pinned},
            core.capacity[h] if with_caps else None,
        )
        for h, w in planned.items()
    }
    fenced = {h: f"host in maintenance ({why})" for h, why in core.maintenance.items()}
    expected = coordinate(
        reports,
        core.detector,
        metric=metric,
        ceiling=ceiling,
        leased=core.leased_hosts(),
        fenced=fenced,
        cost=core.move_cost,
    )

    # the ring holds each planned host's deque, oldest first
    groups, last = core.windows().windows(list(planned), planned)
    order = list(planned)
    for n_obs, sel, windows in groups:
        for j, row in zip(sel.tolist(), windows, strict=True):
            want = [u.as_tuple() for u in planned[order[j]]][-n:]
            assert n_obs == len(want) and row.tolist() == [list(x) for x in want]
    assert last.tolist() == [list(planned[h][-1].as_tuple()) for h in order]

    result = core.plan(now)
    assert dict(result.signals) == expected
    assert list(result.signals) == sorted(expected)
    # notable() leaves out only plain "not hot" verdicts
    left_out = set(expected) - {h for h, _ in notable(result.signals)}
    assert all(
        not expected[h].flag and not expected[h].hot_resources and expected[h].target is None
        for h in left_out
    )
    assert result.flagged == sorted(h for h, s in expected.items() if s.flag)
    assert {d.host for d in result.decisions} == {
        h for h, s in expected.items() if s.flag or s.hot_resources
    }


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    hosts=st.integers(1, 40),
    n=st.integers(1, 6),
    k_share=st.floats(0.0, 1.0),
    metric=st.sampled_from(("volume", "skewness")),
    ceiling=st.sampled_from((None, 0.9)),
)
def test_round_from_window_arrays_equals_coordinate_small(
    seed: int, hosts: int, n: int, k_share: float, metric: str, ceiling: float | None
) -> None:
    _run(seed, hosts, n, 1 + int(k_share * (n - 1)), metric, ceiling)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    hosts=st.integers(200, 400),
    metric=st.sampled_from(("volume", "skewness")),
    ceiling=st.sampled_from((None, 0.9)),
)
def test_round_from_window_arrays_equals_coordinate_large(
    seed: int, hosts: int, metric: str, ceiling: float | None
) -> None:
    # past fastplan's 64 spare hosts: the exact search runs on a subset (or falls back)
    _run(seed, hosts, 5, 3, metric, ceiling)


def test_quiet_signals_are_built_when_read() -> None:
    rng = random.Random(7)
    reports = {
        f"h{i}": HostReport(tuple(_util(rng, i < 2) for _ in range(5)), _vms(rng, i))
        for i in range(300)
    }
    det = HotspotDetector(3, 5, 0.75)
    arrays = WindowArrays(5)
    for h, rep in reports.items():
        arrays.sync(h, rep.history)
    from sova.manager.decisions.fastplan import coordinate_windows

    names = list(reports)
    sig = coordinate_windows(
        names, *arrays.windows(names, reports_history(reports)), reports.__getitem__, det
    )
    assert isinstance(sig, Signals) and not sig._built
    quiet = next(h for h in sorted(reports) if h not in dict(sig.notable()))
    assert sig[quiet] == coordinate(reports, det)[quiet] and quiet in sig._built
    sig[quiet] = sig[quiet]  # set: now notable
    assert quiet in dict(sig.notable()) and len(sig) == len(reports)
    del sig[quiet]
    assert quiet not in sig and len(sig) == len(reports) - 1


def reports_history(reports: dict[str, HostReport]) -> dict[str, tuple[Utilisation, ...]]:
    return {h: r.history for h, r in reports.items()}


def _old_core(core: ManagerCore) -> ManagerCore:
    """``core`` keeping every window it makes as a deque of ``Utilisation`` (the arrays only
    mirror them): the record before the batch intake, the reference here."""
    arrays = core.windows()
    arrays.window = lambda host: deque(maxlen=arrays.n)  # type: ignore[assignment,method-assign,return-value]
    return core


def _intake(seed: int, hosts: int, n: int) -> None:
    rng = random.Random(seed)

    def make() -> ManagerCore:
        return ManagerCore(detector=HotspotDetector(1, n, 0.75), stale_after_s=25.0)

    ref, fast = _old_core(make()), make()
    names = [f"h{i:03d}" for i in range(hosts)]
    caps = {h: rng.choice((*GENERATIONS, None)) for h in names}
    vms = {h: _vms(rng, i) for i, h in enumerate(names)}
    closed_ref: list[object] = []
    closed_fast: list[object] = []
    t = 0.0
    for rnd in range(rng.randint(1, 3 * n + 3)):
        t += rng.choice((10.0, 10.0, 30.0))  # a 30 s gap: every host is back from a silence
        batch = [h for h in names if rng.random() < 0.9]
        rng.shuffle(batch)
        loads = [_util(rng, rng.random() < 0.3) for _ in batch]
        for h in batch:
            if rng.random() < 0.05 and len(names) > 1:  # a VM migrates onto h: a lease
                vm = f"mv{rnd}-{h}"
                src = rng.choice([x for x in names if x != h])
                for c in (ref, fast):
                    c.open(Lease(vm, src, h, t))
                if rng.random() < 0.5:  # and arrives in this very batch (or a later one)
                    vms[h] = {**vms[h], vm: VMLoad(Utilisation(0.1, 0.1, 0.1), 2**30)}
        for h, u in zip(batch, loads, strict=True):
            closed_ref += ref.ingest(h, u, vms[h], at=t, capacity=caps[h])
        closed_fast += fast.ingest_arrays(
            tuple(batch),
            np.array([u.as_tuple() for u in loads]).reshape(-1, 3),
            [vms[h] for h in batch],
            [caps[h] for h in batch],
            at=t,
        )
        for c in (ref, fast):
            if rnd % 4 == 3 and c.leases:  # a migration's end restarts both windows
                c.release(min(c.leases))
        if rng.random() < 0.1:
            gone = rng.choice(names)
            for c in (ref, fast):
                c.forget(gone)
        if rng.random() < 0.1:  # a restore puts in a deque of its own
            h = rng.choice(names)
            for c in (ref, fast):
                c.history.pop(h, None)
                c.history[h] = deque(maxlen=n)
        assert closed_fast == closed_ref
        assert {h: list(w) for h, w in fast.history.items()} == {
            h: list(w) for h, w in ref.history.items()
        }
        assert dict(fast.vms) == dict(ref.vms) and fast.capacity == ref.capacity
        assert fast.seen == ref.seen and fast._skip == ref._skip and fast.leases == ref.leases
    assert all(type(w) is deque for w in ref.history.values())
    result, want = fast.plan(t), ref.plan(t)
    assert dict(result.signals) == dict(want.signals)
    assert result.decisions == want.decisions


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), hosts=st.integers(1, 30), n=st.integers(1, 5))
def test_batch_intake_is_each_report_in_turn(seed: int, hosts: int, n: int) -> None:
    # random heterogeneous clusters (capacities of three generations or none), random
    # subsets reporting in random order (silent hosts, some back past stale_after_s: their
    # windows restart), windows short, full and wrapped (n as small as 1), leases closed by
    # a VM arriving within a batch (the ordered path) and by releases (both windows restart,
    # the next report is dropped), hosts forgotten, deques put in by a restore
    _intake(seed, hosts, n)


def test_batch_intake_refuses_a_bad_load_whole() -> None:
    core = ManagerCore()
    good = np.full((3, 3), 0.5)
    core.ingest_arrays(("a", "b", "c"), good, [{}, {}, {}], [None] * 3, at=0.0)
    before = {h: list(w) for h, w in core.history.items()}, dict(core.seen)
    for bad, field, value in (
        (1.5, "mem", "1.5"),
        (float("nan"), "mem", "nan"),
        (-0.1, "mem", "-0.1"),
    ):
        util = good.copy()
        util[2, 1] = bad
        try:
            core.ingest_arrays(("a", "b", "c"), util, [{}, {}, {}], [None] * 3, at=10.0)
        except ValueError as exc:
            assert str(exc) == f"host c: {field} utilisation must be in [0, 1], got {value}"
        else:
            raise AssertionError("accepted a bad load")
        # nothing of the batch was taken, not even the good hosts' loads
        assert ({h: list(w) for h, w in core.history.items()}, dict(core.seen)) == before
