"""Testbed outputs: the standard files plus what only real packets can show.

The standard files (``timeline.csv``, ``events.csv``, ``summary.json``, ``report.md``
and plots) keep the columns and keys every world writes, so tools that read a simulator
run read a testbed run. On top of them:

* ``testbed.csv``: one row per second and VM with what the *sink* received (the
  acceptance figures), the cap in force and the scenario's offered load;
* ``switches.csv``: every VF attach/detach with the longest ping silence and TCP stall
  around it;
* ``summary.json`` gains, per run, the guarantee-held fraction, the ratio to the
  unconstrained run, CPU figures and the VF holders over time, and an ``acceptance``
  block that says which of the scenario's checks held.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display on servers, byte-stable PNGs
import matplotlib.pyplot as plt

from sova import writer
from sova.record import EVENT_COLUMNS, TIMELINE_COLUMNS
from sova.testbed.runner import SwitchCheck, TestbedRow, TestbedRun
from sova.testbed.scenario import TestbedScenario
from sova.writer import PNG_META, HolderPanel, cells, fmt, mark

TESTBED_COLUMNS = [
    "policy",
    "time_s",
    "vm",
    "nic",
    "delivered_mbps",
    "tx_mbps",
    "offered_mbps",
    "guarantee_mbps",
    "limit_mbps",
    "vf_rate_mbps",
    "cpu_usage",
]
SWITCH_COLUMNS = ["policy", "time_s", "vm", "event", "ping_gap_s", "tcp_gap_s"]


# --------------------------------------------------------------------------- metrics


def run_metrics(scn: TestbedScenario, tr: TestbedRun) -> dict[str, Any]:
    """The figures of one run, from the per-second kernel counters."""
    tol = scn.acceptance.guarantee_tolerance
    capacity_mbps = scn.link.capacity / 1e6
    by_t: dict[float, list[TestbedRow]] = defaultdict(list)
    by_vm: dict[str, list[TestbedRow]] = defaultdict(list)
    for r in tr.rows:
        by_t[r.time_s].append(r)
        by_vm[r.vm].append(r)
    totals = [sum(r.delivered_mbps for r in rows) for _, rows in sorted(by_t.items())]
    mean_total = sum(totals) / len(totals) if totals else 0.0
    per_vm: dict[str, dict[str, Any]] = {}
    g_intervals = g_held = 0
    for vm, rows in sorted(by_vm.items()):
        n = len(rows)
        entry: dict[str, Any] = {
            "throughput_mbps": round(sum(r.delivered_mbps for r in rows) / n, 3),
            "vf_share": round(sum(1 for r in rows if r.nic == "vf") / n, 4),
            "mean_cpu_usage": round(sum(r.cpu_usage for r in rows) / n, 4),
        }
        guarded = [r for r in rows if r.guarantee_mbps > 0 and r.offered_mbps >= r.guarantee_mbps]
        if guarded:
            held = sum(1 for r in guarded if r.delivered_mbps >= r.guarantee_mbps * (1 - tol))
            entry["guarantee_mbps"] = rows[0].guarantee_mbps
            entry["guarantee_intervals"] = len(guarded)
            entry["guarantee_held_fraction"] = round(held / len(guarded), 4)
            entry["min_when_offered_mbps"] = round(min(r.delivered_mbps for r in guarded), 3)
            g_intervals += len(guarded)
            g_held += held
        per_vm[vm] = entry
    changes = [e for e in tr.run.events if e.event in ("vf_attach", "vf_detach")]
    failures = [e for e in tr.run.events if e.event.endswith(("_failed", "_timeout", "_blocked"))]
    holders = {t: sorted(r.vm for r in rows if r.nic == "vf") for t, rows in sorted(by_t.items())}
    pings = [s.ping_gap_s for s in tr.switches if s.ping_gap_s is not None]
    tcps = [s.tcp_gap_s for s in tr.switches if s.tcp_gap_s is not None]
    return {
        "throughput_mbps": round(mean_total, 3),
        "link_utilization": round(mean_total / capacity_mbps, 4) if capacity_mbps else 0.0,
        "guarantee_held_fraction": round(g_held / g_intervals, 4) if g_intervals else None,
        "guarantee_intervals": g_intervals,
        "vf_changes": len(changes),
        "failed_actions": len(failures),
        "migrations": 0,
        "periods": len(by_t),
        "per_vm": per_vm,
        "host_cpu_busy": round(tr.host_cpu, 4),
        "virtio_backend_cpu_s": round(tr.relay_cpu_s, 3),
        "switches": len(tr.switches),
        "max_ping_gap_s": round(max(pings), 3) if pings else None,
        "max_tcp_gap_s": round(max(tcps), 3) if tcps else None,
        "vf_holders": {fmt(t): h for t, h in holders.items()},
        "policy": tr.spec.policy,
        "variant": tr.spec.variant,
        "vf_policy": tr.spec.vf_policy,
        "bandwidth_policy": tr.spec.bandwidth_policy,
    }


def acceptance(
    scn: TestbedScenario, runs: Sequence[TestbedRun], metrics: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The scenario's checks on the measured figures; each names its value and threshold."""
    acc = scn.acceptance
    checks: list[dict[str, Any]] = []
    variants = sorted({tr.spec.variant for tr in runs})
    for var in variants:
        label = {tr.spec.policy: tr.spec.label for tr in runs if tr.spec.variant == var}
        tag = f" [{var}]" if var else ""
        main, base = label.get(acc.policy), label.get(acc.baseline)
        if acc.guarantee_held is not None and main is not None:
            value = metrics[main]["guarantee_held_fraction"]
            checks.append(
                {
                    "check": f"{acc.policy} holds every guarantee{tag}",
                    "value": value,
                    "threshold": acc.guarantee_held,
                    "holds": value is not None and value >= acc.guarantee_held,
                }
            )
        if acc.utilisation_vs_baseline is not None and main is not None and base is not None:
            b = metrics[base]["throughput_mbps"]
            value = round(metrics[main]["throughput_mbps"] / b, 4) if b else None
            checks.append(
                {
                    "check": f"{acc.policy} throughput vs {acc.baseline}{tag}",
                    "value": value,
                    "threshold": acc.utilisation_vs_baseline,
                    "holds": value is not None and value >= acc.utilisation_vs_baseline,
                }
            )
    if acc.max_break is not None:
        for tr in runs:
            m = metrics[tr.spec.label]
            worst = max(
                (x for x in (m["max_ping_gap_s"], m["max_tcp_gap_s"]) if x is not None),
                default=None,
            )
            checks.append(
                {
                    "check": f"{tr.spec.label}: no break longer than {acc.max_break:g} s "
                    f"across {m['switches']} VF switch(es)",
                    "value": worst,
                    "threshold": acc.max_break,
                    "holds": worst is None or worst <= acc.max_break,
                }
            )
    for tr in runs:
        if not acc.vf_holders or tr.spec.vf_policy in ("default", "static-sriov"):
            continue
        holders = metrics[tr.spec.label]["vf_holders"]
        for ph in acc.vf_holders:
            seen = sorted({tuple(h) for t, h in holders.items() if ph.start < float(t) <= ph.end})
            checks.append(
                {
                    "check": f"{tr.spec.label}: VF holders {ph.label or f'{ph.start:g}-{ph.end:g} s'}",
                    "value": [list(s) for s in seen],
                    "threshold": sorted(ph.vms),
                    "holds": seen == [tuple(sorted(ph.vms))],
                }
            )
    return {"checks": checks, "all_hold": all(c["holds"] for c in checks)}


