"""A VF policy and a bandwidth allocator plugged in from this file alone (issue 9, item 2).

Both are registered at run time, then named in a scenario, an agent's TOML settings, the
demo's choice of policy and a testbed scenario: every world's validation accepts them, and ``sova simulate`` (in
process) really runs them — the toy VF policy grants the VF to the *quietest* VM, which
no shipped policy does, and the toy allocator caps every VM at a quarter of the link.
Unknown names are refused with the field and the value.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from sova.agent.registry import ALLOCATORS, VF_POLICIES, register_allocator, register_vf_policy
from sova.agent.vf_policies import Desired, VFContext, VFPolicy
from sova.cli import app
from sova.daemon.config import ConfigError, load_agent_settings
from sova.demo import pick_policy
from sova.policy.bandwidth import Allocation, FlowDemand
from sova.policy.vfsched import VFDecision
from sova.scenario import ScenarioError, load_scenario, parse_scenario
from sova.testbed.scenario import TestbedScenarioError, parse_testbed_scenario

GBIT = 1e9


class QuietestFirst(VFPolicy):
    """Toy: the VFs go to the VMs that send the least (the opposite of DSR-IOV)."""

    name = "toy-quietest"

    def desired(self, ctx: VFContext) -> tuple[VFDecision | None, Desired]:
        ready = [c.vm for c in ctx.candidates if c.eligible]
        by_demand = sorted(
            ready, key=lambda vm: (ctx.factors[vm].demand_bps if vm in ctx.factors else 0, vm)
        )
        return None, ctx.with_tiers(by_demand[: ctx.actual.host.nic.vf_pool])


class QuietestMigrating(QuietestFirst):
    """Toy: the same, plus the manager's hotspot migrations (it says so; nothing tests names)."""

    name = "toy-quietest-migrating"
    uses_manager = True


class QuarterLink:
    """Toy: every VM capped at a quarter of the link, whatever it asks for."""

    name = "toy-quarter"

    def allocate(self, capacity_bps: float, demands: Sequence[FlowDemand]) -> dict[str, Allocation]:
        return {d.vm: Allocation(rate_bps=capacity_bps / 4) for d in demands}


@pytest.fixture
def toys() -> Iterator[None]:
    register_vf_policy(QuietestFirst)
    register_vf_policy(QuietestMigrating)
    register_allocator(QuarterLink.name, QuarterLink)
    try:
        yield
    finally:
        VF_POLICIES.pop(QuietestFirst.name)
        VF_POLICIES.pop(QuietestMigrating.name)
        ALLOCATORS.pop(QuarterLink.name)


def scenario(vf: str, bandwidth: str) -> dict[str, Any]:
    return {
        "name": "toys",
        "seed": 1,
        "duration": "120s",
        "hosts": [
            {
                "name": "h1",
                "cores": 8,
                "memory": "16GiB",
                "nic": {"capacity": "10Gbit", "vf_pool": 1},
                "vms": ["loud", "quiet"],
            }
        ],
        "vms": [{"name": "loud"}, {"name": "quiet"}],
        "workload": [
            {
                "at": 0,
                "vms": {
                    "loud": {"kind": "bulk", "rate": "4Gbit"},
                    "quiet": {"net": 0.5, "rate": "200Mbit"},
                },
            }
        ],
        "controller": {"vf_policy": vf, "bandwidth_policy": bandwidth, "probe": 0.0},
    }


def test_simulate_runs_the_plugged_in_policies(toys: None, tmp_path: Path) -> None:
    path = tmp_path / "toys.yaml"
    path.write_text(yaml.safe_dump(scenario("toy-quietest", "toy-quarter")))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["simulate", str(path), "--out", str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    with (out / "timeline.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if float(r["time_s"]) >= 60]
    assert rows
    assert {r["vm"] for r in rows if r["nic"] == "vf"} == {"quiet"}
    limits = {float(r["limit_mbps"]) for r in rows if r["limit_mbps"]}
    assert limits == {10 * GBIT / 4 / 1e6}


def test_agent_settings_accept_the_plugged_in_policies(toys: None) -> None:
    controller = {"vf_policy": "toy-quietest", "bandwidth_policy": "toy-quarter"}
    s = load_agent_settings(None, environ={}, overrides={"controller": controller})
    assert (s.controller.vf_policy, s.controller.bandwidth_policy) == tuple(controller.values())


def test_the_demo_validates_and_prefers_a_plugged_in_policy_that_uses_the_manager(
    toys: None, tmp_path: Path
) -> None:
    data = scenario("dsr-iov", "toy-quarter")
    data["compare"] = ["toy-quietest", "toy-quietest-migrating", "dsr-iov"]
    path = tmp_path / "toys.yaml"
    path.write_text(yaml.safe_dump(data))
    scn = load_scenario(path)
    assert pick_policy(scn, None).vf == "toy-quietest-migrating"
    assert pick_policy(scn, "toy-quietest").bandwidth == "toy-quarter"


def test_testbed_scenario_accepts_the_plugged_in_policies(toys: None) -> None:
    base: dict[str, Any] = {
        "name": "toys",
        "duration": "30s",
        "link": {"capacity": "1Gbit", "vf_pool": 1},
        "vms": [{"name": "a"}, {"name": "b"}],
    }
    vf = parse_testbed_scenario(
        {**base, "compare": {"axis": "vf", "policies": ["toy-quietest", "dsr-iov"]}}
    )
    assert [r.vf_policy for r in vf.runs()] == ["toy-quietest", "dsr-iov"]
    bw = parse_testbed_scenario({**base, "compare": {"policies": ["toy-quarter", "none"]}})
    assert [r.bandwidth_policy for r in bw.runs()] == ["toy-quarter", "none"]


def test_unknown_names_are_refused_with_the_field_and_the_value() -> None:
    with pytest.raises(ScenarioError, match=r"controller\.vf_policy: unknown VF policy 'toy-q"):
        parse_scenario(scenario("toy-quietest", "none"))
    with pytest.raises(ScenarioError, match=r"bandwidth_policy: unknown bandwidth policy 'toy-"):
        parse_scenario(scenario("sova", "toy-quarter"))
    with pytest.raises(ConfigError, match=r"controller\.vf_policy = 'toy-quietest': unknown VF"):
        load_agent_settings(
            None, environ={}, overrides={"controller": {"vf_policy": "toy-quietest"}}
        )
    with pytest.raises(TestbedScenarioError, match=r"unknown VF policy 'toy-quietest'"):
        parse_testbed_scenario(
            {
                "name": "t",
                "duration": 10,
                "link": {"capacity": "1Gbit", "vf_pool": 1},
                "vms": [{"name": "a"}],
                "compare": {"axis": "vf", "policies": ["toy-quietest"]},
            }
        )
