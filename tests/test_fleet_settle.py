"""A simulated world hands its settled hosts' period to their agents as arrays
(sim/fleet_settle.py): no agent is called for a settled period, each applies it when one
of its records is next read, and the manager's intake takes those hosts' VM loads from the
period without asking their agents. (tests/test_fleet_control.py holds every agent's
records after every period equal to its own steps'.)"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sova.agent.loop import HostAgent
from sova.scenario import load_sweep
from sova.sim.fleet_settle import SettledHosts, SettledVMReports
from sova.sim.world import World

ROOT = Path(__file__).resolve().parents[1]


def test_settled_agents_are_not_called_and_apply_their_period_when_read() -> None:
    scn = load_sweep(ROOT / "scenarios" / "sova-tour.yaml")[0]
    scn = scn.model_copy(update={"duration": 300.0})
    world = World(scn, next(p for p in scn.policy_specs if p.name == "sova"))
    calls: list[str] = []
    taken: list[int] = []
    settle, take, report = HostAgent.settle, SettledHosts.take, HostAgent.report_vms

    def spy_settle(self: HostAgent, *args: Any) -> None:
        calls.append("settle")
        settle(self, *args)

    def spy_take(self: SettledHosts, host: int) -> Any:
        taken.append(host)
        return take(self, host)

    def spy_report(self: HostAgent) -> Any:
        calls.append("report_vms")
        return report(self)

    untouched = 0
    record = world._record

    def check(t: float, reports: Mapping[str, Any]) -> None:
        nonlocal untouched
        fleet = world._settling()
        for hi, r in enumerate(reports.values()):
            if r is None and world._agent_list[hi]._synced < fleet.period:
                untouched += 1  # settled this period, its records not applied yet
        record(t, reports)

    world._record = check  # type: ignore[method-assign]
    HostAgent.settle = spy_settle  # type: ignore[method-assign, assignment]
    SettledHosts.take = spy_take  # type: ignore[method-assign]
    HostAgent.report_vms = spy_report  # type: ignore[method-assign]
    try:
        world.run_until(scn.duration)
    finally:
        HostAgent.settle = settle  # type: ignore[method-assign]
        SettledHosts.take = take  # type: ignore[method-assign]
        HostAgent.report_vms = report  # type: ignore[method-assign]
    # no holder lacks a dwell start in this run: no settled agent was called, and the
    # manager's intake asked only agents that stepped
    assert "settle" not in calls
    assert untouched > 0
    periods = int(scn.duration / scn.controller.period)
    assert calls.count("report_vms") < periods * len(world.agents) // 2
    # reading an agent's records applies its last settled period once
    fleet = world._settling()
    pending = [
        hi for hi, a in enumerate(world._agent_list) if a._synced < fleet.at[hi] == fleet.period
    ]
    assert pending
    a = world._agent_list[pending[0]]
    assert a.snapshot is not None and a.last_load is not None and a._ops_this_period == 0
    assert a._synced == fleet.period
    assert a._last_desired is not None and a.last_vm_loads is not None
    # and the agents whose records were read during the run took their periods one by one
    assert taken
    assert manager_keeps_settled_reports(world)


def manager_keeps_settled_reports(world: World) -> bool:
    """The manager holds the settled hosts' VM loads as the period's arrays gave them,
    equal to what their agents report."""
    assert world.manager is not None
    held = world.manager.vms
    lazy = [h for h in held if isinstance(held[h], SettledVMReports)]
    return bool(lazy) and all(
        dict(held[h]) == dict(world.agents[h].report_vms() or {}) for h in lazy
    )
