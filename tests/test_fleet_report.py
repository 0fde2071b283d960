"""Reports at fleet scale: past ~20 VMs the plots aggregate and no legend grows past 12.

The run is a real ``sova simulate`` of a generated 12-host, 36-VM cluster (sova VF policy
and bandwidth allocator); the legends are counted on the figures matplotlib draws.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import matplotlib.axes
import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from sova.cli import app
from sova.sim import fleet

HOSTS, PER_HOST = 12, 3


def fleet_scenario(path: Path, hosts: int = HOSTS, per_host: int = PER_HOST) -> Path:
    names = [f"vm{i}" for i in range(hosts * per_host)]
    data: dict[str, Any] = {
        "name": "fleet",
        "seed": 3,
        "duration": 120,
        "hosts": [
            {
                "name": f"h{h}",
                "cores": 16,
                "memory": "64GiB",
                "nic": {"capacity": "10Gbit", "vf_pool": 2},
                "vms": names[h * per_host : (h + 1) * per_host],
            }
            for h in range(hosts)
        ],
        "vms": [{"name": n, "vcpus": 2, "memory": "2GiB"} for n in names],
        "controller": {"vf_policy": "sova", "bandwidth_policy": "sova"},
        # virtio carries 400 Mbit/s per VM here, so the VMs offering more (up to 720) are
        # worth a VF and the sova policy's cost-benefit gate moves VFs (at the default
        # profile's 13.9 Gbit/s ceiling virtio carries every VM of this fleet; no VF moves).
        "profile": {"virtio_flow_limit": "400Mbit"},
        "workload": [
            {
                "at": 0,
                "vms": {
                    n: {"net": round(0.1 + 0.8 * ((i * 7) % 10) / 10, 2), "rate": "800Mbit"}
                    for i, n in enumerate(names)
                },
            }
        ],
    }
    path.write_text(yaml.safe_dump(data))
    return path


def test_large_run_plots_aggregates_with_short_legends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    legends: list[int] = []
    original = matplotlib.axes.Axes.legend

    def counted(self: matplotlib.axes.Axes, *args: Any, **kwargs: Any) -> Any:
        leg = original(self, *args, **kwargs)
        legends.append(len(leg.get_texts()))
        return leg

    monkeypatch.setattr(matplotlib.axes.Axes, "legend", counted)
    scn = fleet_scenario(tmp_path / "fleet.yaml")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["simulate", str(scn), "--out", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    plots = json.loads((out / "plots.json").read_text())
    n = HOSTS * PER_HOST
    assert n > fleet.AGGREGATE_VMS and HOSTS > fleet.AGGREGATE_HOSTS
    for png in ("throughput.png", "net_degree.png", "io_degree.png"):
        series = plots[png]
        assert {f"median over {n} VMs", f"p10–p90 over {n} VMs", f"p25–p75 over {n} VMs"} <= set(
            series
        )
        tops = [k for k in series if k.startswith("top ")]
        assert 1 <= len(tops) <= fleet.TOP_N
        assert not any(k.startswith("vm") for k in series)  # no line per VM
        assert all(v > 0 for v in series.values())
    hosts = plots["hosts.png"]
    policy = "sova+sova"
    assert hosts[f"{policy}: link use heat map (hosts x periods)"] == HOSTS * 12  # 120 s / 10 s
    assert f"{policy}: median over {HOSTS} hosts" in hosts
    holders = plots["vf_holders.png"]
    assert holders[f"policy: {policy} (VF holders' share of host traffic, host x period)"] > 0
    assert legends and max(legends) <= fleet.MAX_LEGEND
    assert all((out / png).stat().st_size > 0 for png in plots)


def test_small_run_keeps_a_line_per_vm(tmp_path: Path) -> None:
    scn = fleet_scenario(tmp_path / "small.yaml", hosts=3, per_host=2)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["simulate", str(scn), "--out", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    plots = json.loads((out / "plots.json").read_text())
    assert set(plots["throughput.png"]) == {f"vm{i}" for i in range(6)}


@pytest.mark.parametrize(
    ("hosts", "figsize"),
    [(1000, (10, 6.8)), (37, (7, 3.1)), (251, (10, 3.4))],  # grouped by 4, one per row, by 2
)
def test_heat_maps_draw_the_pixels_imshow_drew(hosts: int, figsize: tuple[float, float]) -> None:
    """The heat maps are drawn as the axes' pixels (``fleet._PixelGrid``: imshow's
    resampling buffers were ~14 MiB a map, the report's peak at 1,000 hosts); every pixel of
    the PNG is the one ``imshow(interpolation="nearest")`` drew, gaps (NaN) included, but
    for pixels whose centre falls on a cell boundary (1,000 hosts: one pixel row of 900)."""
    import io

    import matplotlib.pyplot as plt
    from matplotlib.colors import Normalize
    from PIL import Image

    rng = np.random.default_rng(hosts)
    m = rng.random((hosts, 360)) ** 4
    m[:, 100:130] = np.nan
    m[17, :] = 1.0

    def png(draw: Any) -> np.ndarray:
        fig, ax = plt.subplots(figsize=figsize)
        draw(fig, ax)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, dpi=90, format="png")
        plt.close(fig)
        return np.asarray(Image.open(buf))

    def by_imshow(fig: Any, ax: Any) -> None:
        group = -(-hosts // fleet.HEAT_ROWS)
        g = np.vstack([m, np.full((-hosts % group, m.shape[1]), -np.inf)])
        g = g.reshape(-1, group, m.shape[1]).max(axis=1)
        im = ax.imshow(
            g,
            aspect="auto",
            origin="lower",
            interpolation="nearest",
            extent=(0.0, 60.0, -0.5, hosts - 0.5),
            norm=Normalize(0.0, 0.8),
            cmap="viridis",
        )
        ax.set_ylabel(f"host (index; a row = max of {group})" if group > 1 else "host (index)")
        fig.colorbar(im, ax=ax, pad=0.01, fraction=0.03, label="link use")

    want = png(by_imshow)
    got = png(lambda fig, ax: fleet._heat(fig, ax, m, 3600.0, "link use", 0.8, "viridis"))
    assert got.shape == want.shape
    # where a pixel's centre falls on a cell boundary (to rounding) the two may pick either
    # neighbour: such a pixel has the colour imshow drew next to it, in at most one pixel
    # row or one pixel column of the whole map
    rows, cols = np.nonzero((got != want).any(axis=2))
    assert len(set(rows.tolist())) <= 1 or len(set(cols.tolist())) <= 1
    for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
        near = [want[r + dr, c + dc] for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1))]
        assert any((got[r, c] == n).all() for n in near), (r, c)
    assert len(np.unique(got.reshape(-1, 4), axis=0)) > 100  # a map was drawn, not a blank


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", range(8))
def test_band_percentiles_are_nanpercentiles_numbers(dtype: type, seed: int) -> None:
    """The bands' percentiles (``fleet.row_percentiles``: one sort of a block instead of
    ``nanpercentile``'s walk a row at a time) are ``np.nanpercentile``'s, bit for bit and
    in its dtype: rows of any length, NaN anywhere (a VM without a row in a period), a
    row of NaN (the bands drop those first), repeated values and infinities."""
    rng = np.random.default_rng(seed)
    rows, cols = int(rng.integers(1, 40)), int(rng.integers(1, 200))
    a = (rng.standard_normal((rows, cols)) * 10.0 ** int(rng.integers(-3, 5))).astype(dtype)
    a[rng.random((rows, cols)) < rng.random()] = np.nan
    if seed % 2:
        a[rng.random((rows, cols)) < 0.3] = a.flat[0]  # ties
        a[rows // 2, :] = np.nan
        a[-1, 0], a[-1, -1] = np.inf, -np.inf
    # a number in the first row: nanpercentile's dtype follows its first row's result (float32
    # for a float32 row of NaN), and the bands never pass a row without one
    a[0, 0] = 1.0
    qs = [10, 25, 50, 75, 90]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # nanpercentile of an all-NaN row
        want = np.nanpercentile(a, qs, axis=1)
    got = fleet.row_percentiles(a, qs)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
