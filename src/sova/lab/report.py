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
    extra = {k: v for k, v in run.extra.items() if k not in ("hosts", "goodput")}
    if scn.experiment == "hotspot-migration":
        checks, extra = _hotspot_checks(scn, run, extra)
        checks["no_tcp_stream_lost"] = not broken
    elif scn.experiment == "guarantee":
        checks = _guarantee_checks(scn, run)
        checks["no_tcp_stream_lost"] = not broken
    else:
        checks = {
            "holders_per_phase": all(p.ok for p in run.phases),
            "scenario_agrees_with_simulator": all(p.simulated == p.expected for p in run.phases),
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
                "simulated": p.simulated,
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
        **extra,
    }


def _guarantee_checks(scn: LabScenario, run: LabRun) -> dict[str, bool]:
    """The minimum held where a controller enforced it, not held without one (else the
    link was no bottleneck and the run shows nothing), and the link's cap held."""
    rows = run.extra.get("guarantee", [])
    checks: dict[str, bool] = {}
    for r in rows:
        phase = r["phase"]
        if r["enforcement"] == "none":
            checks[f"baseline_misses_the_minimum_{phase}"] = not all(r["held"].values())
        else:
            checks[f"minimum_held_{phase}"] = bool(r["held"]) and all(r["held"].values())
            want = "guest HTB" if r["enforcement"] == "guest-side" else "no <bandwidth>"
            start = r["from_s"] - scn.guarantee.settle_s
            checks[f"limits_applied_{phase}"] = any(
                e.event == "rate_limit" and want in e.detail and start <= e.time_s <= r["to_s"]
                for e in run.events
            )
        checks[f"link_holds_{phase}"] = r["total_mbps"] <= 1.05 * scn.guarantee.link_mbit
    return checks


def _last_host(run: LabRun) -> dict[str, str]:
    out: dict[str, str] = {}
    for r in sorted(run.timeline, key=lambda r: r.time_s):
        out[r.vm] = r.host
    return out


def _hotspot_checks(
    scn: LabScenario, run: LabRun, extra: dict[str, Any]
) -> tuple[dict[str, bool], dict[str, Any]]:
    """The migration as the daemons logged it, libvirt measured it and pings saw it."""
    want = scn.migration
    done = [e for e in run.events if e.event == "migrate"]
    failed = [e for e in run.events if e.event == "migrate_failed"]
    seen = run.extra.get("migrations", {})
    last = _last_host(run)
    t0 = float(run.extra.get("t_wall0", 0.0))
    decisions = run.extra.get("decisions", {}).get("decisions", [])
    flagged = [d for d in decisions if d.get("flag")]
    rows = []
    for e in done:
        m = seen.get(e.vm, {})
        job = m.get("job", {})
        arrived = m.get("arrived_s")
        fast_at = next(
            (
                r.time_s
                for r in sorted(run.timeline, key=lambda r: r.time_s)
                if r.vm == e.vm
                and r.host == e.dst_host
                and r.nic == "vf"
                and arrived is not None
                and r.time_s >= arrived
            ),
            None,
        )
        ping = m.get("ping", {})
        rows.append(
            {
                "vm": e.vm,
                "src": e.src_host,
                "dst": e.dst_host,
                "signalled_s": m.get("started_s"),
                "migrated_s": e.time_s,
                "arrived_s": arrived,
                "libvirt_time_ms": job.get("time_elapsed"),
                "downtime_ms": job.get("downtime"),
                "memory_total_bytes": job.get("memory_total"),
                "ping_max_gap_s": ping.get("max_gap_s"),
                "ping_lost": ping.get("lost"),
                "fast_path_on_target_s": fast_at,
                "ends_on": last.get(e.vm),
            }
        )
    leases = run.extra.get("cluster", {}).get("leases")
    checks = {
        "hot_flagged": any(d.get("host") == rows[0]["src"] for d in flagged)
        if rows
        else bool(flagged) or want.migrations == 0,
        "migrations": len(done) == want.migrations and not failed,
        "guest_ends_on_target": all(r["ends_on"] == r["dst"] for r in rows),
        "downtime_reported_and_bounded": all(
            r["downtime_ms"] is not None and 0 <= r["downtime_ms"] <= want.max_downtime_ms
            for r in rows
        ),
        "migration_ping_gap": all(
            r["ping_max_gap_s"] is not None and r["ping_max_gap_s"] <= want.max_migration_ping_gap_s
            for r in rows
        ),
        "lease_released": leases == [],
    }
    if want.fast_path_on_target:
        checks["fast_path_on_target"] = all(r["fast_path_on_target_s"] is not None for r in rows)
    extra = {k: v for k, v in extra.items() if k not in ("decisions", "migrations")}
    extra["migration_rows"] = rows
    extra["flagged"] = [
        {
            "time_s": round(float(d["time_s"]) - t0, 1) if t0 else d["time_s"],
            "host": d["host"],
            "vm": d.get("vm"),
            "target": d.get("target"),
            "reason": d.get("reason"),
        }
        for d in flagged
    ]
    return checks, extra


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
        hosts_rows = run.extra.get("hosts", [])
        if hosts_rows:
            with (tmp / "hosts.csv").open("w", newline="") as fh:
                w = csv.writer(fh, lineterminator="\n")
                w.writerow(["time_s", "host", "cpu", "mem", "net"])
                for h in hosts_rows:
                    w.writerow([_cell(h[c]) for c in ("time_s", "host", "cpu", "mem", "net")])
        summary["plots"] = _plots(tmp, scn, run)
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        (tmp / "report.md").write_text(_report(scn, summary))
    return summary


