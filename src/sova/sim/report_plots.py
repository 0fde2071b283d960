"""The plots of a simulated run's report.md (:mod:`sova.sim.report`), drawn before its
text: VF holders, the per-VM metrics, the hosts' links and the VF holding time against
demand; a fleet's through :mod:`sova.sim.fleet`'s aggregated forms.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sova import writer
from sova.scenario import Scenario
from sova.sim.decisions import Moves, run_moves
from sova.sim.world import PolicyRun
from sova.writer import PNG_DPI, PNG_META, HolderPanel, Plotted


@dataclass
class Drawn:
    """The plots a report embeds, drawn before its text is written."""

    plots: dict[str, Plotted] = field(default_factory=dict)
    has_holders: bool = False
    has_holding: bool = False
    metric_pngs: list[tuple[str, str]] = field(default_factory=list)  # (file, label)
    moves: list[Moves] = field(default_factory=list)  # per run, in the runs' order

    def keep(self, name: str, plotted: Plotted | None) -> bool:
        if plotted is None:
            return False
        self.plots[name] = plotted
        return True


def draw(out: Path, scn: Scenario, runs: Sequence[PolicyRun]) -> Drawn:
    """Every plot of the report; a fleet's (many VMs or hosts) drawn aggregated."""
    from sova.sim import fleet

    drawn = Drawn()
    keep = drawn.keep
    # one run's demand grid at a time
    vm_names = [v.name for v in scn.vms]
    drawn.moves = [run_moves(r.timeline, r.events, vm_names, scn.profile) for r in runs]
    main = next((r for r in runs if r.policy in ("sova", "dsr-iov")), runs[-1])
    metrics = (
        ("throughput.png", "tx_mbps", "tx (Mbit/s)"),
        ("net_degree.png", "net_degree", "net_degree (ranking score)"),
        ("io_degree.png", "io_degree", "io_degree (I/O filter)"),
    )
    if fleet.aggregates_vms(scn):
        vms, hosts = [v.name for v in scn.vms], [h.name for h in scn.hosts]
        # every run's VF holders are drawn; the metrics for the main run only, one at a time
        grids = [fleet.grid(r, vms, hosts) for r in runs]
        drawn.has_holders = keep(
            "vf_holders.png",
            fleet.plot_vf_holders_fleet(out / "vf_holders.png", scn, runs, grids, drawn.moves),
        )
        g = next(gr for r, gr in zip(runs, grids, strict=True) if r is main)
        del grids  # the other runs' grids are not drawn again
        # the busiest VMs, drawn in every metric's plot: its traffic summed once, from the
        # grid the throughput plot draws (one read of the timeline less; one grid at a time)
        read = {"tx_mbps": fleet.metric(main, g, "tx_mbps")}
        volume = fleet.traffic_volume(main, g, read["tx_mbps"])
        for name, metric, label in metrics:
            plotted = fleet.plot_metric_fleet(
                out / name, scn, main, g, metric, label, volume, read.pop(metric, None)
            )
            if keep(name, plotted):
                drawn.metric_pngs.append((name, label))
    else:
        drawn.has_holders = keep(
            "vf_holders.png", plot_vf_holders(out / "vf_holders.png", scn, runs)
        )
        drawn.metric_pngs = [
            (name, label)
            for name, metric, label in metrics
            if keep(name, plot_metric(out / name, scn, main, metric, label))
        ]
    if fleet.aggregates_hosts(scn):
        keep("hosts.png", fleet.plot_hosts_fleet(out / "hosts.png", scn, runs))
    elif len(scn.hosts) > 1:
        keep("hosts.png", plot_hosts(out / "hosts.png", scn, runs))
    drawn.has_holding = keep(
        "vf_holding.png", plot_vf_holding(out / "vf_holding.png", scn, runs, drawn.moves)
    )
    return drawn


