"""``sova demo`` reproduces docs/design.md#exp-s5 through real processes and HTTP, and its output
files equal an in-process ``sova simulate`` run of the same scenario and policy."""

from __future__ import annotations

import csv
from pathlib import Path

from rich.console import Console

from sova.demo import run_demo
from sova.scenario import load_scenario
from sova.sim.output import write_outputs
from sova.sim.runner import run_policy

from .conftest import REPO

FIG5 = REPO / "scenarios" / "sova-fig5.yaml"


def _in_process(scn_path: Path, policy: str, out: Path) -> None:
    scn = load_scenario(scn_path)
    only = [p for p in scn.policy_specs if p.name == policy]
    write_outputs(out, [(scn.model_copy(update={"compare": only}), [run_policy(scn, policy)])])


def test_demo_reproduces_s5_and_matches_simulate(tmp_path: Path) -> None:
    demo_out, sim_out = tmp_path / "demo", tmp_path / "sim"
    final = run_demo(FIG5, demo_out, "sova", live=False, timeout_s=120, console=Console(quiet=True))
    assert final["done"] and final["violation_count"] == 0
    _in_process(FIG5, "sova", sim_out)
    for name in ("events.csv", "timeline.csv"):
        assert (demo_out / name).read_text() == (sim_out / name).read_text(), name
    moves = [
        (r["vm"], r["src_host"], r["dst_host"])
        for r in csv.DictReader((demo_out / "events.csv").open())
        if r["event"] == "migrate_end"
    ]
    # Sova Fig. 5: stage 1 VM1 HM1 -> HM3; stage 2 a hotspot but no move; stage 3 VM1 HM3 -> HM2.
    assert moves[:2] == [("VM1", "HM1", "HM3"), ("VM1", "HM3", "HM2")]
    hot_no_move = [
        r
        for r in csv.DictReader((demo_out / "events.csv").open())
        if r["event"] == "hotspot" and "no cold spot" in r["detail"]
    ]
    assert hot_no_move
    assert (demo_out / "report.md").exists() and (demo_out / "summary.json").exists()
