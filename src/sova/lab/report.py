"""The lab run's standard outputs: timeline.csv, events.csv, summary.json, report.md.

Columns come from :mod:`sova.record` (the same files every world writes); the summary and
report add what only the lab measures: holders per phase, ping gaps, broken streams.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from sova.lab.runner import LabRun
from sova.lab.scenario import LabScenario
from sova.record import EVENT_COLUMNS, TIMELINE_COLUMNS
from sova.writer import staged_dir


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def summarize(scn: LabScenario, run: LabRun) -> dict[str, Any]:
    max_gap = max((p["max_gap_s"] for p in run.ping.values()), default=float("inf"))
    broken = [s for s in run.streams if s["exitcode"] != 0]
    checks = {
        "holders_per_phase": all(p.ok for p in run.phases),
        "max_ping_gap": max_gap <= scn.checks.max_ping_gap_s,
        "no_tcp_stream_lost": not broken,
    }
    return {
        "scenario": scn.name,
        "experiment": scn.experiment,
        "world": "lab",
        "phases": [
            {
                "name": p.name,
                "start_s": p.start_s,
                "end_s": p.end_s,
                "expected": p.expected,
                "holders": p.holders,
                "ok": p.ok,
            }
            for p in run.phases
        ],
        "ping": run.ping,
        "max_ping_gap_s": max_gap,
        "streams": run.streams,
        "events": {
            e: sum(1 for r in run.events if r.event == e)
            for e in sorted({r.event for r in run.events})
        },
        "checks": checks,
        "passed": all(checks.values()),
        "notes": run.notes,
    }


def write_outputs(out: Path, scn: LabScenario, run: LabRun) -> dict[str, Any]:
    summary = summarize(scn, run)
    with staged_dir(out) as tmp:
        for name, cols, rows in (
            ("timeline.csv", TIMELINE_COLUMNS, run.timeline),
            ("events.csv", EVENT_COLUMNS, run.events),
        ):
            with (tmp / name).open("w", newline="") as fh:
                w = csv.writer(fh, lineterminator="\n")
                w.writerow(cols)
                for r in rows:
                    w.writerow([_cell(getattr(r, c)) for c in cols])
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        (tmp / "report.md").write_text(_report(scn, summary))
    return summary


def _report(scn: LabScenario, s: dict[str, Any]) -> str:
    mark = {True: "✅", False: "❌"}
    lines = [
        f"# {scn.name} (hypervisor lab)",
        "",
        scn.description.strip(),
        "",
        "Real libvirt daemons and QEMU guests; the production LibvirtDriver with the "
        "`lab-nic` fast path and `guest-bond` failover (docs/lab.md).",
        "",
        "## Fast-path holders per phase",
        "",
        "| phase | from s | to s | expected | holders | |",
        "|---|---|---|---|---|---|",
    ]
    for p in s["phases"]:
        lines.append(
            f"| {p['name']} | {p['start_s']:.0f} | {p['end_s']:.0f} | "
            f"{', '.join(p['expected']) or '—'} | {', '.join(p['holders']) or '—'} | {mark[p['ok']]} |"
        )
    lines += [
        "",
        "## Continuity",
        "",
        "| guest | max ping gap s (send time) | max reply-arrival gap s | replies | lost |",
        "|---|---|---|---|---|",
    ]
    for g, p in sorted(s["ping"].items()):
        lines.append(
            f"| {g} | {p['max_gap_s']:.3f} | {p['max_arrival_gap_s']:.3f} | {p['replies']} "
            f"| {p['lost']} |"
        )
    lines += ["", "| TCP stream (iperf3) | exit | |", "|---|---|---|"]
    for st in s["streams"]:
        what = "did not finish" if st["exitcode"] is None else (st["stderr"] or "")
        lines.append(f"| {st['guest']} | {st['exitcode']} | {what} |")
    lines += ["", "## Checks", ""]
    for k, v in s["checks"].items():
        lines.append(f"- {mark[v]} {k}")
    lines += ["", "## Driver notes", ""] + [f"- {n}" for n in s["notes"]] + [""]
    return "\n".join(lines)
