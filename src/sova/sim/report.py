"""A simulated run's report.md and its plots: what an operator looks at after a run.

Formatting, the VF-holders plot and the atomic write are :mod:`sova.writer`'s, shared
with the testbed's report.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display on servers, byte-stable PNGs
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from sova import writer  # noqa: E402
from sova.scenario import Scenario  # noqa: E402
from sova.sim.world import PolicyRun  # noqa: E402
from sova.writer import PNG_META, HolderPanel, mark  # noqa: E402


def plot_vf_holders(path: Path, scn: Scenario, runs: Sequence[PolicyRun]) -> None:
    period = scn.controller.period
    panels = []
    for run in runs:
        spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for r in run.timeline:
            if r.nic == "vf":
                spans[r.vm].append((r.time_s - period, period))
        marks = [p.at for p in scn.workload if p.at > 0]
        panels.append(HolderPanel(f"policy: {run.policy}", spans, marks))
    writer.plot_vf_holders(
        path,
        [v.name for v in scn.vms],
        panels,
        expected=[(ph.vms, ph.start, ph.end) for ph in scn.paper.vf_holders],
        title=f"{scn.name}: VF holders (blue) vs the paper's (orange, where published)",
        minutes=True,
    )


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


def plot_hosts(path: Path, scn: Scenario, runs: Sequence[PolicyRun]) -> None:
    """Network and CPU utilisation of every host over time, migrations shaded (Sova Fig. 5/8)."""
    fig, axes = plt.subplots(
        len(runs), 1, figsize=(10, 2.6 * len(runs)), squeeze=False, sharex=True
    )
    for ax, run in zip(axes[:, 0], runs, strict=True):
        st = run.stats
        t = [x / 60.0 for x in st.series_t]
        hosts = [h.name for h in scn.hosts]
        # Averaged over one control period: what the manager sees, and readable.
        k = max(1, int(round(scn.controller.period / scn.tick)))
        for j, h in enumerate(hosts):
            series = np.array([row[j] for row in st.series_host_net])
            smooth = (
                np.convolve(series, np.ones(k) / k, mode="same") if series.size >= k else series
            )
            ax.plot(t, smooth, lw=1.4, label=f"{h} net")
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
                    (float(m["start_s"]) / 60.0, 1.02),
                    fontsize=7,
                    annotation_clip=False,
                )
        ax.set_ylim(0, 1.1)
        ax.set_ylabel("link utilisation")
        ax.set_title(f"policy: {run.policy}", fontsize=10, loc="left")
        ax.legend(fontsize=7, ncol=len(hosts) + 1, loc="lower right")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("time (min)")
    fig.tight_layout()
    fig.savefig(path, dpi=90, metadata=PNG_META)
    plt.close(fig)


def write_report(
    out: Path, scn: Scenario, runs: Sequence[PolicyRun], summary: dict[str, Any]
) -> None:
    plot_vf_holders(out / "vf_holders.png", scn, runs)
    main = next((r for r in runs if r.policy in ("sova", "dsr-iov")), runs[-1])
    plot_metric(out / "net_degree.png", scn, main, "net_degree", "net_degree (ranking score)")
    plot_metric(out / "io_degree.png", scn, main, "io_degree", "io_degree (I/O filter)")
    plot_metric(out / "throughput.png", scn, main, "tx_mbps", "tx (Mbit/s)")
    multi = len(scn.hosts) > 1
    if multi:
        plot_hosts(out / "hosts.png", scn, runs)

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
        "| policy | throughput (Mbit/s) | link utilisation | mean response (ms) | p99 (ms) "
        "| guarantee met | migrations | VF changes | failed actions |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in pol.items():
        lines.append(
            f"| {name} | {s['throughput_mbps']:.1f} | {s['link_utilization']:.3f} | "
            f"{_fmt_num(s['mean_response_ms'])} | {_fmt_num(s['p99_response_ms'])} | "
            f"{_fmt_num(s['guarantee_met_fraction'])} | {s['migrations']} | "
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
                    f"| {m['label']} | {', '.join(m['paper'])} | {ours} | {mark(m['match'])} |"
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
        lines += [f"| {k['check']} | {mark(k['holds'])} |" for k in cls["checks"]]
        lines.append("")
    table = paper_values_table(scn, pol)
    if table:
        lines += ["", f"## {scn.paper.source or 'The paper'} beside ours", ""] + table + [""]
    if scn.paper.note:
        lines += ["", scn.paper.note.strip(), ""]
    lines += [
        "",
        "## Plots",
        "",
        "![VF holders](vf_holders.png)",
        "",
        *(["![hosts](hosts.png)", ""] if multi else []),
        "![throughput](throughput.png)",
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


# --------------------------------------------------------------------------- paper values


def metric_value(policy_summary: dict[str, Any], metric: str) -> Any:
    node: Any = policy_summary
    for part in metric.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _fmt_num(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.1f}"
    return str(v)


def paper_values_table(scn: Scenario, policies: dict[str, Any], at: Any = None) -> list[str]:
    rows = [v for v in scn.paper.values if at is None or v.at is None or str(v.at) == str(at)]
    if not rows:
        return []
    lines = [
        "| what | policy | paper | ours | claim |",
        "|---|---|---:|---:|---|",
    ]
    for v in rows:
        ours = metric_value(policies.get(v.policy, {}), v.metric)
        lines.append(
            f"| {v.label} | {v.policy} | {_fmt_num(v.value)} | {_fmt_num(ours)} | {v.claim} |"
        )
    return lines


# --------------------------------------------------------------------------- sweeps


def plot_sweep(path: Path, scn: Scenario, summary: dict[str, Any], metric: str, label: str) -> None:
    sw = summary["sweep"]
    xs = [p["value"] for p in sw["points"]]
    policies = list(sw["points"][0]["policies"])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name in policies:
        ys = [metric_value(p["policies"][name], metric) for p in sw["points"]]
        ax.plot(
            xs,
            [y if y is not None else float("nan") for y in ys],
            marker="o",
            label=f"{name} (ours)",
        )
    for name, curve in scn.paper.series.items():
        pts = sorted((float(k), v) for k, v in curve.items())
        ax.plot(
            [p[0] for p in pts], [p[1] for p in pts], ls="--", marker="x", label=f"{name} (paper)"
        )
    ax.set_xlabel(sw["label"])
    ax.set_ylabel(label or metric)
    ax.set_title(f"{scn.name}: {label or metric}", fontsize=11, loc="left")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90, metadata=PNG_META)
    plt.close(fig)


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
    pics = []
    for m in metrics:
        ys = [metric_value(pol, m) for p in sw["points"] for pol in p["policies"].values()]
        if all(y is None for y in ys):
            continue
        label = scn.paper.sweep_metric_label if m == scn.paper.sweep_metric else m
        plot_sweep(out / f"sweep_{m}.png", scn, summary, m, label)
        pics.append((m, label))
        policies = list(sw["points"][0]["policies"])
        lines += [f"## {label or m}", "", "| " + sw["label"] + " | " + " | ".join(policies) + " |"]
        lines.append("|---" * (len(policies) + 1) + "|")
        for p in sw["points"]:
            vals = [_fmt_num(metric_value(p["policies"][n], m)) for n in policies]
            lines.append(f"| {p['value']} | " + " | ".join(vals) + " |")
        lines += ["", f"![{m}](sweep_{m}.png)", ""]
    table: list[str] = []
    for p in sw["points"]:
        table += paper_values_table(scn, p["policies"], p["value"])[2 if table else 0 :]
    if table:
        lines += ["## The paper beside ours", ""] + table + [""]
    if scn.paper.note:
        lines += [scn.paper.note.strip(), ""]
    (out / "report.md").write_text("\n".join(lines) + "\n")