def plot_vf_holders(path: Path, scn: Scenario, runs: Sequence[PolicyRun]) -> Plotted | None:
    """VF holders over time, coloured by the host they held the VF on; None (and no file)
    when no run had a VF holder and the paper published none: nothing to show."""
    period = scn.controller.period
    panels = []
    for run in runs:
        spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        hosts: dict[str, list[str]] = defaultdict(list)
        for r in run.timeline:
            if r.nic == "vf":
                spans[r.vm].append((r.time_s - period, period))
                hosts[r.vm].append(r.host)
        marks = [p.at for p in scn.workload if p.at > 0]
        panels.append(HolderPanel(f"policy: {run.policy}", spans, marks, hosts))
    # A run that never held a VF gets no panel (an empty frame says nothing); the title
    # names it instead.
    empty = [p.title.removeprefix("policy: ") for p in panels if writer.holder_count([p]) == 0]
    panels = [p for p in panels if writer.holder_count([p]) > 0]
    if not panels:
        return None
    title = f"{scn.name}: VF holders, coloured by host"
    if scn.paper.vf_holders:
        title += " (orange: the paper's)"
    if empty:
        title += f"\nno VF held under: {', '.join(empty)}"
    return writer.plot_vf_holders(
        path,
        [v.name for v in scn.vms],
        panels,
        expected=[(ph.vms, ph.start, ph.end) for ph in scn.paper.vf_holders],
        title=title,
        minutes=True,
    )


