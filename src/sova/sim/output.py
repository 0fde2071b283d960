"""A simulated run's output files: timeline.csv, events.csv, summary.json, report.md.

The rows are :mod:`sova.record`'s and the files are written by :mod:`sova.writer`, as in
every world; this module adds the simulator's summary (from per-tick statistics, not the
10 s timeline) and the paper comparisons.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sova import writer
from sova.record import EVENT_COLUMNS, TEXT_COLUMNS, TIMELINE_COLUMNS, Timeline, TimelineRow
from sova.scenario import Scenario
from sova.sim.world import PolicyRun, p99_from_hist
from sova.writer import cells


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


def vm_means(timeline: Timeline, vms: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per VM of ``vms``: its timeline rows, those on a VF, and the sum of its
    ``cpu_usage`` added in row order (as a sum over its rows would), from the columns."""
    rows, on_vf, cpu = (
        np.zeros(len(vms), np.int64),
        np.zeros(len(vms), np.int64),
        np.zeros(len(vms)),
    )
    where = {v: i for i, v in enumerate(vms)}
    index = np.array([where.get(str(v), -1) for v in timeline.texts("vm")] + [-1], dtype=np.int64)
    vf = np.array([t == "vf" for t in timeline.texts("nic")] + [False])
    for chunk in timeline.chunks(("vm", "nic", "cpu_usage")):
        i = index[chunk.columns["vm"]]
        known = i >= 0
        i = i[known]
        rows += np.bincount(i, minlength=len(vms))
        on_vf += np.bincount(i[vf[chunk.columns["nic"]][known]], minlength=len(vms))
        np.add.at(cpu, i, chunk.columns["cpu_usage"][known])  # in row order, one at a time
    return rows, on_vf, cpu


def periods(timeline: Timeline) -> int:
    """Distinct period times (read once for the summary and the report's plots)."""
    return int(timeline.sample_times().size)


