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


HYBRID_SCENARIO = """
name: hybrid-trace
seed: 3
duration: 6min
tick: 1s
profile: sova
hosts:
  - name: host1
    cores: 16
    memory: 64GiB
    nic: {name: ens1f0, capacity: 10Gbit, vf_pool: 1}
    vms: [hy, twin]
vms:
  - {name: hy, vcpus: 2}
  - {name: twin, vcpus: 2}
workload:
  - at: 0
    vms:
      hy: {kind: trace, trace: hybrid.csv, column: hy_mbps, cpu_column: hy_cpu}
      twin: {kind: trace, trace: hybrid.csv, column: hy_mbps}
controller:
  period: 10s
  vf_policy: default
"""
# hy's CPU steps 0.10 -> 0.80 -> 0.35 -> 0.60 every 90 s while its network goes
# 5 -> 2,000 -> 50 -> 3,000 Mbit/s: busy on both at once, both changing over time. Its twin
# sends the same and has no CPU work of its own: the CPU sending costs both.
HYBRID_ROWS = [(0, 5, 0.10), (90, 2000, 0.80), (180, 50, 0.35), (270, 3000, 0.60)]


def _hybrid(tmp_path: Path) -> Path:
    (tmp_path / "profiles").symlink_to(ROOT / "scenarios" / "profiles")
    lines = ["time_s,hy_mbps,hy_cpu"] + [",".join(map(str, r)) for r in HYBRID_ROWS]
    (tmp_path / "hybrid.csv").write_text("\n".join(lines) + "\n")
    scn = tmp_path / "hybrid.yaml"
    scn.write_text(HYBRID_SCENARIO)
    return scn


def test_guest_cpu_follows_the_trace_cpu_column(tmp_path: Path) -> None:
    scn = _hybrid(tmp_path)
    out = tmp_path / "out"
    r = runner.invoke(app, ["simulate", str(scn), "--out", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    with (out / "timeline.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    twin = {(r["time_s"], r["nic"]): float(r["cpu_usage"]) for r in rows if r["vm"] == "twin"}
    trace = [{"time_s": str(t), "cpu": str(c), "mbps": str(m)} for t, m, c in HYBRID_ROWS]
    checked = 0
    for row in (r for r in rows if r["vm"] == "hy"):
        t = float(row["time_s"])
        if any(0 <= t - step < 20 for step, *_ in HYBRID_ROWS):
            continue  # a 10 s sample straddling a step mixes the two levels
        assert float(row["offered_mbps"]) == pytest.approx(
            trace_value(trace, "mbps", t - 1), rel=0.25, abs=1.0
        ), row
        sending = twin.get((row["time_s"], row["nic"]))
        if sending is None:
            continue  # one of the two holds the VF: their sending costs differ
        # Guest CPU time over the VM's vCPUs is the column's busy share plus what sending
        # costs (the twin's whole usage), each with the profile's 3 % CPU jitter. The
        # levels are >= 0.25 apart, so 0.06 tells each from its neighbours.
        want_cpu = trace_value(trace, "cpu", t - 1)
        assert float(row["cpu_usage"]) - sending == pytest.approx(want_cpu, abs=0.06), row
        checked += 1
    assert checked >= 20


@pytest.mark.parametrize(
    ("cell", "fields", "message"),
    [
        (
            "1.5",
            "cpu_column: hy_cpu",
            r"cpu_column 'hy_cpu' is a busy share in \[0, 1\] \(got 1.5\)",
        ),
        ("0.5", "cpu_column: nope", r"needs columns time_s and 'hy_mbps' and 'nope'"),
        ("0.5", "cpu_column: hy_cpu, cpu: 0.2", r"cpu_column 'hy_cpu' replaces cpu \(0.2\)"),
    ],
)
def test_bad_cpu_column_is_refused_naming_field_and_value(
    tmp_path: Path, cell: str, fields: str, message: str
) -> None:
    scn = _hybrid(tmp_path)
    (tmp_path / "hybrid.csv").write_text(f"time_s,hy_mbps,hy_cpu\n0,5,{cell}\n")
    text = scn.read_text().replace("cpu_column: hy_cpu", fields)
    scn.write_text(text)
    with pytest.raises(ScenarioError, match=rf"workload\[0\]\.vms\.hy: .*{message}"):
        load_scenario(scn)


def test_cpu_column_needs_a_trace_workload(tmp_path: Path) -> None:
    scn = _hybrid(tmp_path)
    scn.write_text(
        scn.read_text().replace(
            "hy: {kind: trace, trace: hybrid.csv, column: hy_mbps, cpu_column: hy_cpu}",
            "hy: {kind: bulk, cpu_column: hy_cpu}",
        )
    )
    with pytest.raises(
        ScenarioError, match=r"cpu_column 'hy_cpu' needs kind 'trace' \(is 'bulk'\)"
    ):
        load_scenario(scn)
