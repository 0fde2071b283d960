"""``./run.sh``: the first run shows Sova's three mechanisms, live and in the report.

One real demo (world, manager and three agents as processes on loopback, ~30 s) of the
default scenario, with the do-nothing baseline simulated beside it. Every figure checked
here comes out of the simulated hosts and the real controller; the scenario only sets the
load.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from sova.demo import DEFAULT_SCENARIO, pick_baseline, pick_policy, run_demo
from sova.scenario import load_scenario

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    scenario = REPO / DEFAULT_SCENARIO
    scn = load_scenario(scenario)
    policy = pick_policy(scn, None)
    base = pick_baseline(scn, policy)
    assert base is not None
    out = tmp_path_factory.mktemp("first-run")
    screen = io.StringIO()
    final = run_demo(
        scenario,
        out,
        policy.name,
        live=True,
        timeout_s=300,
        console=Console(file=screen, width=160),
        baseline=base.name,
    )
    return {
        "out": out,
        "final": final,
        "screen": screen.getvalue(),
        "policy": policy.name,
        "baseline": base.name,
        "summary": json.loads((out / "summary.json").read_text()),
        "events": list(csv.DictReader((out / "events.csv").open())),
    }


def test_the_default_is_the_tour_against_doing_nothing(first_run: dict[str, Any]) -> None:
    assert DEFAULT_SCENARIO.name == "sova-tour.yaml"
    assert first_run["policy"] == "sova" and first_run["baseline"] == "do-nothing"
    assert first_run["final"]["done"] and first_run["final"]["violation_count"] == 0


def test_vfs_follow_the_network_intensive_vms(first_run: dict[str, Any]) -> None:
    ev = [e for e in first_run["events"] if e["policy"] == "sova"]
    detached = {(e["vm"], e["src_host"]) for e in ev if e["event"] == "vf_detach"}
    attached = [
        (e["vm"], e["src_host"], float(e["time_s"])) for e in ev if e["event"] == "vf_attach"
    ]
    # a VF moved from one VM to another on the same host after the load changed
    assert any(h == h2 and vm != vm2 and t > 30 for vm, h in detached for vm2, h2, t in attached), (
        detached,
        attached,
    )
    assert not [
        e
        for e in first_run["events"]
        if e["policy"] == "do-nothing" and e["event"].startswith("vf_")
    ]
    assert "*" in first_run["screen"]  # the live view marks VF holders


def test_the_guarantee_is_held_at_full_link_use(first_run: dict[str, Any]) -> None:
    pol = first_run["summary"]["policies"]
    sova, nothing = pol["sova"], pol["do-nothing"]
    assert isinstance(sova["guarantee_met_fraction"], float)
    assert sova["guarantee_met_fraction"] >= 0.9
    assert nothing["guarantee_met_fraction"] <= 0.1
    assert "SLA guarantees" in first_run["screen"]
    report = (first_run["out"] / "report.md").read_text()
    assert "the busiest link ran at 100%" in report


def test_a_hotspot_is_removed_by_a_migration(first_run: dict[str, Any]) -> None:
    pol = first_run["summary"]["policies"]
    log = pol["sova"]["migration_log"]
    assert len(log) >= 1 and pol["do-nothing"]["migrations"] == 0
    hot = [
        e
        for e in first_run["events"]
        if e["event"] == "hotspot" and e["vm"] == log[0]["vm"] and e["dst_host"] == log[0]["dst"]
    ]
    assert hot, "the migration follows the manager's hotspot decision"
    assert log[0]["vm"] in first_run["screen"] and "downtime" in first_run["screen"]


def test_the_reports_first_screen_answers_what_it_bought(first_run: dict[str, Any]) -> None:
    report = (first_run["out"] / "report.md").read_text()
    head = report.split("## Policies side by side")[0]
    assert "## What sova did, and what it bought over do-nothing" in head
    for row in ("mean response (ms)", "guarantee held", "link use", "migrations"):
        assert f"| {row}" in head, row
    assert "ms downtime" in head
    pol = first_run["summary"]["policies"]
    assert pol["sova"]["mean_response_ms"] < pol["do-nothing"]["mean_response_ms"]
    assert "## Migrations" in report and "| sova |" in report.split("## Migrations")[1]
    plots = json.loads((first_run["out"] / "plots.json").read_text())
    assert {"vf_holders.png", "hosts.png"} <= set(plots)
