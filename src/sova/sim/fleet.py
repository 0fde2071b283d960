"""The report's plots at fleet scale: aggregates instead of one line per VM or host.

Past :data:`AGGREGATE_VMS` VMs a line and a legend entry per VM says nothing (and laying
out a 600-entry legend costs matplotlib tens of seconds), so the per-VM plots become
percentile bands over the VMs with the top :data:`TOP_N` VMs by volume drawn on top; past
:data:`AGGREGATE_HOSTS` hosts the per-host plots become host x time heat maps (link use,
VF holders) under a percentile band over the hosts. No legend has more than
:data:`MAX_LEGEND` entries. The timeline is turned into period x VM arrays in one pass
(:class:`Grid`), so a 1,000-host report costs seconds, not minutes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from sova.scenario import Scenario
from sova.sim.decisions import Moves, run_moves
from sova.sim.world import TICK_HOSTS, PolicyRun
from sova.writer import PNG_DPI, PNG_META, Plotted

AGGREGATE_VMS = 20  # more VMs than this: per-VM plots aggregate
AGGREGATE_HOSTS = TICK_HOSTS  # more hosts than this: per-host plots become heat maps
TOP_N = 5
MAX_LEGEND = 12
BANDS = ((10.0, 90.0, 0.18), (25.0, 75.0, 0.35))
BLOCK = 256  # rows (or columns) of a period x VM grid reduced at a time
HEAT_ROWS = 250  # most pixel rows of a host x time heat map  # (low, high percentile, alpha)


def aggregates_vms(scn: Scenario) -> bool:
    return len(scn.vms) > AGGREGATE_VMS


def aggregates_hosts(scn: Scenario) -> bool:
    return len(scn.hosts) > AGGREGATE_HOSTS


@dataclass(frozen=True)
class Grid:
    """A run's timeline as arrays: one row per control period, one column per VM."""

    times: np.ndarray  # period end times (s), ascending
    vms: list[str]
    hosts: list[str]
    host: np.ndarray  # period x VM: index into hosts, -1 where the VM has no row (int32)
    vf: np.ndarray  # period x VM: held a VF


def _codes(run: PolicyRun, column: str, names: Sequence[str]) -> np.ndarray:
    """The timeline's codes of ``column`` -> index into ``names`` (-1: not there)."""
    where = {v: i for i, v in enumerate(names)}
    texts = run.timeline.texts(column)
    return np.array([where.get(str(v), -1) for v in texts] + [-1], dtype=np.int64)


def grid(run: PolicyRun, vms: Sequence[str], hosts: Sequence[str]) -> Grid:
    """Where each VM was and whether it held a VF, from the timeline's columns a chunk at a
    time (no row objects); a metric's values come from :func:`metric`, one at a time."""
    tl = run.timeline
    vcode = _codes(run, "vm", vms)
    hcode = _codes(run, "host", hosts)
    is_vf = np.array([t == "vf" for t in tl.texts("nic")] + [False])
    times = tl.sample_times()
    shape = (times.size, len(vms))
    host = np.full(shape, -1, dtype=np.int32)
    vf = np.zeros(shape, dtype=bool)
    for c in tl.chunks():
        cols = c.columns
        vi = vcode[cols["vm"]]
        ok = vi >= 0
        vi = vi[ok]
        ti = np.searchsorted(times, cols["time_s"][ok])
        host[ti, vi] = hcode[cols["host"][ok]]
        vf[ti, vi] = is_vf[cols["nic"][ok]]
    return Grid(times, list(vms), list(hosts), host, vf)


def metric(run: PolicyRun, g: Grid, name: str) -> np.ndarray:
    """Period x VM values of one timeline metric, float32 (NaN: no row or no value): plotted,
    not written, and drawn one metric at a time (an hour of 3,000 VMs is 4 MB, not 9)."""
    vcode = _codes(run, "vm", g.vms)
    values = np.full((g.times.size, len(g.vms)), np.nan, dtype=np.float32)
    for c in run.timeline.chunks(("vm", "time_s", name)):
        cols = c.columns
        vi = vcode[cols["vm"]]
        ok = vi >= 0
        ti = np.searchsorted(g.times, cols["time_s"][ok])
        # an empty cell (None, stored as a NaN) is NaN here too
        values[ti, vi[ok]] = cols[name][ok]
    return values


