"""A sweep's report.md and plots: every figure across the sweep's points, a line (or
bars) per policy. Apart from :mod:`sova.sim.report` (one run's report), which it borrows
its cells, the paper's values and the host CPU from.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sova import writer
from sova.scenario import Scenario
from sova.sim.report import EQUAL, fmt_num, host_cpu, metric_value, paper_values_table
from sova.sim.world import PolicyRun
from sova.writer import PNG_DPI, PNG_META, Plotted


def categorical(values: Sequence[Any]) -> bool:
    """Sweep values that are not an ordered numeric axis (two cases, labels, dicts):
    plotted as grouped bars, since a line between them would suggest values in between."""
    nums = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if len(nums) != len(values) or len(values) < 3:
        return True
    return any(b <= a for a, b in zip(nums, nums[1:], strict=False))


def _label(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items())
    return str(v)


def plot_sweep(
    path: Path,
    scn: Scenario,
    summary: dict[str, Any],
    metric: str,
    label: str,
    values: dict[str, list[float | None]] | None = None,
) -> Plotted:
    """One metric over the sweep, a line per policy (bars when the sweep is categorical);
    ``values`` (policy -> one value per point) when the figure is not in the summary."""
    sw = summary["sweep"]
    xs = [p["value"] for p in sw["points"]]
    policies = list(sw["points"][0]["policies"])
    if values is None:
        values = {
            name: [metric_value(p["policies"][name], metric) for p in sw["points"]]
            for name in policies
        }
    plotted: Plotted = {}
    plt = writer.pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=PNG_DPI)
    bars = categorical(xs)
    width = 0.8 / max(1, len(values) + len(scn.paper.series))
    for k, (name, ys) in enumerate(values.items()):
        y = [float(v) if v is not None else float("nan") for v in ys]
        plotted[f"{name} (ours)"] = sum(1 for v in y if np.isfinite(v))
        if bars:
            ax.bar([i + k * width for i in range(len(xs))], y, width, label=f"{name} (ours)")
        else:
            ax.plot(xs, y, marker="o", label=f"{name} (ours)")
    for k, (name, curve) in enumerate(scn.paper.series.items(), start=len(values)):
        pts = sorted((float(x), v) for x, v in curve.items())
        plotted[f"{name} (paper)"] = len(pts)
        if bars:
            at = {float(x): i for i, x in enumerate(xs) if isinstance(x, int | float)}
            idx = [at[p[0]] for p in pts if p[0] in at]
            py = [float(p[1]) for p in pts if p[0] in at]
            ax.bar([i + k * width for i in idx], py, width, label=f"{name} (paper)", hatch="//")
        else:
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                ls="--",
                marker="x",
                label=f"{name} (paper)",
            )
    if bars:
        ax.set_xticks(
            [i + width * (len(plotted) - 1) / 2 for i in range(len(xs))], [_label(x) for x in xs]
        )
    ax.set_xlabel(sw["label"])
    ax.set_ylabel(label or metric)
    ax.set_title(f"{scn.name}: {label or metric}", fontsize=11, loc="left")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=PNG_DPI, metadata=PNG_META)
    plt.close(fig)
    return plotted


def write_sweep_report(
    out: Path, points: Sequence[tuple[Scenario, Sequence[PolicyRun]]], summary: dict[str, Any]
) -> None:
    scn = points[0][0]
    sw = summary["sweep"]
    metrics = [
        m
        for m in (
            scn.paper.sweep_metric,
            "mean_response_ms",
            "throughput_mbps",
            "link_utilization",
            "mean_transfer_s",
        )
        if m
    ]
    metrics = list(dict.fromkeys(metrics))
    lines = [
        f"# Sova simulation report: {scn.name}",
        "",
        scn.description.strip(),
        "",
        f"Sweep over {sw['label']}: {', '.join(str(p['value']) for p in sw['points'])}. "
        f"Seed {scn.seed}, {scn.duration:g} simulated seconds per point, profile `{scn.profile.name}`.",
        "",
    ]
    plots: dict[str, Plotted] = {}
    for m in metrics:
        ys = [metric_value(pol, m) for p in sw["points"] for pol in p["policies"].values()]
        if all(y is None for y in ys):
            continue
        label = scn.paper.sweep_metric_label if m == scn.paper.sweep_metric else m
        plots[f"sweep_{m}.png"] = plot_sweep(out / f"sweep_{m}.png", scn, summary, m, label)
        policies = list(sw["points"][0]["policies"])
        lines += [f"## {label or m}", "", "| " + sw["label"] + " | " + " | ".join(policies) + " |"]
        lines.append("|---" * (len(policies) + 1) + "|")
        for p in sw["points"]:
            vals = [fmt_num(metric_value(p["policies"][n], m)) for n in policies]
            lines.append(f"| {p['value']} | " + " | ".join(vals) + " |")
        lines += ["", f"![{m}](sweep_{m}.png)", ""]
    equal = all(
        max(tp) - min(tp) <= EQUAL * max(max(tp), 1e-9)
        for tp in ([s["throughput_mbps"] for s in p["policies"].values()] for p in sw["points"])
    )
    if equal and len(sw["points"][0]["policies"]) > 1:
        # Equal throughput: what the policies change is the CPU spent on it.
        cpu: dict[str, list[float | None]] = defaultdict(list)
        for _, runs in points:
            for r in runs:
                c = host_cpu(r)
                cpu[r.policy].append(None if c is None else round(c, 4))
        policies = list(cpu)
        lines += [
            "## Mean host CPU",
            "",
            "Throughput is the same under every policy at every point (within 1 %); the "
            "policies differ in the CPU they spend on it (and in latency, where measured).",
            "",
            "| " + sw["label"] + " | " + " | ".join(policies) + " |",
            "|---" * (len(policies) + 1) + "|",
        ]
        for i, p in enumerate(sw["points"]):
            lines.append(
                f"| {_label(p['value'])} | "
                + " | ".join(fmt_num(cpu[n][i]) for n in policies)
                + " |"
            )
        plots["sweep_host_cpu.png"] = plot_sweep(
            out / "sweep_host_cpu.png", scn, summary, "host_cpu", "mean host CPU", dict(cpu)
        )
        lines += ["", "![mean host CPU](sweep_host_cpu.png)", ""]
    table: list[str] = []
    for p in sw["points"]:
        table += paper_values_table(scn, p["policies"], p["value"])[2 if table else 0 :]
    if table:
        lines += ["## The paper beside ours", ""] + table + [""]
    if scn.paper.note:
        lines += [scn.paper.note.strip(), ""]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    writer.write_plot_index(out, plots)