def build_summary(scn: TestbedScenario, runs: Sequence[TestbedRun]) -> dict[str, Any]:
    metrics = {tr.spec.label: run_metrics(scn, tr) for tr in runs}
    for tr in runs:
        base = next(
            (
                o
                for o in runs
                if o.spec.variant == tr.spec.variant and o.spec.policy == scn.acceptance.baseline
            ),
            None,
        )
        if base is not None and metrics[base.spec.label]["throughput_mbps"]:
            metrics[tr.spec.label]["vs_baseline"] = round(
                metrics[tr.spec.label]["throughput_mbps"]
                / metrics[base.spec.label]["throughput_mbps"],
                4,
            )
    c = scn.controller
    return {
        "scenario": scn.name,
        "world": "testbed",
        "duration_s": scn.duration,
        "testbed": {
            "capacity_mbps": scn.link.capacity / 1e6,
            "vf_pool": scn.link.vf_pool,
            "min_rate_supported": scn.link.min_rate_supported,
            "vf_period_s": c.period,
            "bandwidth_period_s": c.bandwidth_period,
            "daqs_period_s": c.daqs_period,
            "daqs_scale": scn.link.capacity / c.daqs_reference_link,
            "probe": c.probe,
            "probe_floor": c.probe_floor,
        },
        "policies": metrics,
        "acceptance": acceptance(scn, runs, metrics),
    }


