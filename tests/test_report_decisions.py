"""The report shows decisions (issue 35): where the VFs are against the traffic, the
busiest VMs drawn, one colour per host and legends beside the lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.axes
import numpy as np
import pytest
import yaml

from sova.record import Timeline
from sova.scenario import PolicySpec, load_scenario
from sova.sim import decisions as dq
from sova.sim import fleet, report, report_plots
from sova.sim.world import TICK_HOSTS, World
from sova.writer import HOST_COLOURS


def _scenario(path: Path, hosts: int, vms: dict[str, dict[str, Any]], pool: int = 1) -> Path:
    names = list(vms)
    data = {
        "name": "decisions",
        "seed": 4,
        "duration": 120,
        "hosts": [
            {
                "name": f"h{h + 1}",
                "cores": 16,
                "memory": "64GiB",
                "nic": {"capacity": "10Gbit", "vf_pool": pool},
                "vms": names[h::hosts],
            }
            for h in range(hosts)
        ],
        "vms": [{"name": n} for n in names],
        "workload": [{"at": 0, "vms": vms}],
    }
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("policy", "low", "high"),
    [
        # dsr-iov gives the one VF to "big" (800 of the host's ~802 Mbit/s): share ~1
        ("dsr-iov", 0.95, 1.0),
        # static-sriov keeps it on "quiet", created first, which sends ~1 of ~802: ~0
        ("static-sriov", 0.0, 0.01),
    ],
)
def test_holder_share_is_the_holders_part_of_the_host_traffic(
    tmp_path: Path, policy: str, low: float, high: float
) -> None:
    vms = {
        "quiet": {"kind": "bulk", "rate": "1Mbit"},
        "big": {"kind": "bulk", "rate": "800Mbit"},
        "other": {"kind": "bulk", "rate": "1Mbit"},
    }
    scn = load_scenario(_scenario(tmp_path / "s.yaml", 1, vms))
    run = World(scn, PolicySpec(name=policy, vf=policy)).run_until(scn.duration)
    g = fleet.grid(run, list(vms), ["h1"])
    share = fleet.holder_share(run, g)
    # the last minute, once the VF is where the policy puts it
    late = share[0, g.times >= 60]
    assert late.size and low <= float(late.min()) and float(late.max()) <= high, late


def test_fleet_metric_plots_draw_the_busiest_vms(tmp_path: Path) -> None:
    # 24 VMs (past the 20 where plots aggregate), rates 1..24 x 10 Mbit/s; the busiest
    # are vm24..vm20 on every metric, io_degree included (high on idle VMs)
    vms = {f"vm{i}": {"kind": "bulk", "rate": f"{10 * i}Mbit"} for i in range(1, 25)}
    scn = load_scenario(_scenario(tmp_path / "s.yaml", 2, vms, pool=2))
    assert fleet.aggregates_vms(scn)
    run = World(scn, PolicySpec(name="dsr-iov", vf="dsr-iov")).run_until(scn.duration)
    g = fleet.grid(run, list(vms), ["h1", "h2"])
    for metric in ("tx_mbps", "io_degree"):
        plotted = fleet.plot_metric_fleet(tmp_path / f"{metric}.png", scn, run, g, metric, metric)
        assert plotted is not None
        tops = [k.split(": ")[1] for k in plotted if k.startswith("top ")]
        assert tops == ["vm24", "vm23", "vm22", "vm21", "vm20"], (metric, tops)


def test_host_plot_has_a_colour_per_host_and_its_legend_beside_the_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert len(set(HOST_COLOURS)) >= TICK_HOSTS and "tab:red" not in HOST_COLOURS
    hosts = 8
    vms = {f"vm{i}": {"kind": "bulk", "rate": f"{100 * (i + 1)}Mbit"} for i in range(hosts)}
    scn = load_scenario(_scenario(tmp_path / "s.yaml", hosts, vms))
    run = World(scn, PolicySpec(name="default", vf="default")).run_until(scn.duration)
    drawn: list[tuple[matplotlib.axes.Axes, Any]] = []
    original = matplotlib.axes.Axes.legend

    def keep(self: matplotlib.axes.Axes, *args: Any, **kwargs: Any) -> Any:
        leg = original(self, *args, **kwargs)
        drawn.append((self, leg))
        return leg

    monkeypatch.setattr(matplotlib.axes.Axes, "legend", keep)
    report_plots.plot_hosts(tmp_path / "hosts.png", scn, [run])
    assert len(drawn) == 1
    ax, leg = drawn[0]
    colours = {str(line.get_label()): line.get_color() for line in ax.get_lines()}
    host_colours = [c for label, c in colours.items() if label.endswith(" net")]
    assert len(host_colours) == hosts and len(set(host_colours)) == hosts
    # the legend lies outside the axes' box: it covers no line
    box, lbox = ax.get_window_extent(), leg.get_window_extent()
    assert lbox.x0 >= box.x1 or not lbox.overlaps(box)
    # 1-8 x 100 Mbit/s on 10 Gbit/s links: at most 8 % used; the scale follows (not 0-1.1)
    assert ax.get_ylim()[1] < 0.2
    peaks = [
        np.nanmax(line.get_ydata()) for line in ax.get_lines() if "net" in str(line.get_label())
    ]
    assert max(peaks) <= ax.get_ylim()[1]


def test_report_counts_moves_and_draws_vf_time_against_demand(tmp_path: Path) -> None:
    vms = {
        "quiet": {"kind": "bulk", "rate": "1Mbit"},
        "big": {"kind": "bulk", "rate": "800Mbit"},
        "other": {"kind": "bulk", "rate": "1Mbit"},
    }
    scn = load_scenario(_scenario(tmp_path / "s.yaml", 1, vms))
    run = World(scn, PolicySpec(name="static-sriov", vf="static-sriov")).run_until(scn.duration)
    lines = report.decisions_table(scn, [run])
    # one VF, handed once to "quiet" (created first), which sends 1 Mbit/s: one move in
    # 120 s on one host = 30 per host-hour, useless (virtio carries 1 Mbit/s)
    assert "| static-sriov | 1 | 30.0 | 1 (100%) | 0 | 0 |" in lines
    plotted = report_plots.plot_vf_holding(tmp_path / "holding.png", scn, [run])
    assert plotted == {"static-sriov: VMs (mean demand, time on VF)": 3}
    assert (tmp_path / "holding.png").stat().st_size > 0


def test_demand_grid_read_a_chunk_at_a_time_is_the_rows_values(tmp_path: Path) -> None:
    vms = {f"v{i}": {"kind": "bulk", "rate": f"{100 * (i + 1)}Mbit"} for i in range(5)}
    scn = load_scenario(_scenario(tmp_path / "s.yaml", 2, vms))
    run = World(scn, PolicySpec(name="sova", vf="sova")).run_until(scn.duration)
    rows = list(run.timeline)
    # chunks of 7 rows, every one in the spill file: periods straddle chunks
    tl = Timeline(rows, chunk_rows=7, spill_bytes=0)
    names = ["v3", "v0", "absent", "v4"]  # a subset, out of order, one with no rows
    grid = dq.demand_grid(tl, names)
    times = sorted({r.time_s for r in rows})
    assert grid.times.tolist() == times
    want = np.zeros((3, len(names), len(times)))
    for r in rows:  # the readable form: each row's cells where its VM and time say
        if r.vm in names:
            i, j = names.index(r.vm), times.index(r.time_s)
            off = r.offered_mbps if r.offered_mbps is not None else 0.0
            want[:, i, j] = (off * 1e6, r.tx_mbps * 1e6, r.cpu_usage)
    assert np.array_equal(grid.offered, want[0])
    assert grid.delivered is not None and np.array_equal(grid.delivered, want[1])
    assert dq.demand_grid(tl, names, delivered=False).delivered is None
    assert grid.cpu is not None and np.array_equal(grid.cpu, want[2])
    assert grid.offered[names.index("v4")].any()  # not a grid of zeros


def test_sample_times_are_read_once_while_the_timeline_keeps_its_rows(tmp_path: Path) -> None:
    vms = {f"v{i}": {"kind": "bulk", "rate": f"{100 * (i + 1)}Mbit"} for i in range(3)}
    scn = load_scenario(_scenario(tmp_path / "s.yaml", 2, vms))
    run = World(scn, PolicySpec(name="sova", vf="sova")).run_until(scn.duration)
    rows = list(run.timeline)
    tl = Timeline(rows[:-4], chunk_rows=5, spill_bytes=0)
    walks = 0
    chunks = tl.chunks

    def counted() -> Any:
        nonlocal walks
        walks += 1
        return chunks()

    tl.chunks = counted  # type: ignore[method-assign]
    first = tl.sample_times()
    assert first.tolist() == sorted({r.time_s for r in rows[:-4]})
    assert dq.demand_grid(tl, ["v0"]).times is first
    assert fleet.grid(run_with(run, tl), ["v0"], ["h1"]).times is first
    assert walks == 3  # sample_times once, then the two grids' own fills
    with pytest.raises(ValueError):
        first[0] = -1.0  # shared by every reader: read-only
    tl.extend(rows[-4:])  # more rows: read again
    assert tl.sample_times().tolist() == sorted({r.time_s for r in rows})
    assert walks == 4


def run_with(run: Any, timeline: Timeline) -> Any:
    import dataclasses

    return dataclasses.replace(run, timeline=timeline)