def plot_metric(
    path: Path, scn: Scenario, run: PolicyRun, metric: str, label: str
) -> Plotted | None:
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in run.timeline:
        v = getattr(r, metric)
        if v is not None and np.isfinite(float(v)):
            series[r.vm].append((r.time_s / 60.0, float(v)))
    if not series:
        return None
    plotted: Plotted = {}
    plt = writer.pyplot()
    fig, ax = plt.subplots(figsize=(10, 4), dpi=PNG_DPI)
    for vm in [v.name for v in scn.vms]:
        pts = series.get(vm, [])
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=vm, lw=1.2)
            plotted[vm] = len(pts)
    for p in scn.workload:
        if p.at > 0:
            ax.axvline(p.at / 60.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("time (min)")
    ax.set_ylabel(label)
    ax.set_title(f"{scn.name} ({run.policy}): {label}", fontsize=11, loc="left")
    ax.legend(ncol=min(8, len(series)), fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=PNG_DPI, metadata=PNG_META)
    plt.close(fig)
    return plotted


def plot_hosts(path: Path, scn: Scenario, runs: Sequence[PolicyRun]) -> Plotted:
    """Network and CPU utilisation of every host over time, migrations shaded (Sova Fig. 5/8)."""
    plotted: Plotted = {}
    plt = writer.pyplot()
    fig, axes = plt.subplots(
        len(runs), 1, figsize=(11, 2.6 * len(runs)), squeeze=False, sharex=True, dpi=PNG_DPI
    )
    for ax, run in zip(axes[:, 0], runs, strict=True):
        st = run.stats
        t = [x / 60.0 for x in st.series_t]
        hosts = [h.name for h in scn.hosts]
        # Averaged over one control period: what the manager sees, and readable.
        k = max(1, int(round(scn.controller.period / scn.tick)))
        ticks = st.host_net.ticks
        assert ticks is not None, "a line per host is drawn only where every tick is kept"
        peak = 0.0
        for j, h in enumerate(hosts):
            series = ticks[:, j]
            # edge-padded, so the average does not dip to zero at the run's ends
            smooth = (
                np.convolve(
                    np.pad(series, (k // 2, k - 1 - k // 2), mode="edge"),
                    np.ones(k) / k,
                    mode="valid",
                )
                if series.size >= k
                else series
            )
            colour = writer.HOST_COLOURS[j % len(writer.HOST_COLOURS)]
            ax.plot(t, smooth, lw=1.4, label=f"{h} net", color=colour)
            plotted[f"{run.policy}: {h}"] = int(np.isfinite(smooth).sum())
            if smooth.size and np.isfinite(smooth).any():
                peak = max(peak, float(np.nanmax(smooth)))
        alpha = scn.controller.manager.alpha
        ax.axhline(alpha, color="red", lw=0.8, ls=":", label=f"α = {alpha:g}")
        eng = run.engine
        if eng is not None:
            for m in eng.migration_log:
                ax.axvspan(
                    float(m["start_s"]) / 60.0, float(m["end_s"]) / 60.0, color="grey", alpha=0.25
                )
                ax.annotate(
                    f"{m['vm']} {m['src']}→{m['dst']}",
                    (float(m["start_s"]) / 60.0, 1.01),
                    xycoords=("data", "axes fraction"),
                    fontsize=7,
                    annotation_clip=False,
                )
        # A fleet at 2 % of its links drawn on a 0-1.1 scale is flat lines at the bottom:
        # the scale follows the busiest host unless the hosts come near alpha.
        top = 1.1 if 1.25 * peak >= 0.8 * alpha else max(0.05, 1.25 * peak)
        ax.set_ylim(0, top)
        ax.set_ylabel("link utilisation")
        above = f" — α = {alpha:g} is above this scale" if top < alpha else ""
        ax.set_title(f"policy: {run.policy}{above}", fontsize=10, loc="left")
        # beside the axes, not over the lines (a legend inside covered the hosts' traffic)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("time (min)")
    fig.tight_layout()
    fig.savefig(path, dpi=PNG_DPI, metadata=PNG_META)
    plt.close(fig)
    return plotted


def plot_vf_holding(
    path: Path, scn: Scenario, runs: Sequence[PolicyRun], facts: Sequence[Moves] | None = None
) -> Plotted | None:
    """Each VM's share of the run on a VF against its mean offered load, per policy: a VF
    policy that pays puts its VF time on the right (the VMs that send), past the virtio
    ceiling where a VF buys throughput. ``facts``: each run's
    :func:`sova.sim.decisions.run_moves`, if read."""
    from sova.sim import decisions as dq

    vms = [v.name for v in scn.vms]
    points = []
    for k, run in enumerate(runs):
        m = facts[k] if facts is not None else run_moves(run.timeline, run.events, vms, scn.profile)
        if not m.samples:
            continue
        on_vf = np.zeros(len(vms))
        texts = run.timeline.texts("vm")
        nic = run.timeline.texts("nic")
        where = {v: i for i, v in enumerate(vms)}
        vm_of = np.array([where.get(str(t), -1) for t in texts] + [-1], dtype=np.int64)
        is_vf = np.array([t == "vf" for t in nic] + [False])
        for c in run.timeline.chunks(("vm", "nic")):
            i = vm_of[c.columns["vm"]]
            ok = (i >= 0) & is_vf[c.columns["nic"]]
            on_vf += np.bincount(i[ok], minlength=len(vms))
        share = on_vf / m.samples
        if share.any():
            points.append((run.policy, m.mean_offered_bps / 1e6, share))
    if not points:
        return None
    plt = writer.pyplot()
    fig, ax = plt.subplots(figsize=(10, 4), dpi=PNG_DPI)
    plotted: Plotted = {}
    markers = "o^sDv<>"
    for k, (policy, demand, share) in enumerate(points):
        x = np.maximum(demand, 1e-3)
        ax.scatter(x, share, s=14, alpha=0.7, marker=markers[k % len(markers)], label=policy, lw=0)
        plotted[f"{policy}: VMs (mean demand, time on VF)"] = int(x.size)
    ceiling = dq.virtio_ceiling_bps(scn.profile) / 1e6
    ax.axvline(ceiling, color="red", lw=0.8, ls=":", label=f"virtio ceiling {ceiling:,.0f}")
    ax.set_xscale("log")
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("VM's mean offered load (Mbit/s, log)")
    ax.set_ylabel("share of the run on a VF")
    ax.set_title(
        f"{scn.name}: who held the VFs — VF time against each VM's demand",
        fontsize=10,
        loc="left",
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=PNG_DPI, metadata=PNG_META)
    plt.close(fig)
    return plotted