# --------------------------------------------------------------------------- plots


def plot_throughput(path: Path, scn: TestbedScenario, runs: Sequence[TestbedRun]) -> None:
    """Delivered rate per VM per second, one panel per run, guarantees dashed."""
    vms = [v.name for v in scn.vms]
    colors = {vm: f"C{i % 10}" for i, vm in enumerate(vms)}
    n = len(runs)
    cols = min(4, n)
    rows_n = math.ceil(n / cols)
    fig, axes = plt.subplots(
        rows_n, cols, figsize=(4.2 * cols, 2.8 * rows_n), squeeze=False, sharey=True
    )
    top = scn.link.capacity / 1e6 * 1.08
    for k, tr in enumerate(runs):
        ax = axes[k // cols][k % cols]
        series: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for r in tr.rows:
            series[r.vm].append((r.time_s, r.delivered_mbps))
        totals: dict[float, float] = defaultdict(float)
        for r in tr.rows:
            totals[r.time_s] += r.delivered_mbps
        ts = sorted(totals)
        ax.plot(ts, [totals[t] for t in ts], color="black", lw=1.0, label="total")
        for vm in vms:
            pts = series.get(vm, [])
            if pts:
                ax.plot(
                    [p[0] for p in pts], [p[1] for p in pts], color=colors[vm], lw=1.2, label=vm
                )
            g = scn.sla_of(vm, tr.spec.variant).min / 1e6
            if g > 0:
                ax.axhline(g, color=colors[vm], ls="--", lw=0.8)
        ax.set_ylim(0, top)
        ax.set_title(tr.spec.label, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
        if k % cols == 0:
            ax.set_ylabel("delivered (Mbit/s)")
        if k // cols == rows_n - 1:
            ax.set_xlabel("time (s)")
    for k in range(n, rows_n * cols):
        axes[k // cols][k % cols].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(8, len(labels)), fontsize=8)
    fig.suptitle(f"{scn.name}: delivered per VM at the sink (guarantees dashed)", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    fig.savefig(path, dpi=90, metadata=PNG_META)
    plt.close(fig)


def plot_bars(path: Path, scn: TestbedScenario, metrics: dict[str, dict[str, Any]]) -> None:
    """Mean delivered per VM and in total, runs side by side."""
    labels = list(metrics)
    vms = [v.name for v in scn.vms]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(labels) + 2), 3.6))
    width = 0.8 / (len(vms) + 1)
    for i, vm in enumerate(vms):
        vals = [metrics[lb]["per_vm"].get(vm, {}).get("throughput_mbps", 0.0) for lb in labels]
        ax.bar([k + i * width for k in range(len(labels))], vals, width, label=vm)
    ax.bar(
        [k + len(vms) * width for k in range(len(labels))],
        [metrics[lb]["throughput_mbps"] for lb in labels],
        width,
        color="grey",
        label="total",
    )
    ax.set_xticks(
        [k + 0.4 - width / 2 for k in range(len(labels))], labels, rotation=20, fontsize=8
    )
    ax.set_ylabel("mean delivered (Mbit/s)")
    ax.legend(fontsize=8, ncol=min(6, len(vms) + 1))
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(f"{scn.name}: policies side by side", fontsize=10, loc="left")
    fig.tight_layout()
    fig.savefig(path, dpi=90, metadata=PNG_META)
    plt.close(fig)


def plot_vf_holders(path: Path, scn: TestbedScenario, runs: Sequence[TestbedRun]) -> None:
    panels = []
    for tr in runs:
        spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for r in tr.rows:
            if r.nic == "vf":
                spans[r.vm].append((r.time_s - 1.0, 1.0))
        panels.append(HolderPanel(tr.spec.label, spans, [s.time_s for s in tr.switches]))
    writer.plot_vf_holders(
        path,
        [v.name for v in scn.vms],
        panels,
        expected=[(ph.vms, ph.start, ph.end) for ph in scn.acceptance.vf_holders],
        title=f"{scn.name}: VF holders (blue), expected (orange)",
    )


# --------------------------------------------------------------------------- report


def _num(v: Any, fmt: str = "{:.1f}") -> str:
    return "–" if v is None else fmt.format(v)


def write_report(
    out: Path, scn: TestbedScenario, runs: Sequence[TestbedRun], summary: dict[str, Any]
) -> None:
    metrics: dict[str, dict[str, Any]] = summary["policies"]
    plot_throughput(out / "throughput.png", scn, runs)
    plot_bars(out / "policies.png", scn, metrics)
    has_vf_moves = any(tr.switches for tr in runs) or scn.acceptance.vf_holders
    if has_vf_moves:
        plot_vf_holders(out / "vf_holders.png", scn, runs)
    lines = _summary_lines(scn, summary["testbed"], metrics)
    lines += _per_vm_lines(scn, metrics)
    lines += _acceptance_lines(summary["acceptance"])
    lines += _switch_lines(scn, [s for tr in runs for s in tr.switches])
    if scn.note:
        lines += ["", scn.note.strip()]
    lines += ["", "## Plots", "", "![delivered per VM](throughput.png)", ""]
    lines += ["![policies side by side](policies.png)", ""]
    if has_vf_moves:
        lines += ["![VF holders](vf_holders.png)", ""]
    (out / "report.md").write_text("\n".join(lines) + "\n")


def _summary_lines(
    scn: TestbedScenario, tb: dict[str, Any], metrics: dict[str, dict[str, Any]]
) -> list[str]:
    """The title, the setup, and the runs side by side."""
    lines = [
        f"# Sova testbed report: {scn.name}",
        "",
        scn.description.strip(),
        "",
        "Real TCP traffic in Linux network namespaces; every rate limit is a kernel qdisc "
        "and every figure below comes from kernel counters read each second (delivered = "
        "what the sink received from each VM, counted per wire frame as the port's HTB "
        "counts it). See docs/testbed.md for the topology.",
        "",
        f"Port {tb['capacity_mbps']:g} Mbit/s, {tb['vf_pool']} VF(s), min_tx_rate "
        f"{'supported' if tb['min_rate_supported'] else 'not supported'}; {scn.duration:g} s "
        f"per run after {scn.warmup:g} s warm-up; VF period {tb['vf_period_s']:g} s; "
        f"bandwidth period {tb['bandwidth_period_s']:g} s (DAQS {tb['daqs_period_s']:g} s, "
        f"its Gbit/s thresholds scaled x{tb['daqs_scale']:.4g}); probe {tb['probe']:g}.",
        "",
        "## Runs side by side",
        "",
        "| run | delivered (Mbit/s) | vs "
        + (scn.acceptance.baseline if scn.acceptance.baseline in scn.compare.policies else "–")
        + " | guarantee held | "
        "VF changes | failed actions | host CPU | virtio backend CPU (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, m in metrics.items():
        lines.append(
            f"| {label} | {m['throughput_mbps']:.1f} | {_num(m.get('vs_baseline'), '{:.3f}')} | "
            f"{_num(m['guarantee_held_fraction'], '{:.1%}')} | {m['vf_changes']} | "
            f"{m['failed_actions']} | {m['host_cpu_busy']:.0%} | "
            f"{m['virtio_backend_cpu_s']:.1f} |"
        )
    return lines


def _per_vm_lines(scn: TestbedScenario, metrics: dict[str, dict[str, Any]]) -> list[str]:
    """What "guarantee held" means, and each run's VMs."""
    lines = [
        "",
        "Guarantee held = share of the 1-second intervals, among those in which the "
        "guaranteed VM offered at least its guarantee, in which it received at least "
        f"{1 - scn.acceptance.guarantee_tolerance:.0%} of it.",
        "",
        "## Per VM",
        "",
        "| run | VM | delivered (Mbit/s) | guarantee (Mbit/s) | held | worst second | on VF |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for label, m in metrics.items():
        for vm, v in m["per_vm"].items():
            lines.append(
                f"| {label} | {vm} | {v['throughput_mbps']:.1f} | "
                f"{_num(v.get('guarantee_mbps'), '{:.0f}')} | "
                f"{_num(v.get('guarantee_held_fraction'), '{:.1%}')} | "
                f"{_num(v.get('min_when_offered_mbps'))} | {v['vf_share']:.0%} |"
            )
    return lines


def _acceptance_lines(acc: dict[str, Any]) -> list[str]:
    """The acceptance checks with their measured values (none: no section)."""
    lines: list[str] = []
    if acc["checks"]:
        lines += ["", "## Acceptance", "", "| check | measured | threshold | holds |"]
        lines.append("|---|---|---|---|")
        for c in acc["checks"]:
            lines.append(
                f"| {c['check']} | {_fmt_value(c['value'])} | {_fmt_value(c['threshold'])} | "
                f"{mark(c['holds'])} |"
            )
    return lines


def _switch_lines(scn: TestbedScenario, switches: list[SwitchCheck]) -> list[str]:
    """The connectivity gaps around each VF switch (none: no section)."""
    lines: list[str] = []
    if switches:
        lines += [
            "",
            "## Connectivity across VF switches",
            "",
            "Longest silence within 2 s of each switch: between ping replies (ICMP every "
            f"{_num(scn.probes.ping_interval, '{:g}')} s) and in the sink's per-VM byte "
            f"counter (read every {_num(scn.probes.gap_resolution, '{:g}')} s) while the "
            "VM had a TCP flow.",
            "",
            "| run | t (s) | VM | event | ping gap (s) | TCP gap (s) |",
            "|---|---:|---|---|---:|---:|",
        ]
        for s in switches:
            lines.append(
                f"| {s.policy} | {s.time_s:.1f} | {s.vm} | {s.event} | "
                f"{_num(s.ping_gap_s, '{:.3f}')} | {_num(s.tcp_gap_s, '{:.3f}')} |"
            )
    return lines


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, list):
        return "; ".join(", ".join(x) if isinstance(x, list) else str(x) for x in v) or "–"
    return "–" if v is None else str(v)


def _cells(records: Iterable[Any], columns: Sequence[str]) -> Iterable[list[Any]]:
    return (cells(r, columns) for r in records)


def write_outputs(out: Path, scn: TestbedScenario, runs: Sequence[TestbedRun]) -> dict[str, Any]:
    """Every file of a testbed run into ``out``, atomically (a failed write leaves it)."""
    summary = build_summary(scn, runs)
    tables: dict[str, writer.Table] = {
        "timeline.csv": (
            TIMELINE_COLUMNS,
            _cells([r for tr in runs for r in tr.run.timeline], TIMELINE_COLUMNS),
        ),
        "events.csv": (
            EVENT_COLUMNS,
            _cells([e for tr in runs for e in tr.run.events], EVENT_COLUMNS),
        ),
        "testbed.csv": (
            TESTBED_COLUMNS,
            _cells([r for tr in runs for r in tr.rows], TESTBED_COLUMNS),
        ),
        "switches.csv": (
            SWITCH_COLUMNS,
            _cells([s for tr in runs for s in tr.switches], SWITCH_COLUMNS),
        ),
    }
    writer.write_outputs(out, tables, summary, lambda tmp: write_report(tmp, scn, runs, summary))
    return summary
