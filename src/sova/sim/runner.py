"""Run a scenario once per compared policy (and per sweep point) and collect the records.

Each policy gets a fresh :class:`~sova.sim.world.World` built from the same seed; the
workload random stream does not depend on the policy, so every policy faces exactly the
same offered load and differences in the output come from the policy alone.
"""

from __future__ import annotations

from collections.abc import Callable

from sova.record import EventRow, TimelineRow
from sova.scenario import Scenario
from sova.sim.world import PolicyRun, World, agent_config

__all__ = [
    "EventRow",
    "PolicyRun",
    "TimelineRow",
    "agent_config",
    "run_policy",
    "run_scenario",
    "total_ticks",
]


def run_policy(
    scn: Scenario, policy: str, progress: Callable[[int], None] | None = None
) -> PolicyRun:
    spec = next(p for p in scn.policy_specs if p.name == policy)
    return World(scn, spec).run_until(scn.duration, progress)


def run_scenario(scn: Scenario, progress: Callable[[int], None] | None = None) -> list[PolicyRun]:
    return [run_policy(scn, p, progress) for p in scn.policies]


def total_ticks(scn: Scenario) -> int:
    return int(round(scn.duration / scn.tick)) * len(scn.policies)
