"""The standard output files of a run: timeline.csv, events.csv, summary.json.

Every world (simulator, testbed, demo) writes the same files so that one report and one
set of acceptance checks read them all. Floats are written with fixed precision and JSON
with sorted keys so that the same seed gives byte-identical files.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sova.scenario import Scenario
from sova.sim.runner import PolicyRun, TimelineRow
from sova.sim.world import p99_from_hist

TIMELINE_COLUMNS = [
    "policy",
    "time_s",
    "host",
    "vm",
    "nic",
    "vf_rate_mbps",
    "tx_mbps",
    "rx_mbps",
    "cpu_usage",
    "io_degree",
    "net_factor",
    "net_degree",
    "io_factor",
    "offered_mbps",
    "response_ms",
    "limit_mbps",
]
EVENT_COLUMNS = ["policy", "time_s", "event", "vm", "src_host", "dst_host", "detail"]


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}".rstrip("0").rstrip(".") if value == value else "nan"
    return str(value)


def holder_sets(timeline: Sequence[TimelineRow]) -> dict[float, frozenset[str]]:
    """VF holders at every controller period (including periods with none)."""
    by_t: dict[float, set[str]] = defaultdict(set)
    for r in timeline:
        by_t.setdefault(r.time_s, set())
        if r.nic == "vf":
            by_t[r.time_s].add(r.vm)
    return {t: frozenset(v) for t, v in sorted(by_t.items())}


def paper_match(scn: Scenario, run: PolicyRun) -> list[dict[str, Any]]:
    """For each published phase: the distinct holder sets we saw in its time range."""
    sets = holder_sets(run.timeline)
    out = []
    for ph in scn.paper.vf_holders:
        seen = sorted({tuple(sorted(s)) for t, s in sets.items() if ph.start < t <= ph.end})
        expected = sorted(ph.vms)
        out.append(
            {
                "label": ph.label or f"{ph.start:g}-{ph.end:g} s",
                "start_s": ph.start,
                "end_s": ph.end,
                "paper": expected,
                "observed": [list(s) for s in seen],
                "match": seen == [tuple(expected)],
            }
        )
    return out


def summarize(scn: Scenario, run: PolicyRun) -> dict[str, Any]:
    """Per-policy figures, from the per-tick statistics (not the 10 s timeline)."""
    st = run.stats
    eng = run.engine
    assert eng is not None
    seconds = max(st.ticks * scn.tick, 1e-9)
    capacity_bps = float(eng.capacity.sum())
    by_vm: dict[str, list[TimelineRow]] = defaultdict(list)
    for r in run.timeline:
        by_vm[r.vm].append(r)
    per_vm: dict[str, dict[str, Any]] = {}
    for i, vm in enumerate(eng.vm_names):
        rows = by_vm.get(vm, [])
        entry: dict[str, Any] = {
            "throughput_mbps": round(float(st.tx_bits[i]) / seconds / 1e6, 3),
            "vf_share": round(sum(1 for r in rows if r.nic == "vf") / len(rows), 4)
            if rows
            else 0.0,
            "mean_cpu_usage": round(sum(r.cpu_usage for r in rows) / len(rows), 4) if rows else 0.0,
        }
        if st.req_weight[i] > 0:
            entry["mean_response_ms"] = round(float(st.req_time[i] / st.req_weight[i]) * 1000, 4)
            # replies actually sent per second (httperf's reply rate), not the offered rate
            entry["requests_per_s"] = round(float(st.req_weight[i]) / seconds, 3)
        if st.guar_intervals[i] > 0:
            entry["guarantee_met_fraction"] = round(float(st.guar_met[i] / st.guar_intervals[i]), 4)
        per_vm[vm] = entry
    changes = [e for e in run.events if e.event in ("vf_attach", "vf_detach")]
    failures = [e for e in run.events if e.event.endswith(("_failed", "_timeout", "_blocked"))]
    total_req = float(st.req_weight.sum())
    p99 = p99_from_hist(st.resp_hist)
    guar = float(st.guar_intervals.sum())
    files = [f.end_s - f.start_s for f in eng.files_done]
    summary: dict[str, Any] = {
        "throughput_mbps": round(float(st.tx_bits.sum()) / seconds / 1e6, 3),
        "link_utilization": round(float(st.tx_bits.sum()) / seconds / capacity_bps, 4),
        "mean_response_ms": round(float(st.req_time.sum()) / total_req * 1000, 4)
        if total_req
        else None,
        "p99_response_ms": round(p99 * 1000, 4) if p99 is not None else None,
        "guarantee_met_fraction": round(float(st.guar_met.sum()) / guar, 4) if guar else None,
        "vf_changes": len(changes),
        "failed_actions": len(failures),
        "migrations": sum(1 for e in run.events if e.event == "migrate_end"),
        "migration_log": [
            {k: (round(v, 3) if isinstance(v, float) else v) for k, v in m.items()}
            for m in eng.migration_log
        ],
        "files_done": len(files),
        "mean_transfer_s": round(sum(files) / len(files), 3) if files else None,
        "periods": len({r.time_s for r in run.timeline}),
        "per_vm": per_vm,
    }
    if scn.paper.classification is not None:
        from sova.classification import check_orderings, steady_means

        skip = scn.controller.period * scn.controller.sensing.window
        means = steady_means(run.timeline, skip)
        checks = check_orderings(scn.paper.classification, means)
        summary["classification"] = {
            "steady_means": {
                vm: {k: round(v, 4) for k, v in sorted(f.items())}
                for vm, f in sorted(means.items())
            },
            "checks": checks,
            "all_hold": all(c["holds"] for c in checks),
        }
    if scn.paper.vf_holders:
        matches = paper_match(scn, run)
        summary["paper_vf_holders"] = matches
        summary["paper_vf_holders_match"] = all(m["match"] for m in matches)
    return summary


def build_summary(scn: Scenario, runs: Sequence[PolicyRun]) -> dict[str, Any]:
    return {
        "scenario": scn.name,
        "seed": scn.seed,
        "duration_s": scn.duration,
        "policies": {run.policy: summarize(scn, run) for run in runs},
    }


def build_sweep_summary(points: Sequence[tuple[Scenario, Sequence[PolicyRun]]]) -> dict[str, Any]:
    first = points[0][0]
    assert first.sweep is not None
    return {
        "scenario": first.name,
        "seed": first.seed,
        "duration_s": first.duration,
        "sweep": {
            "variable": first.sweep.variable,
            "label": first.sweep.label or first.sweep.variable,
            "points": [
                {"value": scn.sweep_value, "policies": {r.policy: summarize(scn, r) for r in runs}}
                for scn, runs in points
            ],
        },
    }


@contextmanager
def staged_dir(final: Path) -> Iterator[Path]:
    """Write into a temporary sibling, then move the files into ``final`` in one go.

    A run that fails half-way leaves ``final`` as it was: nothing half-applied.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        yield tmp
        final.mkdir(exist_ok=True)
        for item in sorted(tmp.iterdir()):
            os.replace(item, final / item.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write_rows(
    path: Path,
    columns: Sequence[str],
    points: Sequence[tuple[Scenario, Sequence[PolicyRun]]],
    records: str,
    sweep: bool,
) -> None:
    """One CSV of every run's ``records`` ("timeline" or "events"), sweep value first."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow((["sweep_value"] if sweep else []) + list(columns))
        for scn, runs in points:
            lead = [_fmt(scn.sweep_value)] if sweep else []
            for run in runs:
                for r in getattr(run, records):
                    w.writerow(lead + [_fmt(getattr(r, c)) for c in columns])


def write_outputs(
    out: Path, points: Sequence[tuple[Scenario, Sequence[PolicyRun]]]
) -> dict[str, Any]:
    """All files of a run (one point, or every point of a sweep) into ``out``, atomically."""
    from sova.sim.report import write_report, write_sweep_report

    sweep = points[0][0].sweep is not None
    summary = build_sweep_summary(points) if sweep else build_summary(*points[0])
    with staged_dir(out) as tmp:
        _write_rows(tmp / "timeline.csv", TIMELINE_COLUMNS, points, "timeline", sweep)
        _write_rows(tmp / "events.csv", EVENT_COLUMNS, points, "events", sweep)
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        if sweep:
            write_sweep_report(tmp, points, summary)
        else:
            write_report(tmp, points[0][0], points[0][1], summary)
    return summary
