"""The fleet workload generator: the statistics of real fleets, measured on what it draws."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sova.cli import app
from sova.scenario import load_scenario
from sova.sim.fleetgen import HEAVY, IDLE, FleetShape, generate

SEEDS = [1, 2, 3, 4, 5]
runner = CliRunner()


@pytest.fixture(scope="module")
def fleets() -> list:  # type: ignore[type-arg]
    return [generate(FleetShape(seed=s)) for s in SEEDS]


def test_volume_is_heavy_tailed_with_an_idle_majority(fleets: list) -> None:  # type: ignore[type-arg]
    for f in fleets:
        volume = np.sort(f.mbps.mean(axis=1))[::-1]
        top = volume[: round(0.05 * volume.size)].sum() / volume.sum()
        median = np.median(f.mbps, axis=1)
        # Real fleets: a few VMs carry most of the bytes; most send under 10 Mbit/s; many
        # barely send at all. A lognormal-only fleet with these medians would give the top
        # 5 % about a third of the bytes, not over a half.
        assert top > 0.55, top
        assert (median < 10).mean() >= 0.8
        assert (median < 1).mean() >= 0.4
        # peaks of Gbit/s: someone's peak is above 1 Gbit/s in every fleet
        assert f.mbps.max() > 1000
    assert sum(f.mbps.max() > 4000 for f in fleets) >= 3  # and several Gbit/s in most


def test_diurnal_cycle_and_bursts(fleets: list) -> None:  # type: ignore[type-arg]
    for f in fleets:
        hour = f.time_s / 3600
        # the fleet's light and idle VMs swing with business hours (peak near 14:00)
        many = np.array([r != HEAVY for r in f.roles])
        total = f.mbps[many].sum(axis=0)
        day, night = total[(hour >= 11) & (hour < 17)].mean(), total[(hour < 5)].mean()
        assert day > 1.3 * night, (day, night)
        # bursts: VMs with at least two consecutive samples at >= 5x their own median
        median = np.median(f.mbps, axis=1, keepdims=True)
        hot = f.mbps >= 5 * np.maximum(median, 0.01)
        bursty = (hot[:, 1:] & hot[:, :-1]).any(axis=1)
        assert bursty.sum() >= 10, bursty.sum()


def test_some_vms_are_busy_on_cpu_and_network_at_once(fleets: list) -> None:  # type: ignore[type-arg]
    for f in fleets:
        both = (f.cpu >= 0.5) & (f.mbps >= 300)
        assert both.any(axis=1).sum() >= 1
        for i in np.flatnonzero(f.hybrid):
            assert np.corrcoef(f.cpu[i], f.mbps[i])[0, 1] > 0.7
        idle = np.array([r == IDLE for r in f.roles])
        assert f.cpu[idle].mean() < 0.1
        assert ((f.cpu >= 0) & (f.cpu <= 1)).all()


def test_same_seed_same_fleet_other_seed_other_fleet() -> None:
    a, b = generate(FleetShape(seed=7, vms=50)), generate(FleetShape(seed=7, vms=50))
    c = generate(FleetShape(seed=8, vms=50))
    assert np.array_equal(a.mbps, b.mbps) and np.array_equal(a.cpu, b.cpu)
    assert a.host_of == b.host_of and a.roles == b.roles
    assert not np.array_equal(a.mbps, c.mbps)
    # placement is even: 50 VMs on 8 hosts, 6 or 7 each
    assert sorted(set(np.bincount(a.host_of))) == [6, 7]


def test_cli_writes_a_scenario_that_simulate_replays(tmp_path: Path) -> None:
    r = runner.invoke(
        app,
        ["scenario", "generate", "--hosts", "2", "--vms", "12", "--duration", "20min"]
        + ["--sample", "1min", "--seed", "4", str(tmp_path / "gen")],
    )
    assert r.exit_code == 0, r.output
    scn_path = tmp_path / "gen" / "fleet-h2-v12-s4.yaml"
    scn = load_scenario(scn_path)
    assert len(scn.hosts) == 2 and len(scn.vms) == 12
    assert scn.policies == ["do-nothing", "static-sriov", "dsr-iov", "sova"]
    out = tmp_path / "out"
    r = runner.invoke(
        app, ["simulate", str(scn_path), "--out", str(out), "--no-progress", "-p", "do-nothing"]
    )
    assert r.exit_code == 0, r.output
    with (tmp_path / "gen" / "fleet-h2-v12-s4.csv").open() as fh:
        trace = list(csv.DictReader(fh))
    with (out / "timeline.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    # every sample's offered load is the CSV's value at the tick before it (5 % jitter)
    for row in rows[:: max(1, len(rows) // 200)]:
        t = float(row["time_s"]) - 5
        want = [float(x[f"{row['vm']}_mbps"]) for x in trace if float(x["time_s"]) <= t][-1]
        assert float(row["offered_mbps"]) == pytest.approx(want, rel=0.3, abs=0.05), row


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--vms", "0"], "vms: out of range (got 0)"),
        (["--duration", "3x"], "--duration/--sample: unknown unit 'x'"),
        (["--duration", "1min", "--sample", "5min"], "duration_s: out of range (got 60.0)"),
    ],
)
def test_cli_refuses_bad_options_in_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    r = runner.invoke(app, ["scenario", "generate", *args, str(tmp_path / "x")])
    assert r.exit_code == 2
    assert message in r.output
    assert not (tmp_path / "x").exists()
