"""``sova simulate --threads``: the compiled core shares a tick's VMs and hosts among
threads, and the outputs are the same files whatever the number (docs/design.md#threads)."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from sova.cli import _threads, app

ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = ("timeline.csv", "events.csv", "summary.json")


def _fleet(hosts: int, per_host: int, duration: float) -> dict[str, Any]:
    """The benchmark's hot fleet (benchmarks/simulate_scale.py ``--hot 0.3``: 30 % of the
    hosts hot from the start, the sova VF policy, bandwidth control every second), whose
    hosts migrate VMs and whose VMs get limits within a minute."""
    spec = importlib.util.spec_from_file_location(
        "simulate_scale", ROOT / "benchmarks" / "simulate_scale.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    data: dict[str, Any] = bench.scenario_data(hosts, per_host, duration, seed=3, hot=0.3)
    return data


def test_outputs_are_the_same_on_one_thread_or_two(tmp_path: Path) -> None:
    # 120 hosts x 20 VMs: 2,400 VMs and bandwidth flows, past the core's run of 2,048
    # (rust/sova-core/src/tick.rs RUN), so each tick's VMs and each period's hosts are
    # cut into two runs the threads share; 70 s: migrations (streams on the PFs), limits
    scn = tmp_path / "fleet.yaml"
    scn.write_text(yaml.safe_dump(_fleet(120, 20, 70.0)))
    runner = CliRunner()
    for threads in ("1", "2"):
        out = tmp_path / f"t{threads}"
        args = ["simulate", str(scn), "-o", str(out), "--no-progress", "--threads", threads]
        r = runner.invoke(app, args)
        assert r.exit_code == 0, r.output
    for name in OUTPUTS:
        one = (tmp_path / "t1" / name).read_bytes()
        assert one == (tmp_path / "t2" / name).read_bytes(), name
    # the run did something worth comparing: every VM's rows, limits set, migrations
    # decided and their events
    rows = list(csv.DictReader((tmp_path / "t1" / "timeline.csv").open()))
    assert len(rows) > 2400
    assert sum(r["limit_mbps"] != "" for r in rows) > 10
    summary = json.loads((tmp_path / "t1" / "summary.json").read_text())
    assert summary["policies"]["sova+sova"]["migrations"] > 0
    assert len((tmp_path / "t1" / "events.csv").read_text().splitlines()) > 10


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5", ""])
def test_a_bad_thread_count_is_refused_in_one_line(tmp_path: Path, value: str) -> None:
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["simulate", "sova-fig5", "-o", str(out), "--threads", value])
    assert r.exit_code == 2, r.output
    line = " ".join(r.output.split())
    assert f"--threads: {value!r} is not a count of threads >= 1 or auto" in line
    assert len(r.output.strip().splitlines()) == 1
    assert not out.exists()


def test_auto_is_the_cpu_count() -> None:
    assert _threads("auto") == _threads("AUTO") == (os.cpu_count() or 1)
    assert _threads("3") == 3
