"""The timeline's resolution (scenario ``output:``, ``sova simulate --timeline-period
--timeline-vm``): a week of a fleet at every control period is billions of rows, so the
world keeps every k-th period's rows of the chosen VMs. Kept rows are the full run's rows,
unchanged; what the controllers decide does not depend on what is recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sova.cli import app
from sova.record import TimelineRow
from sova.scenario import OutputSpec, Scenario, ScenarioError, load_sweep, parse_scenario
from sova.sim.world import World

ROOT = Path(__file__).resolve().parents[1]


def _tour(**output: Any) -> Scenario:
    scn = load_sweep(ROOT / "scenarios" / "sova-tour.yaml")[0]
    return scn.model_copy(update={"duration": 600.0, "output": OutputSpec(**output)})


def _run(scn: Scenario) -> tuple[list[TimelineRow], list[Any], list[int]]:
    """The sova policy's timeline and events, and how many rows each array block (the
    world's fleet path, sim/fleet_control.py) put into the timeline."""
    spec = next(p for p in scn.policy_specs if p.name == "sova")
    world = World(scn, spec)
    blocks: list[int] = []
    extend = world.run.timeline.extend_columns

    def count(n: int, *args: Any) -> None:
        blocks.append(n)
        extend(n, *args)

    world.run.timeline.extend_columns = count  # type: ignore[method-assign]
    run = world.run_until(scn.duration)
    return list(run.timeline), list(run.events), blocks


def test_kept_rows_are_the_full_runs_rows_at_those_periods_of_those_vms() -> None:
    full, full_events, _ = _run(_tour())
    # the tour's control period is 10 s: every third period, two of its VMs
    kept, events, blocks = _run(_tour(timeline_period=30.0, timeline_vms=["web", "video"]))
    want = [r for r in full if r.time_s % 30.0 == 0 and r.vm in ("web", "video")]
    assert kept == want
    # 600 s / 30 s = 20 kept periods x 2 VMs
    assert len(kept) == 40
    assert {r.time_s for r in kept} == {30.0 * k for k in range(1, 21)}
    # the decisions, migrations and VF moves are the same whatever is recorded
    assert events == full_events
    # the world's array path ran and was filtered (rows of other VMs left out of blocks)
    assert blocks and sum(blocks) < len([r for r in full if r.time_s % 30.0 == 0])


def test_period_only_keeps_every_vm() -> None:
    full, _, _ = _run(_tour())
    kept, _, _ = _run(_tour(timeline_period=60.0))
    assert kept == [r for r in full if r.time_s % 60.0 == 0]
    assert len({r.vm for r in kept}) == len({r.vm for r in full})


def _data(**output: Any) -> dict[str, Any]:
    return {
        "name": "res",
        "duration": 60,
        "controller": {"period": "10s"},
        "hosts": [
            {
                "name": "h1",
                "cores": 4,
                "memory": "8GiB",
                "nic": {"name": "eth0", "capacity": "10Gbit", "vf_pool": 2},
                "vms": ["a"],
            }
        ],
        "vms": [{"name": "a"}],
        "output": output,
    }


@pytest.mark.parametrize(
    ("output", "line"),
    [
        # 15 s is 1.5 control periods of 10 s
        ({"timeline_period": "15s"}, "output.timeline_period: must be a multiple of"),
        ({"timeline_period": 0}, "output.timeline_period: Input should be greater than 0"),
        ({"timeline_vms": ["a", "zz"]}, "output.timeline_vms[1]: unknown VM 'zz'"),
        ({"every": 3}, "output.every: Extra inputs are not permitted"),
    ],
)
def test_a_bad_output_names_the_field(output: dict[str, Any], line: str) -> None:
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(_data(**output))
    assert line in str(exc.value)


def test_a_good_output_is_kept() -> None:
    scn = parse_scenario(_data(timeline_period="1m", timeline_vms=["a"]))
    assert scn.output == OutputSpec(timeline_period=60.0, timeline_vms=["a"])


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--timeline-period", "7s"], "--timeline-period: output.timeline_period: must be"),
        (["--timeline-period", "soon"], "--timeline-period:"),
        (["--timeline-vm", "VM9"], "--timeline-vm: output.timeline_vms[0]: unknown VM 'VM9'"),
    ],
)
def test_simulate_refuses_a_bad_option_in_one_line_and_writes_nothing(
    tmp_path: Path, args: list[str], line: str
) -> None:
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["simulate", "sova-fig5", "-o", str(out), *args])
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.split())
    assert line in text
    assert len(r.output.strip().splitlines()) == 1
    assert not out.exists()


def test_simulate_writes_the_chosen_resolution(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = CliRunner().invoke(
        app,
        ["simulate", "sova-fig5", "-o", str(out), "--timeline-period", "1m"]
        + ["--timeline-vm", "VM1", "--timeline-vm", "VM5"],
    )
    assert r.exit_code == 0, r.output
    lines = (out / "timeline.csv").read_text().splitlines()
    head = lines[0].split(",")
    rows = [dict(zip(head, line.split(","), strict=True)) for line in lines[1:]]
    assert {row["vm"] for row in rows} == {"VM1", "VM5"}
    assert {float(row["time_s"]) % 60.0 for row in rows} == {0.0}
    assert (out / "report.md").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["timeline"] == {"period_s": 60.0, "vms": ["VM1", "VM5"]}