def _plots(tmp: Path, scn: LabScenario, run: LabRun) -> dict[str, dict[str, int]]:
    from sova.lab.plots import plot_goodput, plot_holders, plot_hosts, plot_rates
    from sova.writer import write_plot_index

    guests = [f"g{n}" for n in range(1, scn.guests + 1)]
    marks = [p.start_s for p in run.phases[1:]]
    expected = [(p.expected, p.start_s, p.end_s) for p in run.phases if p.expected]
    plots: dict[str, dict[str, int]] = {}
    drawn = plot_holders(
        tmp / "holders.png",
        run.timeline,
        guests,
        f"{scn.name}: fast-path holders",
        expected=expected,
        marks=marks,
    )
    if drawn:
        plots["holders.png"] = drawn
    else:
        (tmp / "holders.png").unlink(missing_ok=True)
    drawn = plot_rates(tmp / "rates.png", run.timeline, guests, f"{scn.name}: guests", marks)
    if drawn:
        plots["rates.png"] = drawn
    goodput = run.extra.get("goodput", [])
    if goodput:
        drawn = plot_goodput(
            tmp / "goodput.png",
            goodput,
            scn.guarantee.min_mbit,
            scn.guarantee.link_mbit,
            f"{scn.name}: what each guest's iperf3 got",
            marks,
        )
        if drawn:
            plots["goodput.png"] = drawn
    hosts_rows = run.extra.get("hosts", [])
    if hosts_rows:
        drawn = plot_hosts(
            tmp / "hosts.png",
            hosts_rows,
            scn.controller.manager.alpha,
            f"{scn.name}: hypervisor CPU as each agent reports it",
            marks,
        )
        if drawn:
            plots["hosts.png"] = drawn
    write_plot_index(tmp, plots)
    return plots


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
    ]
    if scn.experiment == "hotspot-migration":
        lines += _hotspot_report(s)
    elif scn.experiment == "guarantee":
        lines += _guarantee_report(scn, s)
    else:
        lines += [
            "## Fast-path holders per phase",
            "",
            "Expected: as the scenario states them. Simulated: what the same policy, with "
            "the same controller settings, decides in the simulator for the same phases "
            "(`sova.lab_simulated`). Lab: the holders on HV1 at the phase's end.",
            "",
            "| phase | from s | to s | expected | simulated | lab | |",
            "|---|---|---|---|---|---|---|",
        ]
        for p in s["phases"]:
            sim = "—" if p.get("simulated") is None else (", ".join(p["simulated"]) or "none")
            lines.append(
                f"| {p['name']} | {p['start_s']:.0f} | {p['end_s']:.0f} | "
                f"{', '.join(p['expected']) or '—'} | {sim} | {', '.join(p['holders']) or '—'} | "
                f"{mark[p['ok']]} |"
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
    if s.get("plots"):
        lines += ["", "## Plots", ""] + [f"![{name}]({name})" for name in sorted(s["plots"])]
    lines += ["", "## Driver notes", ""] + [f"- {n}" for n in s["notes"]] + [""]
    return "\n".join(lines)


def _f(v: Any, spec: str = ".1f") -> str:
    return "—" if v is None else format(v, spec)


def _guarantee_report(scn: LabScenario, s: dict[str, Any]) -> list[str]:
    g = scn.guarantee
    guests = sorted({vm for r in s.get("guarantee", []) for vm in r["mean_mbps"]})
    lines = [
        "## The minimum on a shared link",
        "",
        f"Shared link {g.link_mbit:g} Mbit/s (HTB on the peer's veth), of which the "
        f"allocator divides {g.capacity:g}. Minimums (domain "
        f"metadata): {', '.join(f'{k} {v:g} Mbit/s' for k, v in sorted(g.min_mbit.items()))}. "
        "Means of each guest's own iperf3 per-second throughput, from "
        f"{g.settle_s:g} s into the phase to its end; held = mean >= "
        f"{1 - g.tolerance:.0%} of the minimum.",
        "",
        "| phase | limits enforced | from s | to s | "
        + " | ".join(f"{vm} Mbit/s" for vm in guests)
        + " | total | minimum held |",
        "|---|---|---|---|" + "---|" * len(guests) + "---|---|",
    ]
    for r in s.get("guarantee", []):
        held = ", ".join(f"{vm} {'yes' if ok else 'no'}" for vm, ok in r["held"].items())
        lines.append(
            f"| {r['phase']} | {r['enforcement']} | {r['from_s']:.0f} | {r['to_s']:.0f} | "
            + " | ".join(_f(r["mean_mbps"].get(vm)) for vm in guests)
            + f" | {r['total_mbps']:.1f} | {held or '—'} |"
        )
    return lines


def _hotspot_report(s: dict[str, Any]) -> list[str]:
    lines = [
        "## What the manager flagged",
        "",
        "| t s | host | vm | target | reason |",
        "|---|---|---|---|---|",
    ]
    for d in s.get("flagged", []):
        lines.append(
            f"| {_f(d['time_s'])} | {d['host']} | {d['vm'] or '—'} | {d['target'] or '—'} "
            f"| {d['reason']} |"
        )
    lines += [
        "",
        "## Migrations",
        "",
        "Signalled: the agent logged the manager's directive. Agent done: the agent logged "
        "the migrate outcome (it polls its operations every 0.5 s and reports each period; "
        "the fast NIC was unplugged first, bond moved first). Arrived: the first "
        "second the guest ran on the target. libvirt time and downtime: the destination's "
        "completed-job statistics. Ping: requests at 10/s from the peer namespace, from the "
        "signal to 10 s after arrival.",
        "",
        "| vm | from | to | signalled s | agent done s | arrived s | libvirt ms | downtime ms "
        "| ping gap s | lost | fast path on target at s | ends on |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in s.get("migration_rows", []):
        lines.append(
            f"| {r['vm']} | {r['src']} | {r['dst']} | {_f(r['signalled_s'])} "
            f"| {_f(r['migrated_s'])} | {_f(r['arrived_s'])} | {_f(r['libvirt_time_ms'], '.0f')} "
            f"| {_f(r['downtime_ms'], '.0f')} | {_f(r['ping_max_gap_s'], '.2f')} "
            f"| {_f(r['ping_lost'], 'd')} | {_f(r['fast_path_on_target_s'])} | {r['ends_on']} |"
        )
    lines += ["", "## Fast-path holders at each phase's end", ""]
    for p in s["phases"]:
        lines.append(f"- {p['name']} (to {p['end_s']:.0f} s): {', '.join(p['holders']) or '—'}")
    return lines
