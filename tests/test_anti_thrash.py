"""Anti-thrash is on by default: a cluster that would ping-pong a VM does not, with no option.

sova-fig5's stage 3 leaves HM2 (0.45) hotter than HM3 was (0.40); with the manager rules
off, VM1 goes HM2 <-> HM3 every ~50 s. Here the scenario's manager section keeps only what
the paper gives (alpha, ceiling, k, n, metric): the code's defaults must stop the thrash.
"""

from __future__ import annotations

from pathlib import Path

from sova.agent.config import ManagerSpec
from sova.manager.decisions.core import ManagerCore
from sova.policy.hotspot import HotspotDetector, Utilisation, VMLoad
from sova.scenario import load_scenario
from sova.sim.runner import run_policy

ROOT = Path(__file__).resolve().parents[1]


def _fig5_without_anti_thrash_options() -> object:
    scn = load_scenario(ROOT / "scenarios" / "sova-fig5.yaml")
    m = scn.controller.manager
    bare = ManagerSpec(alpha=m.alpha, ceiling=m.ceiling, k=m.k, n=m.n, metric=m.metric)
    return scn.model_copy(
        update={"controller": scn.controller.model_copy(update={"manager": bare})}
    )


def test_fig5_without_options_does_not_ping_pong() -> None:
    # ~0.2 s: the simulator runs the 600 s scenario vectorised
    run = run_policy(_fig5_without_anti_thrash_options(), "sova")  # type: ignore[arg-type]
    moves = [(e.vm, e.src_host, e.dst_host) for e in run.events if e.event == "migrate_start"]
    # The paper's two moves, and nothing after: no VM goes back to a host it left.
    assert moves == [("VM1", "HM1", "HM3"), ("VM1", "HM3", "HM2")], moves
    for i, (vm, src, dst) in enumerate(moves):
        assert (vm, dst, src) not in moves[i + 1 :]


def test_defaults_are_on() -> None:
    from sova.manager.daemons.config import PlannerSettings

    for restart, tabu in (
        (ManagerSpec().restart_window_after_migration, ManagerSpec().return_tabu),
        (PlannerSettings().restart_window_after_migration, PlannerSettings().return_tabu),
        (ManagerCore().restart_window_after_migration, ManagerCore().return_tabu_s),
    ):
        assert restart is True and tabu > 0


# --------------------------------------------------------------------------- the limits


def _cluster(core: ManagerCore, hot: int, cold: int, t0: float = 0.0) -> float:
    """``hot`` hosts at net 0.9 (one VM each that fits anywhere cold) and ``cold`` idle
    hosts, reporting n times; returns the time of the last report."""
    t = t0
    for _ in range(core.detector.n):
        t += 10.0
        for i in range(hot):
            vm = VMLoad(Utilisation(0.05, 0.05, 0.3), 2**30)
            core.ingest(f"hot{i}", Utilisation(0.2, 0.2, 0.9), {f"vm{i}": vm}, at=t)
        for i in range(cold):
            core.ingest(f"cold{i}", Utilisation(0.1, 0.1, 0.05), {}, at=t)
    return t


def _core(**kw: float) -> ManagerCore:
    return ManagerCore(detector=HotspotDetector(3, 5, 0.75), stale_after_s=1e9, **kw)  # type: ignore[arg-type]


def test_concurrent_limit_holds_the_rest_and_logs_why() -> None:
    core = _core(max_concurrent_migrations=2, max_migrations_per_hour=0, vm_cooldown_s=0)
    t = _cluster(core, hot=4, cold=4)
    r = core.plan(t)
    assert len(r.opened) == 2 and len(core.leases) == 2
    held = [d for d in r.decisions if "held" in d.inputs]
    assert len(held) == 2
    for d in held:
        assert not d.signal.flag and d.signal.target is None
        assert "max_concurrent_migrations = 2" in d.inputs["held"]
        assert "held: 2 migration(s) in flight" in d.signal.reason
    # one ends: the next round lets exactly one more through
    core.release(r.opened[0].vm)
    t = _cluster(core, hot=4, cold=4, t0=t)
    r2 = core.plan(t)
    assert len(r2.opened) == 1 and len(core.leases) == 2


def test_hourly_limit_counts_started_migrations_over_a_sliding_hour() -> None:
    core = _core(max_concurrent_migrations=0, max_migrations_per_hour=3, vm_cooldown_s=0)
    t = _cluster(core, hot=5, cold=5)
    r = core.plan(t)
    assert len(r.opened) == 3
    assert sum("max_migrations_per_hour = 3" in d.inputs.get("held", "") for d in r.decisions) == 2
    for lease in r.opened:
        core.release(lease.vm, ran=False)  # even a declined signal spent its slot
    t = _cluster(core, hot=5, cold=5, t0=t)
    assert core.plan(t).opened == ()
    # an hour after the first three, the budget is back
    t = _cluster(core, hot=5, cold=5, t0=r.time_s + 3600.0)
    assert len(core.plan(t).opened) == 3


def test_a_vm_cools_down_after_it_was_sent() -> None:
    core = _core(max_concurrent_migrations=0, max_migrations_per_hour=0, vm_cooldown_s=300)
    t = _cluster(core, hot=1, cold=2)
    r = core.plan(t)
    assert [lease.vm for lease in r.opened] == ["vm0"]
    core.release("vm0", ran=False)  # it never left: hot0 is still hot with vm0
    t = _cluster(core, hot=1, cold=2, t0=t)
    r2 = core.plan(t)
    assert r2.opened == ()
    (d,) = r2.decisions
    assert "vm_cooldown_s = 300" in d.inputs["held"] and d.signal.vm == "vm0"
    t = _cluster(core, hot=1, cold=2, t0=r.time_s + 300.0)
    assert [lease.vm for lease in core.plan(t).opened] == ["vm0"]


def test_zero_turns_a_limit_off() -> None:
    core = _core(max_concurrent_migrations=0, max_migrations_per_hour=0, vm_cooldown_s=0)
    t = _cluster(core, hot=6, cold=6)
    assert len(core.plan(t).opened) == 6
