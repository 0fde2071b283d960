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

from sova import model
from sova.agent import registry
from sova.agent.config import ControllerConfig
from sova.agent.loop import HostAgent
from sova.agent.registry import (
    ALLOCATORS,
    VF_POLICIES,
    Registry,
    RegistryError,
    register_allocator,
    register_vf_policy,
)
from sova.agent.vf_policies import Desired, VFContext, VFPolicy
from sova.cli import app
from sova.demo import pick_policy
from sova.driver.base import DriverRequest, MockDriver, OpState, OpStatus
from sova.manager.daemons.config import ConfigError, load_agent_settings
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
        VF_POLICIES.unregister(QuietestFirst.name)
        VF_POLICIES.unregister(QuietestMigrating.name)
        ALLOCATORS.unregister(QuarterLink.name)


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


# --------------------------------------------------------------------------- the registries


def test_a_second_plug_in_under_a_taken_name_is_refused() -> None:
    class Impostor(VFPolicy):
        name = "sova"

    with pytest.raises(RegistryError, match=r"VF policy 'sova' is already registered"):
        register_vf_policy(Impostor)
    assert VF_POLICIES["sova"] is not Impostor
    with pytest.raises(RegistryError, match=r"allocator 'daqs' is already registered"):
        register_allocator("daqs", QuarterLink)
    with pytest.raises(RegistryError, match=r"'none' is reserved"):
        register_allocator("none", QuarterLink)


def _install_plugin(root: Path, entry_points: str, module: str) -> None:
    """A real installed distribution (dist-info + module) on sys.path, as pip leaves it."""
    dist = root / "sova_toy_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sova-toy-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(entry_points)
    (root / "sova_toy_plugin.py").write_text(module)


TOY_MODULE = """
from sova.agent.vf_policies import VFPolicy
from sova.policy.bandwidth import Allocation


class Toy(VFPolicy):
    name = "toy-from-entry-point"

    def desired(self, ctx):
        return None, {}


class Half:
    name = "toy-half"

    def allocate(self, capacity_bps, demands):
        return {d.vm: Allocation(rate_bps=capacity_bps / 2) for d in demands}
"""


def test_out_of_tree_plug_ins_load_from_entry_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install_plugin(
        tmp_path,
        "[sova.vf_policies]\ntoy-from-entry-point = sova_toy_plugin:Toy\n"
        "[sova.allocators]\ntoy-half = sova_toy_plugin:Half\n",
        TOY_MODULE,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    # Fresh registries, as a new process builds them: entry points are read on first use.
    policies = Registry("VF policy", "sova.vf_policies", registry._vf_policy)
    allocators = Registry("allocator", "sova.allocators", registry._allocator)
    assert "toy-from-entry-point" in policies
    assert policies["toy-from-entry-point"].__module__ == "sova_toy_plugin"
    half = allocators["toy-half"].build({})
    assert half.allocate(GBIT, [FlowDemand("a", GBIT, model.SLA())])["a"].rate_bps == GBIT / 2


def test_a_plug_in_clashing_with_a_built_in_or_not_loadable_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install_plugin(
        tmp_path,
        "[sova.vf_policies]\nsova = sova_toy_plugin:Toy\n"
        "[sova.allocators]\nbroken = sova_toy_plugin:Missing\n",
        TOY_MODULE,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    policies = Registry("VF policy", "sova.vf_policies", registry._vf_policy)
    policies.register("sova", registry.Sova)
    with pytest.raises(
        RegistryError, match=r"VF policy 'sova' is already registered .*entry point"
    ):
        _ = "sova" in policies
    allocators = Registry("allocator", "sova.allocators", registry._allocator)
    assert "broken" in allocators  # the name is known without importing it
    with pytest.raises(RegistryError, match=r"allocator 'broken': cannot load 'sova_toy_plugin:M"):
        allocators["broken"]


def test_the_agent_spreads_spare_capacity_only_for_an_allocator_that_declares_it() -> None:
    """A plug-in allocating 1/4 of the link to each of two VMs: declared ``spread_spare``,
    the agent adds the unallocated half to the caps (10G/4 + 10G/2/2 = 5G each)."""
    register_allocator("toy-quarter-spread", QuarterLink, spread_spare=True)
    try:
        for name, cap in (("toy-quarter-spread", 5 * GBIT), (None, 2.5 * GBIT)):
            if name is None:
                register_allocator(QuarterLink.name, QuarterLink)
                name = QuarterLink.name
            try:
                assert _first_caps(name) == {"a": cap, "b": cap}
            finally:
                if name == QuarterLink.name:
                    ALLOCATORS.unregister(name)
    finally:
        ALLOCATORS.unregister("toy-quarter-spread")


def _first_caps(bandwidth_policy: str) -> dict[str, float | None]:
    """The caps the agent sets in its second bandwidth period, two VMs each sending
    1 Gbit/s on a 10 Gbit/s NIC (a world answered by a plain function)."""
    nic = model.NIC("pf0", 10 * GBIT, 1)
    host = model.Host("h1", 8, 16 * 2**30, nic)
    vms = {n: model.VMState(model.VM(n, 2, 2**30, created_seq=i)) for i, n in enumerate("ab")}
    clock = {"t": 0.0}

    def world(req: DriverRequest) -> Any:
        t = clock["t"]
        if req.method == "now":
            return t
        if req.method == "inventory":
            return model.Inventory(host, dict(vms))
        if req.method == "sample":
            sent = int(t * GBIT / 8)
            counters = {n: model.VMCounters(n, 2, 0, 0, 0, sent, 0, sent // 1500) for n in vms}
            return model.HostSample("h1", t, counters, model.HostCounters(0, 0, 0, 0))
        if req.method == "submit":
            return "op"
        if req.method == "poll":
            return OpStatus(req.args[0], OpState.SUCCEEDED)
        raise ValueError(req.method)

    drv = MockDriver(world)
    agent = HostAgent(drv, ControllerConfig(bandwidth_policy=bandwidth_policy))
    assert agent.bandwidth_step() == []  # the first sample only starts the meter
    clock["t"] = 1.0
    actions = agent.bandwidth_step()
    return {a.vm: a.rate_bps for a in actions if isinstance(a, model.SetGuestRateLimit)}


def test_a_plugged_in_driver_is_accepted_by_the_settings_and_built_by_name() -> None:
    from sova.manager.daemons.agent.wiring import Wiring, build, mock_wiring
    from sova.manager.daemons.drivers import DRIVERS

    built: list[str] = []

    def toy(settings: Any, **_: Any) -> Wiring:
        built.append(settings.host)
        return mock_wiring(settings)

    with pytest.raises(ConfigError, match=r"driver = 'toy-driver': unknown driver 'toy-driver'"):
        load_agent_settings(None, environ={}, overrides={"driver": "toy-driver"})
    DRIVERS.register("toy-driver", toy)
    try:
        s = load_agent_settings(None, environ={}, overrides={"driver": "toy-driver", "host": "hx"})
        wiring = build(s)
        assert built == ["hx"] and wiring.driver.capabilities().host == "hx"
        with pytest.raises(RegistryError, match=r"driver 'mock' is already registered"):
            DRIVERS.register("mock", toy)
    finally:
        DRIVERS.unregister("toy-driver")
