"""The world's VF scheduling of every host at once (sim/fleet_control.py) against every
agent scheduling its own host: the same step reports period by period (decisions with their
reasons, desired holders, planned actions), timeline, events and applied state; and the timeline
rows the world builds from arrays against the step report's rows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sova.agent.loop import HostAgent, StepReport
from sova.model import Inventory
from sova.scenario import Scenario, load_sweep
from sova.sim.fleet_control import HostVMs
from sova.sim.world import World

ROOT = Path(__file__).resolve().parents[1]


def _records(a: HostAgent) -> tuple[Any, ...]:
    """What an agent keeps from one period to the next (its step's effect on itself)."""
    return (
        dict(a.vf_since),
        list(a.vf_since),
        dict(a._last_desired),
        list(a._last_desired),
        a._last_ranking,
        a._ops_this_period,
        a._measured,
        a.snapshot,
        a.last_load,
        dict(a.last_vm_loads),
        dict(a.migrating),
        a.signalled,
    )


def _forget(world: World) -> None:
    """Every agent loses its dwell starts (its process restarted; the host's VFs stay
    attached): its next period finds holders it has no record of."""
    for a in world.agents.values():
        a.vf_since.clear()


def _run(
    scn: Scenario,
    policy: str,
    fleet: bool,
    forget: float | None = None,
    prepare: Callable[[World], None] | None = None,
) -> tuple[list[Any], ...]:
    spec = next(p for p in scn.policy_specs if p.name == policy)
    world = World(scn, spec)
    if prepare is not None:
        prepare(world)
    if not fleet:
        world._control = None  # every agent schedules its own host
    steps: list[tuple[str, StepReport | None]] = []
    kept: list[tuple[str, tuple[Any, ...]]] = []
    record = world._record

    def keep(t: float, reports: dict[str, StepReport | None]) -> None:
        steps.extend(reports.items())
        kept.extend((h, _records(a)) for h, a in world.agents.items())
        record(t, reports)

    world._record = keep  # type: ignore[method-assign]
    if forget is not None:
        world.run_until(forget)
        _forget(world)
    run = world.run_until(scn.duration)
    eng = world.engine
    reports = [
        (h, None)
        if r is None
        else (
            h,
            r.time_s,
            r.decision,
            None if r.decision is None else list(r.decision.reasons.items()),
            dict(r.desired_rates),
            list(r.planned),
            dict(r.operations),
            r.migration,
        )
        for h, r in steps
    ]
    state = (eng.on_vf.tolist(), eng.vf_max.tolist(), eng.host.tolist())
    return reports, kept, list(run.timeline), list(run.events), list(run.decisions), [state]


def _assert_as_each_agent_alone(fast: tuple[list[Any], ...], slow: tuple[list[Any], ...]) -> None:
    """The world's run (``fast``) against each agent stepping alone (``slow``): a settled
    host's agent made no report (HostAgent.settle), so its own step planned nothing and
    chose no migration; the others' reports are the agents' own; and every agent's records
    after every period, settled or not, are its own step's."""
    for got, want in zip(fast[0], slow[0], strict=True):
        if got[1] is None:
            assert got[0] == want[0] and want[5] == [] and want[7] is None
        else:
            assert got == want
    for got_all, want_all in zip(fast[1:], slow[1:], strict=True):
        assert got_all == want_all


def _scenario(name: str, duration: float, **scheduler: Any) -> Scenario:
    scn = load_sweep(ROOT / "scenarios" / f"{name}.yaml")[0]
    ctl = scn.controller
    if scheduler:
        ctl = ctl.model_copy(update={"scheduler": ctl.scheduler.model_copy(update=scheduler)})
    return scn.model_copy(update={"duration": duration, "controller": ctl})


@pytest.mark.parametrize(
    ("name", "policy", "duration", "scheduler"),
    [
        # IF/NF ranking, dwell, hot spots, a live migration (signals, a VM leaving)
        ("sova-tour", "sova", 600.0, {}),
        # the top-q filter on IF, ranking by NF, no hysteresis: VFs move more often
        ("sova-tour", "sova", 600.0, {"io_filter": "top-q", "top_q": 2, "hysteresis": 0.0}),
        ("sova-fig6", "sova", 300.0, {}),  # a VF moves between VMs, then a migration
        ("dsr-iov-table3", "dsr-iov", 1800.0, {}),  # the paper's holders phase by phase
        ("dsr-iov-fig7a", "dsr-iov", 120.0, {}),  # many VMs on one host
    ],
)
def test_world_schedules_as_each_agent_alone(
    name: str, policy: str, duration: float, scheduler: dict[str, Any]
) -> None:
    scn = _scenario(name, duration, **scheduler)
    fast = _run(scn, policy, fleet=True)
    slow = _run(scn, policy, fleet=False)
    assert any(r[1] is not None and r[2] is not None for r in fast[0])  # kernel decisions
    # a settled host's agent made no report (HostAgent.settle): its own step planned
    # nothing and chose no migration; the others' reports are the agents' own
    assert any(r[1] is None for r in fast[0])
    _assert_as_each_agent_alone(fast, slow)


def test_holders_found_without_a_dwell_start_are_recorded_as_each_agent_alone() -> None:
    # the agents forget their dwell starts mid-run: a settled host's agent records the holders
    # it finds without a dwell start (HostAgent.settle's ``unrecorded``) as its own step's
    # policy does, in its inventory's order
    scn = _scenario("sova-tour", 300.0)
    unrecorded: list[tuple[str, ...]] = []
    settle = HostAgent.settle

    def spy(self: HostAgent, *args: Any) -> None:
        if len(args) > 5 and args[5]:
            unrecorded.append(tuple(args[5]))
        settle(self, *args)

    HostAgent.settle = spy  # type: ignore[method-assign]
    try:
        fast = _run(scn, "sova", fleet=True, forget=150.0)
    finally:
        HostAgent.settle = settle  # type: ignore[method-assign]
    slow = _run(scn, "sova", fleet=False, forget=150.0)
    assert unrecorded  # the case happened
    for got_all, want_all in zip(fast[1:], slow[1:], strict=True):
        assert got_all == want_all


def _booted(world: World) -> None:
    """VFs attached before the agents start (so their first, unmeasured period finds
    holders): HM1's web and db, db without its failover backup (ineligible: the warm-up
    detaches it); HM2's video, plain; HM3's replica with a max rate."""
    e = world.engine
    for vm, k in (("web", 0), ("db", 1), ("video", 0), ("replica", 0)):
        i = e.vm_index[vm]
        e.on_vf[i], e.vf_index[i] = True, k
    e.ready[e.vm_index["db"]] = False
    e.vf_max[e.vm_index["replica"]] = 2e9


def test_hosts_not_measured_yet_settle_as_their_warm_up_would() -> None:
    # the first period no host has measured: the policy's warm-up keeps the eligible
    # holders. A host whose holders are all eligible and unrated plans nothing (HM2, and
    # nothing held at all), so the world settles it as it settles a measured one; HM1
    # (an ineligible holder to detach) and HM3 (a rated holder) step. Before, every host
    # stepped its first period (1,000 step reports and their rows at 1,000 hosts).
    scn = _scenario("sova-tour", 60.0)
    fast = _run(scn, "sova", fleet=True, prepare=_booted)
    slow = _run(scn, "sova", fleet=False, prepare=_booted)
    first = {r[0]: r for r in fast[0][:3]}
    assert first["HM2"][1] is None  # settled in its unmeasured period
    assert first["HM1"][1] is not None and first["HM1"][5]  # stepped, detaching db
    assert first["HM3"][1] is not None
    _assert_as_each_agent_alone(fast, slow)


def test_settled_hosts_get_no_sensed_built() -> None:
    # a settled host's agent takes its holders, ranking and loads (HostAgent.settle): the
    # world builds no Sensed for it (nor its factors' mapping), only for the hosts whose
    # agents step; before, deciding which hosts the world decides for read every host's
    # Sensed (``measured``) and handed on a dict of all of them
    scn = _scenario("sova-tour", 600.0)
    world = World(scn, next(p for p in scn.policy_specs if p.name == "sova"))
    control, sensing = world._control, world._sensing
    assert control is not None and sensing is not None
    record = world._record
    settled = stepped = 0

    def check(t: float, reports: dict[str, StepReport | None]) -> None:
        nonlocal settled, stepped
        assert control is not None and sensing is not None and sensing.last is not None
        built = sensing.last._built
        for hi, h in enumerate(world.engine.host_names):
            if h in control.settled:
                assert reports[h] is None and built[hi] is None, (t, h)
                settled += 1
            else:
                assert reports[h] is not None and built[hi] is not None, (t, h)
                stepped += 1
        record(t, reports)

    world._record = check  # type: ignore[method-assign]
    world.run_until(scn.duration)
    assert settled > 0 and stepped > 0


def test_settled_hosts_plan_nothing_and_moving_hosts_act() -> None:
    # sova-tour's VFs follow the load at 200 s and 400 s: some periods move VFs, most do
    # not; the world must mark only the quiet ones settled
    scn = _scenario("sova-tour", 600.0)
    spec = next(p for p in scn.policy_specs if p.name == "sova")
    world = World(scn, spec)
    control = world._control
    assert control is not None
    seen: list[tuple[bool, bool]] = []
    decide = control.decide

    def spy(*args: Any) -> Any:
        out = decide(*args)
        for h, s in out.items():
            # settled: decided by the world, handed only holders and ranking
            seen.append((s.vf is not None or h in control.settled, h in control.settled))
            if h in control.settled:
                actual, desired, ranking, _ = control.settled[h]
                assert set(desired) == actual.vf_holders, h
                pq = list(desired)
                assert pq == [vm for vm in ranking if vm in desired], h
                assert all(actual.vms[vm].vf_max_bps is None for vm in pq), h
        return out

    control.decide = spy  # type: ignore[method-assign]
    world.run_until(scn.duration)
    assert (True, True) in seen
    assert (True, False) in seen
    assert all(vf or not settled for vf, settled in seen)


@pytest.mark.parametrize(("name", "policy"), [("sova-tour", "sova"), ("sova-fig6", "sova")])
def test_inventories_read_when_first_read_equal_the_reads_of_their_moment(
    name: str, policy: str
) -> None:
    # a settled host's inventory builds its VMs when first read, by then the clock has run
    # (VF moves, limits set every second, a live migration in sova-tour and sova-fig6):
    # what it gives must be what the driver read at the period's start
    scn = _scenario(name, 600.0 if name == "sova-tour" else 300.0)
    spec = next(p for p in scn.policy_specs if p.name == policy)
    world = World(scn, spec)
    control = world._control
    assert control is not None
    read = control._inventories
    earlier: list[tuple[Inventory, Inventory]] = []
    lazy = 0

    def check(e: Any, hosts: list[int], busy: set[int]) -> Any:
        nonlocal lazy
        for inv, want in earlier:  # the last period's, read only now
            assert inv == want
        out = read(e, hosts, busy)
        earlier.clear()
        for h, inv in out.items():
            earlier.append((inv, e.inventory(h)))
            lazy += isinstance(inv.vms, HostVMs) and inv.vms._built is None
        return out

    control._inventories = check  # type: ignore[method-assign]
    world.run_until(scn.duration)
    assert lazy > 0


def test_a_settled_host_whose_vms_did_not_change_keeps_its_last_inventory() -> None:
    # a host settled in two periods running whose VMs' columns did not change gets the
    # same inventory object (equal to a new read); one whose VM changed gets a new read
    scn = _scenario("sova-tour", 600.0)
    world = World(scn, next(p for p in scn.policy_specs if p.name == "sova"))
    control = world._control
    assert control is not None
    read = control._inventories
    kept = renewed = 0

    def check(e: Any, hosts: list[int], busy: set[int]) -> Any:
        nonlocal kept, renewed
        assert control is not None
        before = dict(control.calm_read)
        changed = -1
        if before and e.env.now >= 300.0 and renewed == 0:
            changed = next(iter(before))  # a guest limit lands on one of its VMs
            e.guest_limit[control.members[changed][0]] = 123e6
        out = read(e, hosts, busy)
        for hi, inv in control.calm_read.items():
            h = e.host_names[hi]
            assert out[h] is inv and inv == e.inventory(h)
            old = before.get(hi)
            if hi == changed:
                assert inv is not old and inv != old
                renewed += 1
            elif old is not None:
                kept += inv is old  # (else read again: a VM's column changed)
        return out

    control._inventories = check  # type: ignore[method-assign]
    world.run_until(scn.duration)
    assert kept > 0 and renewed == 1


def test_polling_only_the_hosts_with_operations_submitted_changes_nothing() -> None:
    # the world polls the agents of the hosts an operation was submitted from (until their
    # executors have nothing in flight); polling every agent each tick gives the same run
    scn = _scenario("sova-tour", 600.0)
    spec = next(p for p in scn.policy_specs if p.name == "sova")

    class Every(set[str]):
        def discard(self, element: object) -> None:  # every host stays polled
            pass

    def run(every: bool) -> tuple[list[Any], list[Any]]:
        world = World(scn, spec)
        if every:
            world._submitted = Every(world.agents)
        out = world.run_until(scn.duration)
        return list(out.timeline), list(out.events)

    fast, slow = run(False), run(True)
    assert any(e.event == "vf_attach" for e in fast[1])  # operations were polled
    assert fast == slow


def test_rows_from_arrays_are_step_values_at_the_edges() -> None:
    # record.column_block (through Timeline.extend_columns) against record.step_values of the inventory the driver reads,
    # at values the scenarios do not reach: a VF whose max rate is 0 (no rate: empty
    # cell), unlimited (inf) and zero guest limits, a VM on virtio with a stale max rate
    import numpy as np

    from sova.policy.sensing import VMFactors
    from sova.record import NONE, TIMELINE_COLUMNS, Timeline, column_block, step_values
    from sova.sim.state import INF

    scn = _scenario("sova-fig6", 10.0)
    world = World(scn, next(p for p in scn.policy_specs if p.name == "sova"))
    e = world.engine
    e.on_vf[:] = [True, True, False, True, False]
    e.vf_index[:] = [0, 1, 0, 0, 0]
    e.vf_max[:] = [0.0, 2.5e9, 1e9, INF, INF]
    e.guest_limit[:] = [INF, 0.0, 3.3e8, 1.234567e9, INF]
    rng = np.random.default_rng(7)
    cols = rng.uniform(0, 1e9, size=(7, e.N))  # tx, rx, cpu, io_degree, net_factor, ...
    offered = rng.uniform(0, 1e9, size=e.N)
    for h in e.host_names:
        inv = e.inventory(h)
        idx = sorted((e.vm_index[v] for v in inv.vms), key=lambda i: e.vm_names[i])
        factors = {
            e.vm_names[i]: VMFactors(
                e.vm_names[i],
                *cols[2:4, i],
                cols[6, i],
                cols[5, i],
                cols[4, i],
                True,
                0.0,
                0.0,
                *cols[0:2, i],
            )
            for i in idx
        }
        report = StepReport(12.34567, factors, inv, None, {}, [])
        want = list(
            step_values(
                report, policy="p", host=h, world=lambda vm: (offered[e.vm_index[vm]] / 1e6, None)
            )
        )
        m = np.array(idx)
        block = column_block(
            policy="p",
            time_s=12.34567,
            host_names=[h],
            host=np.zeros(len(idx), dtype=np.int64),
            vm_names=e.vm_names,
            vm=m,
            on_vf=e.on_vf[m],
            vf_max_bps=e.vf_max[m],
            guest_limit_bps=e.guest_limit[m],
            factors=list(cols[:, m]),
            offered_mbps=offered[m] / 1e6,
            response_ms=np.full(len(idx), NONE),
        )
        timeline = Timeline()
        timeline.extend_columns(*block)
        got = [tuple(getattr(r, c) for c in TIMELINE_COLUMNS) for r in timeline]
        assert got == want


@pytest.mark.parametrize("name", ["sova-tour", "sova-fig6"])
def test_world_hands_its_manager_the_reports_as_arrays(name: str) -> None:
    # World._plan's batch intake (the sensing pass's loads as one array, through
    # ManagerCore.ingest_arrays) against every agent's report_parts through ingest_many,
    # the specification: the manager's state after every period's intake and the run's
    # decisions are the same, across a live migration (its lease closes by arrival)
    scn = _scenario(name, 600.0)

    def run(batch: bool) -> tuple[list[Any], list[Any], list[Any]]:
        world = World(scn, next(p for p in scn.policy_specs if p.name == "sova"))
        core = world.manager
        assert core is not None
        states: list[Any] = []
        ingest = world._ingest

        def spec(sensing: Any) -> None:
            parts = ((h, a.report_parts()) for h, a in world.agents.items())
            core.ingest_many((h, *p) for h, p in parts if p is not None)

        def take(sensing: Any) -> None:
            (ingest if batch else spec)(sensing)
            states.append(
                (
                    {h: list(w) for h, w in core.history.items()},
                    {h: dict(v) for h, v in core.vms.items()},
                    dict(core.capacity),
                    dict(core._skip),
                    dict(core.leases),
                )
            )

        world._ingest = take  # type: ignore[method-assign]
        out = world.run_until(scn.duration)
        return states, out.events, out.decisions

    got, want = run(True), run(False)
    assert got == want
    # the cases happened: a migration ran, so a lease closed in an intake
    assert any(ev.event.startswith("migrat") for ev in got[1])


@pytest.mark.parametrize("name", ["sova-tour", "sova-fig6"])
def test_the_agents_keep_which_act_alone_in_the_worlds_array(name: str) -> None:
    # the world reads which hosts' agents act alone (an operation in flight, the manager's
    # signal, a VF fence) from one array the agents keep as those change, not from every
    # agent each period: after every period it must equal each agent's own state, through
    # operations submitted and finished, signals given and taken, and fences set and lifted
    scn = _scenario(name, 600.0)
    world = World(scn, next(p for p in scn.policy_specs if p.name == "sova"))
    control = world._control
    assert control is not None
    agents = [world.agents[h] for h in world.engine.host_names]
    fenced = agents[len(agents) // 2]
    decide = control.decide
    calls: list[int] = []
    seen = set()

    def spy(*args: Any) -> Any:
        alone = args[4]
        own = [
            bool(a.executor.in_flight or a.signalled or a.vf_freeze_host or a.vf_freeze_vms)
            for a in agents
        ]
        assert alone.tolist() == own, len(calls)
        seen.update((hi, b) for hi, b in enumerate(own))
        calls.append(len(calls))
        # a fence set and lifted between periods, as the manager's directive does
        if len(calls) == 5:
            assert fenced.set_vf_freeze(False, ["no-such-vm"])
        elif len(calls) == 10:
            assert fenced.set_vf_freeze(True, [])
        elif len(calls) == 15:
            assert fenced.set_vf_freeze(False, [])
        return decide(*args)

    control.decide = spy  # type: ignore[method-assign]
    world.run_until(scn.duration)
    assert len(calls) > 15
    # some agent acted alone, every host was free at some point
    assert any(b for _, b in seen)
    assert {hi for hi, b in seen if not b} == set(range(len(agents)))
