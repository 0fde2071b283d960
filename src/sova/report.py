"""report.md and its plots: what an operator looks at after a run.

Plots are rendered with matplotlib's Agg backend and without the PNG "Software" and date
metadata, so the same seed gives byte-identical images.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from sova.scenario import Scenario  # noqa: E402
from sova.sim.runner import PolicyRun  # noqa: E402

PNG_META = {"Software": None}


def _vf_intervals(run: PolicyRun, period: float) -> dict[str, list[tuple[float, float]]]:
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in run.timeline:
        if r.nic == "vf":
            spans[r.vm].append((r.time_s - period, period))
    return spans


def plot_vf_holders(path: Path, scn: Scenario, runs: Sequence[PolicyRun]) -> None:
    vms = [v.name for v in scn.vms]
    fig, axes = plt.subplots(
        len(runs), 1, figsize=(10, 1.0 + 0.32 * len(vms) * len(runs)), squeeze=False, sharex=True
    )
    minutes = 60.0
    for ax, run in zip(axes[:, 0], runs, strict=True):
        spans = _vf_intervals(run, scn.controller.period)
        for i, vm in enumerate(vms):
            bars = [(s / minutes, w / minutes) for s, w in spans.get(vm, [])]
            if bars:
                ax.broken_barh(bars, (i - 0.35, 0.7), color="tab:blue")
        for ph in scn.paper.vf_holders:
            for vm in ph.vms:
                if vm in vms:
                    i = vms.index(vm)
                    ax.plot(
                        [ph.start / minutes, ph.end / minutes], [i, i], color="tab:orange", lw=2
                    )
        for p in scn.workload:
            if p.at > 0:
                ax.axvline(p.at / minutes, color="grey", lw=0.8, ls="--")
        ax.set_yticks(range(len(vms)), vms)
        ax.set_ylim(-0.6, len(vms) - 0.4)
        ax.invert_yaxis()
        ax.set_title(f"policy: {run.policy}", fontsize=10, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("time (min)")
    fig.suptitle(
        f"{scn.name}: VF holders (blue) vs the paper's (orange, where published)", fontsize=11
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90, metadata=PNG_META)
    plt.close(fig)


def plot_metric(path: Path, scn: Scenario, run: PolicyRun, metric: str, label: str) -> None:
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in run.timeline:
        series[r.vm].append((r.time_s / 60.0, float(getattr(r, metric))))
    fig, ax = plt.subplots(figsize=(10, 4))
    for vm in [v.name for v in scn.vms]:
        pts = series.get(vm, [])
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=vm, lw=1.2)
    for p in scn.workload:
        if p.at > 0:
            ax.axvline(p.at / 60.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("time (min)")
    ax.set_ylabel(label)
    ax.set_title(f"{scn.name} ({run.policy}): {label}", fontsize=11, loc="left")
    ax.legend(ncol=min(8, len(series)), fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90, metadata=PNG_META)
    plt.close(fig)


def _mark(ok: bool) -> str:
    return "yes" if ok else "**NO**"


def write_report(
    out: Path, scn: Scenario, runs: Sequence[PolicyRun], summary: dict[str, Any]
) -> None:
    plot_vf_holders(out / "vf_holders.png", scn, runs)
    main = next((r for r in runs if r.policy in ("sova", "dsr-iov")), runs[-1])
    plot_metric(out / "net_degree.png", scn, main, "net_degree", "net_degree (ranking score)")
    plot_metric(out / "io_degree.png", scn, main, "io_degree", "io_degree (I/O filter)")

    pol = summary["policies"]
    lines = [
        f"# Sova simulation report: {scn.name}",
        "",
        scn.description.strip(),
        "",
        f"Seed {scn.seed}, {scn.duration / 60:g} simulated minutes at {scn.tick:g} s ticks, "
        f"controller period {scn.controller.period:g} s, hardware profile `{scn.profile.name}`.",
        "",
        "Files: `timeline.csv` (one row per period and VM), `events.csv` (VF attach/detach, "
        "tier changes, failures), `summary.json` (the figures below).",
        "",
        "## Policies side by side",
        "",
        "| policy | throughput (Mbit/s) | link utilisation | VF changes | failed actions |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, s in pol.items():
        lines.append(
            f"| {name} | {s['throughput_mbps']:.1f} | {s['link_utilization']:.3f} | "
            f"{s['vf_changes']} | {s['failed_actions']} |"
        )
    if scn.paper.vf_holders:
        lines += [
            "",
            f"## VF holders: {scn.paper.source or 'paper'} beside ours",
            "",
            "Ours = every distinct set of VF holders seen at the controller periods inside the "
            "range (one set means the holders were stable).",
            "",
        ]
        for name, s in pol.items():
            if name == "default":
                continue
            lines += [
                f"### {name}",
                "",
                "| time range | paper | ours | match |",
                "|---|---|---|---|",
            ]
            for m in s["paper_vf_holders"]:
                ours = "; ".join(", ".join(h) or "(none)" for h in m["observed"])
                lines.append(
                    f"| {m['label']} | {', '.join(m['paper'])} | {ours} | {_mark(m['match'])} |"
                )
            lines.append("")
    for name, s in pol.items():
        cls = s.get("classification")
        if not cls or scn.paper.classification is None:
            continue
        c = scn.paper.classification
        lines += [
            "",
            f"## Classification ({scn.paper.source or 'paper'}), policy {name}",
            "",
            "Means over the run after the first full window.",
            "",
            "| group | VM | io_degree | IF | net_degree | NF |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for group in ("cpu", "network", "hybrid"):
            for vm in getattr(c, group):
                m = cls["steady_means"][vm]
                lines.append(
                    f"| {group} | {vm} | {m['io_degree']:.2f} | {m['io_factor']:.2f} | "
                    f"{m['net_degree']:.0f} | {m['net_factor']:.3f} |"
                )
        lines += ["", "| ordering | holds |", "|---|---|"]
        lines += [f"| {k['check']} | {_mark(k['holds'])} |" for k in cls["checks"]]
        lines.append("")
    if scn.paper.note:
        lines += ["", scn.paper.note.strip(), ""]
    lines += [
        "",
        "## Plots",
        "",
        "![VF holders](vf_holders.png)",
        "",
        f"![net_degree]({'net_degree.png'})",
        "",
        f"![io_degree]({'io_degree.png'})",
        "",
        "## Per VM",
        "",
        "| policy | VM | throughput (Mbit/s) | time on VF | mean CPU |",
        "|---|---|---:|---:|---:|",
    ]
    for name, s in pol.items():
        for vm, v in s["per_vm"].items():
            lines.append(
                f"| {name} | {vm} | {v['throughput_mbps']:.1f} | {v['vf_share']:.0%} | "
                f"{v['mean_cpu_usage']:.2f} |"
            )
    (out / "report.md").write_text("\n".join(lines) + "\n")