def summarize(scn: Scenario, run: PolicyRun) -> dict[str, Any]:
    """Per-policy figures, from the per-tick statistics (not the 10 s timeline)."""
    st = run.stats
    eng = run.engine
    assert eng is not None
    seconds = max(st.ticks * scn.tick, 1e-9)
    capacity_bps = float(eng.capacity.sum())
    rows, on_vf, cpu = vm_means(run.timeline, eng.vm_names)
    per_vm: dict[str, dict[str, Any]] = {}
    for i, vm in enumerate(eng.vm_names):
        n = int(rows[i])
        entry: dict[str, Any] = {
            "throughput_mbps": round(float(st.tx_bits[i]) / seconds / 1e6, 3),
            "vf_share": round(int(on_vf[i]) / n, 4) if n else 0.0,
            "mean_cpu_usage": round(float(cpu[i]) / n, 4) if n else 0.0,
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
        "migration_log": migrations(eng),
        "files_done": len(files),
        "mean_transfer_s": round(sum(files) / len(files), 3) if files else None,
        "periods": periods(run.timeline),
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


def migrations(eng: Any) -> list[dict[str, Any]]:
    """The run's migrations, rounded as summary.json has them."""
    return [
        {k: (round(v, 3) if isinstance(v, float) else v) for k, v in m.items()}
        for m in eng.migration_log
    ]


def live_figures(run: PolicyRun, eng: Any, scn: Scenario | None) -> dict[str, Any]:
    """A running world's figures for a live view: link use per host and each guaranteed
    VM's rate over the last control period, how often its guarantee held so far, and the
    migrations so far."""
    st = run.stats
    if not st.series_t:
        return {}
    k = 10
    if scn is not None:
        k = max(1, int(round(scn.controller.period / scn.tick)))
    net = list(st.host_net.last)[-k:]
    link = {h: float(sum(row[j] for row in net)) / len(net) for j, h in enumerate(eng.host_names)}
    tx = [row / 1e6 for row in list(st.series_vm_tx_bps)[-k:]]  # Mbit/s, as accumulated
    guarantees = {}
    for i, vm in enumerate(eng.vm_names):
        g = float(eng.vms[i].sla.bandwidth.minimum)
        if g <= 0:
            continue
        n = float(st.guar_intervals[i])
        guarantees[vm] = {
            "guarantee_mbps": g / 1e6,
            "rate_mbps": float(sum(row[i] for row in tx)) / len(tx),
            "held": float(st.guar_met[i]) / n if n else None,
        }
    return {"link": link, "guarantees": guarantees, "migrations": migrations(eng)}


def build_summary(scn: Scenario, runs: Sequence[PolicyRun]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "scenario": scn.name,
        "seed": scn.seed,
        "duration_s": scn.duration,
        "policies": {run.policy: summarize(scn, run) for run in runs},
    }
    o = scn.output
    if o.timeline_period is not None or o.timeline_vms:
        # what the timeline's figures are over (docs/design.md#timeline-resolution)
        out["timeline"] = {
            "period_s": o.timeline_period or scn.controller.period,
            "vms": o.timeline_vms or "all",
        }
    return out


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


def _rows(
    points: Sequence[tuple[Scenario, Sequence[PolicyRun]]],
    records: str,
    columns: Sequence[str],
    sweep: bool,
) -> Iterator[list[Any]]:
    """Every run's ``records`` ("timeline" or "events") as CSV rows, sweep value first."""
    for scn, runs in points:
        lead = [scn.sweep_value] if sweep else []
        for run in runs:
            for r in getattr(run, records):
                yield lead + cells(r, columns)


BLOCK_ROWS = 4096


def timeline_blocks(
    points: Sequence[tuple[Scenario, Sequence[PolicyRun]]], sweep: bool
) -> Iterator[writer.Block]:
    """Every run's timeline as blocks of CSV columns, sweep value first: a column is
    formatted at once (texts once per distinct value), not a cell at a time."""
    for scn, runs in points:
        lead = np.frombuffer(writer.csv_cell(scn.sweep_value).encode(), dtype=np.uint8)
        for run in runs:
            tl = run.timeline
            texts = {c: writer.text_table(tl.texts(c)) for c in TEXT_COLUMNS}
            for chunk in tl.chunks():
                # a few thousand rows at a time: the byte matrices are ~100 bytes a row
                for at in range(0, chunk.n, BLOCK_ROWS):
                    part = {k: v[at : at + BLOCK_ROWS] for k, v in chunk.columns.items()}
                    n = min(BLOCK_ROWS, chunk.n - at)
                    block = [np.tile(lead, (n, 1))] if sweep else []
                    for name in TIMELINE_COLUMNS:
                        a = part[name]
                        if name in TEXT_COLUMNS:
                            block.append(texts[name][a])
                        else:
                            block.append(writer.float_cells(a))
                    yield block


# Past this many timeline rows (~20 MB of CSV, ~100 bytes a row) ``auto`` writes the
# timeline as columns (docs/design.md#timeline-resolution): the largest shipped scenario
# has ~39,000 rows and a week of 100 chosen VMs at 10 min ~100,800, so both stay CSV.
CSV_ROWS = 200_000
TIMELINE_FORMATS = ("auto", "csv", "columns")


def timeline_name(points: Sequence[tuple[Scenario, Sequence[PolicyRun]]], form: str) -> str:
    """The timeline's file in the outputs: ``timeline.csv``, or the ``timeline`` folder of
    columns (``form`` "columns", or "auto" past :data:`CSV_ROWS` rows)."""
    if form not in TIMELINE_FORMATS:
        raise ValueError(f"timeline format: {form!r} is none of {', '.join(TIMELINE_FORMATS)}")
    if form == "auto":
        rows = sum(len(run.timeline) for _, runs in points for run in runs)
        form = "csv" if rows <= CSV_ROWS else "columns"
    return "timeline.csv" if form == "csv" else "timeline"


def _code_type(names: int) -> np.dtype[Any]:
    return np.dtype(np.uint8 if names <= 1 << 8 else np.uint16 if names <= 1 << 16 else np.int32)


def write_timeline_columns(
    folder: Path, points: Sequence[tuple[Scenario, Sequence[PolicyRun]]], sweep: bool
) -> None:
    """Every run's timeline as a folder of columns (:func:`sova.writer.write_npy_columns`):
    the numbers as the runs hold them (float64; an empty cell is a NaN with the bits
    :data:`sova.record.NONE_BITS`), each text column as codes into one list of names for
    all runs (a sweep's value as the CSV writes it)."""
    text_cols = (["sweep_value"] if sweep else []) + [
        c for c in TIMELINE_COLUMNS if c in TEXT_COLUMNS
    ]
    names: dict[str, dict[Any, int]] = {c: {} for c in text_cols}
    luts: list[tuple[PolicyRun, dict[str, np.ndarray]]] = []
    for scn, runs in points:
        for run in runs:
            lut = {
                c: np.array(
                    [names[c].setdefault(t, len(names[c])) for t in run.timeline.texts(c)],
                    dtype=np.int64,
                )
                for c in TEXT_COLUMNS
            }
            if sweep:
                lut["sweep_value"] = np.array(
                    [
                        names["sweep_value"].setdefault(
                            writer.fmt(scn.sweep_value), len(names["sweep_value"])
                        )
                    ]
                )
            luts.append((run, lut))
    columns = (["sweep_value"] if sweep else []) + TIMELINE_COLUMNS
    dtypes = {c: _code_type(len(names[c])) if c in names else np.dtype(np.float64) for c in columns}

    def blocks() -> Iterator[writer.ColumnBlock]:
        for run, lut in luts:
            for chunk in run.timeline.chunks():
                block = {
                    c: lut[c][chunk.columns[c]] if c in TEXT_COLUMNS else chunk.columns[c]
                    for c in TIMELINE_COLUMNS
                }
                if sweep:
                    block["sweep_value"] = np.repeat(lut["sweep_value"], chunk.n)
                yield block

    rows = sum(len(run.timeline) for run, _ in luts)
    texts = {c: list(v) for c, v in names.items()}
    writer.write_npy_columns(folder, rows, dtypes, texts, blocks())


def write_outputs(
    out: Path,
    points: Sequence[tuple[Scenario, Sequence[PolicyRun]]],
    timeline_format: str = "auto",
) -> dict[str, Any]:
    """All files of a run (one point, or every point of a sweep) into ``out``, atomically;
    the timeline as :func:`timeline_name` says for ``timeline_format``.

    The summary reads every run's timeline (sealing it) before the CSV files and the
    report read it (:func:`sova.writer.write_outputs`).
    """
    sweep = points[0][0].sweep is not None
    summary = build_sweep_summary(points) if sweep else build_summary(*points[0])
    lead = ["sweep_value"] if sweep else []
    name = timeline_name(points, timeline_format)

    def report(tmp: Path) -> None:
        # imported here: matplotlib (~0.4 CPU-s) loads in the process that draws
        from sova.sim.report import write_report
        from sova.sim.sweep_report import write_sweep_report

        if sweep:
            write_sweep_report(tmp, points, summary)
        else:
            write_report(tmp, points[0][0], points[0][1], summary, timeline_file=name)

    def timeline(tmp: Path) -> None:
        if name == "timeline.csv":
            writer.write_csv_columns(tmp, lead + TIMELINE_COLUMNS, timeline_blocks(points, sweep))
        else:
            write_timeline_columns(tmp, points, sweep)

    writer.write_outputs(
        out,
        {
            name: timeline,
            "events.csv": (lead + EVENT_COLUMNS, _rows(points, "events", EVENT_COLUMNS, sweep)),
        },
        summary,
        report,
    )
    # the other form from an earlier run into the same folder would read as this run's
    stale = out / ("timeline" if name == "timeline.csv" else "timeline.csv")
    if stale.is_dir():
        shutil.rmtree(stale)
    elif stale.exists():
        stale.unlink()
    return summary
