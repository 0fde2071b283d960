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
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sova.scenario import Scenario
from sova.sim.runner import EventRow, PolicyRun, TimelineRow

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
]
EVENT_COLUMNS = ["policy", "time_s", "event", "vm", "src_host", "dst_host", "detail"]


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}".rstrip("0").rstrip(".") if value == value else "nan"
    return str(value)


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[Any]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow([_fmt(getattr(r, c)) for c in columns])


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
    capacity = {h.name: h.nic.capacity for h in scn.hosts}
    per_vm: dict[str, dict[str, float]] = {}
    by_vm: dict[str, list[TimelineRow]] = defaultdict(list)
    for r in run.timeline:
        by_vm[r.vm].append(r)
    for vm, rows in sorted(by_vm.items()):
        n = len(rows)
        per_vm[vm] = {
            "throughput_mbps": round(sum(r.tx_mbps + r.rx_mbps for r in rows) / n, 3),
            "vf_share": round(sum(1 for r in rows if r.nic == "vf") / n, 4),
            "mean_cpu_usage": round(sum(r.cpu_usage for r in rows) / n, 4),
        }
    periods = sorted({r.time_s for r in run.timeline})
    host_tp: dict[tuple[float, str], float] = defaultdict(float)
    for r in run.timeline:
        host_tp[(r.time_s, r.host)] += r.tx_mbps + r.rx_mbps
    total_mbps = sum(host_tp.values()) / max(1, len(periods))
    total_capacity_mbps = sum(capacity.values()) / 1e6
    changes = [e for e in run.events if e.event in ("vf_attach", "vf_detach")]
    failures = [e for e in run.events if e.event.endswith(("_failed", "_timeout", "_blocked"))]
    summary: dict[str, Any] = {
        "throughput_mbps": round(total_mbps, 3),
        "link_utilization": round(total_mbps / total_capacity_mbps, 4)
        if total_capacity_mbps
        else 0.0,
        "vf_changes": len(changes),
        "failed_actions": len(failures),
        "migrations": sum(1 for e in run.events if e.event == "migrate_end"),
        "periods": len(periods),
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


def write_outputs(out: Path, scn: Scenario, runs: Sequence[PolicyRun]) -> dict[str, Any]:
    from sova.report import write_report

    summary = build_summary(scn, runs)
    with staged_dir(out) as tmp:
        timeline: list[TimelineRow] = [r for run in runs for r in run.timeline]
        events: list[EventRow] = [e for run in runs for e in run.events]
        write_csv(tmp / "timeline.csv", TIMELINE_COLUMNS, timeline)
        write_csv(tmp / "events.csv", EVENT_COLUMNS, events)
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        write_report(tmp, scn, runs, summary)
    return summary