def row_percentiles(a: np.ndarray, qs: Sequence[float]) -> np.ndarray:
    """``np.nanpercentile(a, qs, axis=1)`` (its default "linear" method), the same numbers
    bit for bit and the same dtype, for a 2-D ``a`` whose rows each hold a number.

    ``nanpercentile`` walks a row at a time in Python (``apply_along_axis``) as soon as one
    NaN is in the array, which every VM without a row in a period puts there: ~0.04 CPU-s
    for each of an hour's 360 x 3,000 grids. One sort of the block instead (NaN sorts
    last), then numpy's own arithmetic: the virtual index ``(n - 1) * q`` and its ``_lerp``
    (``a + (b - a) * t``, or ``b - (b - a) * (1 - t)`` from ``t >= 0.5``) in float64."""
    q = np.asarray(qs, dtype=np.float64) / 100.0
    s = np.sort(a, axis=1)
    n = a.shape[1] - np.isnan(a).sum(axis=1)
    rows = np.arange(a.shape[0])
    out = np.empty((q.size, a.shape[0]), dtype=np.result_type(a.dtype, np.float64))
    for k in range(q.size):
        with np.errstate(invalid="ignore"):  # inf - inf, and rows of NaN: NaN, as numpy's
            out[k] = _lerp_at(s, rows, n, (n - 1) * q[k])
    return out


