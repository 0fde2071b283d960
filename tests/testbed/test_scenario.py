"""Testbed scenario files: every shipped one loads, and bad ones are refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sova.testbed.scenario import (
    TestbedScenarioError,
    load_testbed_scenario,
    parse_testbed_scenario,
)

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios" / "testbed"


def base() -> dict[str, Any]:
    return {
        "name": "t",
        "duration": "10s",
        "link": {"capacity": "1Gbit", "vf_pool": 1},
        "vms": [{"name": "a", "sla": {"min": "100Mbit"}}, {"name": "b"}],
        "traffic": [{"vm": "a", "rate": "200Mbit"}, {"vm": "b", "start": "2s", "streams": 3}],
        "compare": {"axis": "bandwidth", "policies": ["none", "sova"]},
    }


@pytest.mark.parametrize("name", ["daqs-fig3", "daqs-fig4", "dba-vm", "vf-scheduling"])
def test_shipped_scenarios_load(name: str) -> None:
    scn = load_testbed_scenario(SCENARIOS / f"{name}.yaml")
    assert scn.name == name
    assert scn.runs(), "every scenario compares at least one policy"


def test_fig3_compares_the_four_policies_for_both_guarantees() -> None:
    scn = load_testbed_scenario(SCENARIOS / "daqs-fig3.yaml")
    labels = [r.label for r in scn.runs()]
    for g in ("g25", "g37"):
        for p in ("none", "ip-link-static", "daqs", "sova"):
            assert f"{p}@{g}" in labels
    assert scn.sla_of("guar", "g37").min == pytest.approx(0.375 * scn.link.capacity)
    assert scn.static_caps_for("g37")["be"] == pytest.approx(0.625 * scn.link.capacity)


@pytest.mark.parametrize(
    "mutate, path, value",
    [
        (lambda d: d["traffic"].append({"vm": "zz"}), "traffic[2].vm", "unknown VM 'zz'"),
        (lambda d: d["traffic"][0].update(rate="fast"), "traffic.0.rate", "'fast'"),
        (lambda d: d["link"].update(capacity="-1Gbit"), "link.capacity", "-1Gbit"),
        (lambda d: d["vms"][0].update(colour="red"), "vms.0.colour", "'red'"),
        (
            lambda d: d["compare"].update(policies=["nope"]),
            "compare",
            "unknown bandwidth policy 'nope'",
        ),
        (lambda d: d["traffic"][1].update(start="12s"), "traffic[1].start", "12 s"),
        (lambda d: d["vms"].append({"name": "a"}), "vms", "duplicate VM names ['a']"),
        (lambda d: d["vms"][1].update(name="bad name"), "vms.1.name", "'bad name'"),
        (
            lambda d: [v.update(vf=True) for v in d["vms"]],
            "vms",
            "2 VMs start with a VF but link.vf_pool is 1",
        ),
    ],
)
def test_bad_scenarios_name_the_field_and_value(mutate: Any, path: str, value: str) -> None:
    data = base()
    mutate(data)
    with pytest.raises(TestbedScenarioError) as exc:
        parse_testbed_scenario(data, "x.yaml")
    text = str(exc.value)
    assert text.startswith("x.yaml: invalid testbed scenario")
    assert path.split(".")[0].split("[")[0] in text
    assert value in text, text


def test_offered_load_counts_a_flow_only_once_it_has_ramped_up() -> None:
    scn = parse_testbed_scenario(base())
    # a: 200 Mbit/s from 0 s, counted from 1 s (flow_ramp); b: unlimited from 2 s
    assert scn.offered_bps("a", 0.0, 1.0) == 0.0
    assert scn.offered_bps("a", 1.0, 2.0) == pytest.approx(200e6)
    assert scn.offered_bps("b", 2.0, 3.0) == 0.0
    assert scn.offered_bps("b", 3.0, 4.0) == pytest.approx(1e9)


def test_variants_override_sla_and_caps_and_label_the_runs() -> None:
    data = base()
    data["static_caps"] = {"b": "900Mbit"}
    data["variants"] = [
        {"name": "lo", "sla": {"a": {"min": "50Mbit"}}},
        {"name": "hi", "sla": {"a": {"min": "300Mbit"}}, "static_caps": {"b": "700Mbit"}},
    ]
    scn = parse_testbed_scenario(data)
    assert [r.label for r in scn.runs()] == ["none@lo", "sova@lo", "none@hi", "sova@hi"]
    assert scn.model_vms("hi")["a"].sla.bandwidth.minimum == pytest.approx(300e6)
    assert scn.static_caps_for("lo") == {"b": pytest.approx(900e6)}
    assert scn.static_caps_for("hi") == {"b": pytest.approx(700e6)}


def test_a_scenario_file_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(TestbedScenarioError, match="a testbed scenario is a YAML mapping"):
        load_testbed_scenario(p)
