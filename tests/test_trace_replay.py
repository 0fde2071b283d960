"""Trace replay: per-VM demand from a CSV drives the simulated VMs, and bad traces are refused."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sova.cli import app
from sova.scenario import ScenarioError, load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCN = ROOT / "scenarios" / "trace-replay.yaml"
runner = CliRunner()


def trace_value(rows: list[dict[str, str]], column: str, t: float) -> float:
    """The demand the CSV gives at time t (step function: the last row at or before t)."""
    value = float(rows[0][column])
    for r in rows:
        if float(r["time_s"]) <= t:
            value = float(r[column])
    return value


def test_offered_load_follows_the_trace_and_vfs_follow_the_load(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = runner.invoke(
        app, ["simulate", str(SCN), "--out", str(out), "--no-progress", "-p", "dsr-iov"]
    )
    assert r.exit_code == 0, r.output
    with (ROOT / "scenarios" / "traces" / "mixed-demand.csv").open() as fh:
        trace = list(csv.DictReader(fh))
    with (out / "timeline.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        # The sample at t shows the tick (t-1, t], which replays the trace at t-1; jitter is
        # lognormal with sigma 0.05, so 25 % covers it with a wide margin.
        want = trace_value(trace, row["vm"], float(row["time_s"]) - 1)
        got = float(row["offered_mbps"])
        assert got == pytest.approx(want, rel=0.25, abs=1.0), row
    holders = {
        float(r["time_s"]): r["vm"] for r in rows if r["nic"] == "vf" and r["vm"] == "backup"
    }
    # backup sends 4 Gbit/s from 840 to 1020 s and nothing otherwise. One 10 s sample at
    # 4 Gbit/s already lifts its 6-sample mean (667 Mbit/s) above the others', so it gets a
    # VF within a couple of periods of the burst starting; it loses it once the burst has
    # left its window (1020 + 60 s) at the latest, and never holds one before the burst.
    assert holders, "backup never got a VF during its burst"
    assert all(840 < t <= 1080 + 10 for t in holders), sorted(holders)
    assert min(holders) <= 870


def test_missing_trace_file_or_column_is_refused(tmp_path: Path) -> None:
    data = yaml.safe_load(SCN.read_text())
    (tmp_path / "profiles").symlink_to(ROOT / "scenarios" / "profiles")
    data["workload"][0]["vms"]["web"]["trace"] = "nope.csv"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError, match=r"workload\[0\]\.vms\.web: .*cannot read"):
        load_scenario(bad)
    (tmp_path / "traces").symlink_to(ROOT / "scenarios" / "traces")
    data["workload"][0]["vms"]["web"]["trace"] = "traces/mixed-demand.csv"
    data["workload"][0]["vms"]["web"]["column"] = "mail"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError, match="needs columns time_s and 'mail'"):
        load_scenario(bad)