def _lerp_at(s: np.ndarray, rows: np.ndarray, n: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Each sorted row of ``s`` read at its virtual index ``at`` (numpy's ``_lerp``)."""
    lo = np.floor(at)
    below = np.maximum(lo.astype(np.intp), 0)
    above = np.minimum(below + 1, np.maximum(n - 1, 0))
    t = at - lo
    first, second = s[rows, below], s[rows, above]
    diff = second - first
    r: np.ndarray = first + diff * t
    np.subtract(second, diff * (1 - t), out=r, where=t >= 0.5, casting="unsafe")
    r[n == 0] = np.nan
    return r


def _bands(ax: Axes, x: np.ndarray, a: np.ndarray, what: str, plotted: Plotted) -> None:
    """Percentile bands and the median of ``a`` (rows: times, columns: members)."""
    ok = np.isfinite(a).any(axis=1)
    if not ok.all():
        x, a = x[ok], a[ok]
    if a.size == 0:
        return
    # a block of rows at a time: the same numbers (each row's percentiles are its own),
    # without sorted copies of an hour's period x VM grid at once
    pct = np.concatenate(
        [
            row_percentiles(a[i : i + BLOCK], [10, 25, 50, 75, 90])
            for i in range(0, a.shape[0], BLOCK)
        ],
        axis=1,
    )
    at = {10.0: 0, 25.0: 1, 50.0: 2, 75.0: 3, 90.0: 4}
    for lo, hi, alpha in BANDS:
        label = f"p{lo:g}–p{hi:g} over {what}"
        ax.fill_between(
            x, pct[at[lo]], pct[at[hi]], color="tab:blue", alpha=alpha, lw=0, label=label
        )
        plotted[label] = int(x.size)
    label = f"median over {what}"
    ax.plot(x, pct[2], color="tab:blue", lw=1.6, label=label)
    plotted[label] = int(x.size)


def _volume(a: np.ndarray) -> np.ndarray:
    """Each column's sum of magnitudes, columns a block at a time (each VM's sum adds its
    periods in the same order)."""
    return np.concatenate(
        [np.nansum(np.abs(a[:, j : j + BLOCK]), axis=0) for j in range(0, a.shape[1], BLOCK)]
        or [np.zeros(0, dtype=a.dtype)]
    )


def traffic_volume(run: PolicyRun, g: Grid, tx: np.ndarray | None = None) -> np.ndarray:
    """Each VM's traffic over the run (sum of its tx samples), the order of "busiest";
    ``tx``: the run's :func:`metric` ``tx_mbps``, if the caller read it already."""
    return _volume(metric(run, g, "tx_mbps") if tx is None else tx)


def holder_share(run: PolicyRun, g: Grid) -> np.ndarray:
    """Hosts x periods: the share of each host's offered traffic that its VF holders offer
    (NaN where the host offers none). 1 means the VFs sit on the VMs that send; near 0,
    on VMs that barely send, whatever the number of holders."""
    offered = metric(run, g, "offered_mbps")
    offered = np.where(np.isfinite(offered), offered, np.float32(0.0))
    H = len(g.hosts)
    out = np.full((H, g.times.size), np.nan)
    for p in range(g.times.size):  # a period at a time (see plot_vf_holders_fleet)
        h = g.host[p]
        ok = h >= 0
        total = np.bincount(h[ok], offered[p][ok], minlength=H)
        held = np.bincount(h[ok], np.where(g.vf[p][ok], offered[p][ok], 0.0), minlength=H)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, p] = np.where(total > 0, held / total, np.nan)
    return out


def plot_metric_fleet(
    path: Path,
    scn: Scenario,
    run: PolicyRun,
    g: Grid,
    name: str,
    label: str,
    volume: np.ndarray | None = None,
    values: np.ndarray | None = None,
) -> Plotted | None:
    """Percentile bands over the VMs and the top :data:`TOP_N` VMs by volume (``volume``:
    :func:`traffic_volume`, if the caller has it); ``values``: the :func:`metric` ``name``
    of ``run``, if the caller read it already (written into)."""
    a = metric(run, g, name) if values is None else values
    a[~np.isfinite(a)] = np.nan
    if not np.isfinite(a).any():
        return None
    x = g.times / 60.0
    plotted: Plotted = {}
    fig, ax = plt.subplots(figsize=(10, 4), dpi=PNG_DPI)
    _bands(ax, x, a, f"{len(g.vms)} VMs", plotted)
    # The VMs drawn are the busiest senders whatever the metric: ranked by the metric's
    # own volume, io_degree (high when idle) drew the idlest VMs.
    if volume is None:
        volume = traffic_volume(run, g) if name != "tx_mbps" else _volume(a)
    top = [int(i) for i in np.argsort(-volume, kind="stable")[:TOP_N] if volume[i] > 0]
    colours = ("tab:red", "tab:orange", "tab:green", "tab:purple", "tab:brown")
    for k, i in enumerate(top):
        col = a[:, i]
        ok = np.isfinite(col)
        name = f"top {k + 1}: {g.vms[i]}"
        ax.plot(x[ok], col[ok], lw=0.9, color=colours[k % len(colours)], label=name)
        plotted[name] = int(ok.sum())
    for p in scn.workload:
        if p.at > 0 and len(scn.workload) <= 20:
            ax.axvline(p.at / 60.0, color="grey", lw=0.6, ls="--")
    ax.set_xlabel("time (min)")
    ax.set_ylabel(label)
    ax.set_title(
        f"{scn.name} ({run.policy}): {label} — spread over {len(g.vms)} VMs, "
        f"top {len(top)} by traffic",
        fontsize=10,
        loc="left",
    )
    ax.legend(fontsize=8, ncol=2, loc="upper right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=PNG_DPI, metadata=PNG_META)
    plt.close(fig)
    return plotted


class _PixelGrid(Artist):
    """A heat map drawn as the axes' own pixels: each screen pixel of the axes takes the
    colour of the cell under its centre (what ``imshow(interpolation="nearest")`` shows).

    ``imshow`` resamples through float32 RGBA buffers at the output size, several copies of
    them (~14 MiB for one of the report's maps: the peak of a 1,000-host report). Here the
    cells are coloured once (uint8, cells x 4 bytes) and spread to the axes' pixel box by
    index (pixels x 4 bytes, ~1 MB), then handed to the renderer as they are."""

    def __init__(self, rgba: np.ndarray) -> None:
        super().__init__()
        self._rgba = rgba  # rows bottom-up (origin "lower"), uint8 RGBA

    def draw(self, renderer: RendererBase) -> None:
        if self.axes is None or not self.get_visible():
            return
        x0, y0, x1, y1 = self.axes.bbox.extents
        left, bottom = int(np.floor(x0)), int(np.floor(y0))
        w, h = int(np.ceil(x1)) - left, int(np.ceil(y1)) - bottom
        if w <= 0 or h <= 0:
            return
        rows, cols = self._rgba.shape[:2]
        # the cell under each pixel's centre; Agg takes the image's first row as the bottom one
        ci = np.minimum(((np.arange(w) + left + 0.5 - x0) * cols / (x1 - x0)).astype(int), cols - 1)
        ri = np.minimum(
            ((np.arange(h) + bottom + 0.5 - y0) * rows / (y1 - y0)).astype(int), rows - 1
        )
        pixels = self._rgba[np.maximum(ri, 0)][:, np.maximum(ci, 0)]
        gc = renderer.new_gc()
        gc.set_clip_rectangle(self.axes.bbox)
        renderer.draw_image(gc, left, bottom, np.ascontiguousarray(pixels))
        gc.restore()


def _heat(
    fig: Figure, ax: Axes, m: np.ndarray, t_end: float, what: str, vmax: float, cmap: str
) -> None:
    """Hosts down, time across; ``m`` is hosts x periods. Past :data:`HEAT_ROWS` hosts a
    row of the map is the largest value of a group of neighbouring hosts: the image has
    fewer pixel rows than a fleet has hosts, and nearest-pixel sampling would drop most
    hosts (hot ones with them)."""
    hosts = m.shape[0]
    group = -(-hosts // HEAT_ROWS)
    label = "host (index)"
    if group > 1:
        pad = np.full((-hosts % group, m.shape[1]), -np.inf)
        m = np.vstack([m, pad]).reshape(-1, group, m.shape[1]).max(axis=1)
        label = f"host (index; a row = max of {group})"
    mappable = ScalarMappable(norm=Normalize(0.0, vmax), cmap=cmap)
    ax.add_artist(_PixelGrid(mappable.to_rgba(m, bytes=True)))
    ax.set_xlim(0.0, t_end / 60.0)
    ax.set_ylim(-0.5, hosts - 0.5)
    ax.set_ylabel(label)
    fig.colorbar(mappable, ax=ax, pad=0.01, fraction=0.03, label=what)


def plot_hosts_fleet(path: Path, scn: Scenario, runs: Sequence[PolicyRun]) -> Plotted:
    """Per policy: link use over hosts as bands (max and α drawn), and a host x time heat
    map of link use (control-period means)."""
    plotted: Plotted = {}
    k = max(1, int(round(scn.controller.period / scn.tick)))
    alpha = scn.controller.manager.alpha
    fig, axes = plt.subplots(
        2 * len(runs),
        1,
        figsize=(10, 5.6 * len(runs)),
        squeeze=False,
        dpi=PNG_DPI,
        gridspec_kw={"height_ratios": [1.0, 1.6] * len(runs)},
    )
    for n, run in enumerate(runs):
        st = run.stats
        band_ax, heat_ax = axes[2 * n, 0], axes[2 * n + 1, 0]
        per = st.host_net.periods()
        t = np.asarray(st.series_t, dtype=float)
        tp = t[k - 1 :: k] if t.size >= k else t[-1:]
        tp = np.append(tp, t[-1]) if tp.size < per.shape[0] else tp
        _bands(band_ax, tp / 60.0, per, f"{per.shape[1]} hosts", plotted)
        if per.size:
            busiest = per.max(axis=1)
            band_ax.plot(tp / 60.0, busiest, color="tab:red", lw=0.9, label="busiest host")
            plotted[f"{run.policy}: busiest host"] = int(busiest.size)
        band_ax.axhline(alpha, color="red", lw=0.8, ls=":", label=f"α = {alpha:g}")
        moves = len(run.engine.migration_log) if run.engine is not None else 0
        band_ax.set_ylim(0, 1.1)
        band_ax.set_ylabel("link utilisation")
        band_ax.set_title(
            f"policy: {run.policy} — link use over {per.shape[1]} hosts, {moves} migrations",
            fontsize=10,
            loc="left",
        )
        band_ax.legend(fontsize=7, ncol=3, loc="upper right")
        band_ax.grid(alpha=0.3)
        band_ax.set_xlim(0, float(t[-1]) / 60.0 if t.size else 1.0)
        # colours up to the busiest host: a fleet at 5 % on a 0-1 scale is one flat colour,
        # and the map is there to show which hosts stand out (the band above has the scale)
        top = max(float(np.nanmax(per)) if per.size else 0.0, 0.05)
        _heat(fig, heat_ax, per.T, float(t[-1]) if t.size else 1.0, "link use", top, "viridis")
        heat_ax.set_title(
            f"policy: {run.policy} — link use per host (colour scale 0 to {top:.2f})",
            fontsize=10,
            loc="left",
        )
        plotted[f"{run.policy}: link use heat map (hosts x periods)"] = int(per.size)
        # the band's own keys are shared by every policy: qualify them
        for key in [k_ for k_ in plotted if k_.startswith(("p10", "p25", "median"))]:
            plotted[f"{run.policy}: {key}"] = plotted.pop(key)
    axes[-1, 0].set_xlabel("time (min)")
    fig.tight_layout()
    fig.savefig(path, dpi=PNG_DPI, metadata=PNG_META)
    plt.close(fig)
    return plotted


def plot_vf_holders_fleet(
    path: Path,
    scn: Scenario,
    runs: Sequence[PolicyRun],
    grids: Sequence[Grid],
    facts: Sequence[Moves] | None = None,
) -> Plotted | None:
    """Per policy: a host x time heat map of the share of each host's offered traffic its
    VF holders offer, and the VF moves per host-hour in the title (a count of holders per
    host was a flat "pool size" that showed no decision)."""
    if not any(g.vf.any() for g in grids):
        return None
    plotted: Plotted = {}
    fig, axes = plt.subplots(
        len(runs), 1, figsize=(10, 3.4 * len(runs)), squeeze=False, dpi=PNG_DPI
    )
    for k, (ax, run, g) in enumerate(zip(axes[:, 0], runs, grids, strict=True)):
        end = float(g.times[-1]) if g.times.size else 1.0
        share = holder_share(run, g)
        _heat(fig, ax, share, end, "holders' share of host traffic", 1.0, "magma")
        m = (
            facts[k]
            if facts is not None
            else run_moves(run.timeline, run.events, g.vms, scn.profile)
        )
        moves, useless = m.attaches, m.useless
        hours = max(end, 1e-9) / 3600.0
        per_host_h = len(moves) / (max(len(g.hosts), 1) * hours)
        mean = float(np.nanmean(share)) if np.isfinite(share).any() else 0.0
        ax.set_title(
            f"policy: {run.policy} — VF holders' share of host traffic (mean {mean:.2f}); "
            f"{len(moves)} VF moves ({per_host_h:.1f} /host-h), {len(useless)} useless",
            fontsize=10,
            loc="left",
        )
        plotted[f"policy: {run.policy} (VF holders' share of host traffic, host x period)"] = int(
            np.isfinite(share).sum()
        )
    axes[-1, 0].set_xlabel("time (min)")
    fig.suptitle(
        f"{scn.name}: where the VFs are — 1 = on the VMs that send, 0 = on idle VMs; "
        "useless = virtio carried the VM's demand",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=PNG_DPI, metadata=PNG_META)
    plt.close(fig)
    return plotted
