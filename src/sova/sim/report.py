"""A simulated run's report.md and its plots: what an operator looks at after a run.

Formatting, the VF-holders plot and the atomic write are :mod:`sova.writer`'s, shared
with the testbed's report.

A sweep's report (one figure across the sweep's points) is :mod:`sova.sim.sweep_report`'s.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sova import writer
from sova.agent.registry import vf_policy
from sova.scenario import PolicySpec, Scenario
from sova.sim.decisions import Moves, run_moves
from sova.sim.report_plots import draw
from sova.sim.world import PolicyRun
from sova.writer import mark

# matplotlib (through writer.pyplot and sova.sim.fleet) is imported where a plot is drawn:
# `sova simulate` reads holder_verdict here after a forked process drew the report.
TABLE_VMS = 20  # rows of report.md's per-VM table (and migrations listed in prose)

EQUAL = 0.01  # throughputs within 1 % are "equal": the report then shows CPU and latency


def is_baseline(spec: PolicySpec) -> bool:
    """A policy that does not pick VF holders from load: a paper's published holders are
    not its yardstick."""
    return not vf_policy(spec.vf).follows_load


def holder_verdict(spec: PolicySpec | None, match: bool) -> str:
    """How a policy's VF holders read against a paper's table (report and CLI alike)."""
    if spec is not None and is_baseline(spec):
        return "baseline (the table is the scheduler's)"
    return "match" if match else "MISMATCH"


def decisions_table(
    scn: Scenario, runs: Sequence[PolicyRun], facts: Sequence[Moves] | None = None
) -> list[str]:
    """What each policy's decisions were and what they bought: VF moves (per host-hour),
    the useless ones (sova.sim.decisions), migrations and the moved-back ones. ``facts``:
    each run's :func:`sova.sim.decisions.run_moves`, if the plots read them."""
    from sova.sim import decisions as dq

    ceiling = dq.virtio_ceiling_bps(scn.profile)
    freed = dq.freed_cpu_saturation(scn.profile)
    hours = max(scn.duration, 1e-9) / 3600.0
    vms = [v.name for v in scn.vms]
    lines = [
        "## Decisions",
        "",
        f"A VF move is an attach; it is useless when the VM sent no more than its virtio "
        f"path carries ({ceiling / 1e6:,.0f} Mbit/s) at the attach and over the next "
        f"{dq.USEFUL_HORIZON_S:g} s"
        + ("" if freed is None else " and its vCPUs were not full on virtio")
        + ". Moved back: a migration to a host the VM left less than "
        f"{dq.MOVED_BACK_WINDOW_S / 3600:g} h before.",
        "",
        "| policy | VF moves | per host-hour | useless | migrations | moved back |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for k, run in enumerate(runs):
        m = facts[k] if facts is not None else run_moves(run.timeline, run.events, vms, scn.profile)
        n, useless = len(m.attaches), m.useless
        share = f" ({len(useless) / n:.0%})" if n else ""
        migrations = sum(1 for e in run.events if e.event == "migrate_end")
        lines.append(
            f"| {run.policy} | {n} | {n / (len(scn.hosts) * hours):.1f} | "
            f"{len(useless)}{share} | {migrations} | {dq.moved_back(run.events)} |"
        )
    return lines


def host_cpu(run: PolicyRun) -> float | None:
    """Mean CPU utilisation over hosts and ticks (guest + backend work)."""
    return run.stats.host_cpu.mean()


def busiest_link(run: PolicyRun) -> float | None:
    """Mean link use of the most loaded host: where a guarantee is tested."""
    return run.stats.host_net.busiest()


def _guarantees(s: dict[str, Any]) -> str:
    per = [
        f"{vm} {v['guarantee_met_fraction']:.0%}"
        for vm, v in s["per_vm"].items()
        if v.get("guarantee_met_fraction") is not None
    ]
    return ", ".join(per) or "–"


def _downtime(s: dict[str, Any]) -> str:
    log = s.get("migration_log", [])
    if not log:
        return "0"
    total = sum(float(m["downtime_ms"]) for m in log)
    return f"{len(log)} ({total:.0f} ms downtime in all)"


def compare_rows(summary: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(what, baseline, policy) for the first compared policy (the baseline by convention)
    and the last one: the report's first table and the demo's last words."""
    pol = summary.get("policies", {})
    if len(pol) < 2:
        return []
    names = list(pol)
    b, m = pol[names[0]], pol[names[-1]]
    rows = [("policy", names[0], names[-1])]
    if b.get("mean_response_ms") is not None:
        rows.append(
            (
                "mean response (ms)",
                fmt_num(b["mean_response_ms"]),
                fmt_num(m["mean_response_ms"]),
            )
        )
        rows.append(
            ("p99 response (ms)", fmt_num(b["p99_response_ms"]), fmt_num(m["p99_response_ms"]))
        )
    if b.get("guarantee_met_fraction") is not None:
        rows.append(
            (
                "guarantee held (share of time)",
                f"{b['guarantee_met_fraction']:.0%}",
                f"{m['guarantee_met_fraction']:.0%}",
            )
        )
        rows.append(("  per guaranteed VM", _guarantees(b), _guarantees(m)))
    rows.append(
        ("link use (cluster)", f"{b['link_utilization']:.0%}", f"{m['link_utilization']:.0%}")
    )
    rows.append(
        (
            "throughput (Gbit/s)",
            f"{b['throughput_mbps'] / 1e3:.2f}",
            f"{m['throughput_mbps'] / 1e3:.2f}",
        )
    )
    rows.append(("VF changes", str(b["vf_changes"]), str(m["vf_changes"])))
    rows.append(("migrations", _downtime(b), _downtime(m)))
    return rows


def compare_lines(summary: dict[str, Any]) -> list[str]:
    """The comparison as plain lines for a terminal."""
    rows = compare_rows(summary)
    if not rows:
        return []
    _, base, main = rows[0]
    w = max(len(r[0]) for r in rows)
    out = [f"what {main} bought over {base}:"]
    out += [f"  {what:<{w}}  {b:>10}  ->  {m}" for what, b, m in rows[1:]]
    return out


def _did(scn: Scenario, run: PolicyRun, s: dict[str, Any]) -> list[str]:
    """What the policy did, in a few sentences taken from its records."""
    lines = []
    attaches = [e for e in run.events if e.event == "vf_attach"]
    if attaches:
        first: dict[str, float] = {}
        for e in attaches:
            first.setdefault(f"{e.vm} on {e.src_host}", e.time_s)
        moved = ", ".join(f"{k} ({t:.0f} s)" for k, t in list(first.items())[:10])
        if len(first) > 10:
            moved += f" and {len(first) - 10} more"
        lines.append(
            f"- **VFs followed the network-intensive VMs**: {len(attaches)} VF attach(es), "
            f"{s['vf_changes']} VF changes in all. First VF of each holder: {moved}."
        )
    held = [
        (vm, v["guarantee_met_fraction"])
        for vm, v in s["per_vm"].items()
        if v.get("guarantee_met_fraction") is not None
    ]
    if held:
        lines.append(
            "- **Guarantees**: "
            + ", ".join(
                f"{vm} got its minimum {f:.0%} of the time it asked for it" for vm, f in held
            )
            + (f"; the busiest link ran at {busiest_link(run):.0%}." if busiest_link(run) else ".")
        )
    log = s.get("migration_log", [])
    if log:
        moves = ", ".join(
            f"{m['vm']} {m['src']}→{m['dst']} at {float(m['start_s']):.0f} s "
            f"({float(m['downtime_ms']):.0f} ms down)"
            for m in log[:TABLE_VMS]
        )
        if len(log) > TABLE_VMS:
            moves += f" and {len(log) - TABLE_VMS} more (all in the table below)"
        lines.append(f"- **Hotspots removed by migration**: {moves}.")
    refused = [e for e in run.events if e.event == "hotspot" and "no cold spot" in e.detail]
    if refused:
        hosts = sorted({e.src_host for e in refused})
        lines.append(
            f"- **Hotspots left alone**: {', '.join(hosts)} hot with no host able to take a VM "
            f"without becoming hot itself ({len(refused)} time(s) a host entered that state; "
            "`hotspot_end` events say how long each lasted)."
        )
    return lines


def migrations_table(pol: dict[str, Any]) -> list[str]:
    rows = [(n, m) for n, s in pol.items() for m in s.get("migration_log", [])]
    if not rows:
        return []
    lines = [
        "## Migrations",
        "",
        "| policy | start (s) | VM | from | to | downtime (ms) | copied (MiB) | rounds | ok |",
        "|---|---:|---|---|---|---:|---:|---:|---|",
    ]
    for name, m in rows:
        lines.append(
            f"| {name} | {float(m['start_s']):.0f} | {m['vm']} | {m['src']} | {m['dst']} | "
            f"{float(m['downtime_ms']):.1f} | {float(m['copied_mib']):.0f} | "
            f"{m.get('rounds', '–')} | {m.get('ok', '–')} |"
        )
    return [*lines, ""]


def vf_hosts(run: PolicyRun) -> dict[str, list[str]]:
    """VM -> the hosts it held a VF on, in order."""
    tl = run.timeline
    vms, hosts = tl.texts("vm"), tl.texts("host")
    vf = np.array([t == "vf" for t in tl.texts("nic")] + [False])
    seen: dict[tuple[int, int], None] = {}
    for chunk in tl.chunks(("nic", "vm", "host")):
        on = vf[chunk.columns["nic"]]
        pairs = zip(
            chunk.columns["vm"][on].tolist(), chunk.columns["host"][on].tolist(), strict=True
        )
        seen.update(dict.fromkeys(pairs))
    out: dict[str, list[str]] = defaultdict(list)
    for v, h in seen:  # first time on a VF on each host, in row order
        out[str(vms[v])].append(str(hosts[h]))
    return out


def write_report(
    out: Path,
    scn: Scenario,
    runs: Sequence[PolicyRun],
    summary: dict[str, Any],
    timeline_file: str = "timeline.csv",
) -> None:
    """report.md and its plots (every plot drawn first, then the text top to bottom);
    ``timeline_file``: where the outputs hold the timeline (named in the text)."""
    drawn = draw(out, scn, runs)
    pol = summary["policies"]
    multi = len(scn.hosts) > 1
    by_name = {r.policy: r for r in runs}
    lines = [
        f"# Sova simulation report: {scn.name}",
        "",
        scn.description.strip(),
        "",
    ]
    rows = compare_rows(summary)
    if rows:
        lines += _what_it_bought(scn, runs, pol, rows, multi, drawn.has_holders)
    lines += _policies_side_by_side(scn, pol, by_name, timeline_file)
    lines += ["", *migrations_table(pol)]
    lines += ["", *decisions_table(scn, runs, drawn.moves)]
    if scn.paper.vf_holders:
        lines += _paper_vf_holders(scn, pol)
    lines += _classifications(scn, pol)
    table = paper_values_table(scn, pol)
    if table:
        lines += ["", f"## {scn.paper.source or 'The paper'} beside ours", ""] + table + [""]
    if scn.paper.note:
        lines += ["", scn.paper.note.strip(), ""]
    lines += ["", "## Plots", ""]
    if not rows:
        if drawn.has_holders:
            lines += ["![VF holders](vf_holders.png)", ""]
        if multi:
            lines += ["![hosts](hosts.png)", ""]
    if not drawn.has_holders:
        lines += ["No VM held a VF in this run (no VF plot).", ""]
    if drawn.has_holding:
        lines += ["![VF holding time against demand](vf_holding.png)", ""]
    for name, label in drawn.metric_pngs:
        lines += [f"![{label}]({name})", ""]
    lines += _per_vm(scn, pol, by_name)
    (out / "report.md").write_text("\n".join(lines) + "\n")
    writer.write_plot_index(out, drawn.plots)


def _what_it_bought(
    scn: Scenario,
    runs: Sequence[PolicyRun],
    pol: dict[str, Any],
    rows: list[tuple[str, str, str]],
    multi: bool,
    has_holders: bool,
) -> list[str]:
    """The report's opening: the main policy against its baseline, and what it did."""
    _, base, mname = rows[0]
    lines = [
        f"## What {mname} did, and what it bought over {base}",
        "",
        f"| | {base} | {mname} |",
        "|---|---:|---:|",
        *[f"| {what} | {b} | {m} |" for what, b, m in rows[1:]],
        "",
    ]
    mrun = next(r for r in runs if r.policy == mname)
    lines += [*_did(scn, mrun, pol[mname]), ""]
    if multi:
        lines += ["![hosts](hosts.png)", ""]
    if has_holders:
        lines += ["![VF holders](vf_holders.png)", ""]
    return lines


def _policies_side_by_side(
    scn: Scenario, pol: dict[str, Any], by_name: dict[str, PolicyRun], timeline_file: str
) -> list[str]:
    timeline = (
        "`timeline.csv` (one row per period and VM)"
        if timeline_file == "timeline.csv"
        else f"`{timeline_file}/` (one row per period and VM, a numpy `.npy` file per column; "
        "`columns.json` names the text columns' codes)"
    )
    lines = [
        f"Seed {scn.seed}, {scn.duration / 60:g} simulated minutes at {scn.tick:g} s ticks, "
        f"controller period {scn.controller.period:g} s, hardware profile `{scn.profile.name}`.",
        "",
        f"Files: {timeline}, `events.csv` (VF attach/detach, "
        "tier changes, migrations, the manager's hotspot decisions, failures), `summary.json` "
        "(the figures below), `plots.json` (what each plot draws).",
        "",
        "## Policies side by side",
        "",
        "| policy | throughput (Mbit/s) | link utilisation | mean host CPU | mean response (ms) "
        "| p99 (ms) | guarantee met | migrations | VF changes | failed actions |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in pol.items():
        cpu = host_cpu(by_name[name]) if name in by_name else None
        lines.append(
            f"| {name} | {s['throughput_mbps']:.1f} | {s['link_utilization']:.3f} | "
            f"{fmt_num(cpu)} | "
            f"{fmt_num(s['mean_response_ms'])} | {fmt_num(s['p99_response_ms'])} | "
            f"{fmt_num(s['guarantee_met_fraction'])} | {s['migrations']} | "
            f"{s['vf_changes']} | {s['failed_actions']} |"
        )
    tps = [s["throughput_mbps"] for s in pol.values()]
    if len(tps) > 1 and max(tps) - min(tps) <= EQUAL * max(max(tps), 1e-9):
        lines += [
            "",
            "Throughput is the same under every policy (within 1 %): the load fits either "
            "way, and the policies differ in what it costs — host CPU and response time above.",
        ]
    return lines


def _paper_vf_holders(scn: Scenario, pol: dict[str, Any]) -> list[str]:
    specs = {p.name: p for p in scn.policy_specs}
    lines = [
        "",
        f"## VF holders: {scn.paper.source or 'paper'} beside ours",
        "",
        "Ours = every distinct set of VF holders seen at the controller periods inside the "
        "range (one set means the holders were stable). The table is a VF scheduler's; "
        "baselines (no VFs, or VFs handed out once) are listed for reference, not judged.",
        "",
    ]
    for name, s in pol.items():
        if name == "default":
            continue
        spec = specs.get(name)
        baseline = spec is not None and is_baseline(spec)
        lines += [
            f"### {name}" + (" (baseline)" if baseline else ""),
            "",
            "| time range | paper | ours | match |",
            "|---|---|---|---|",
        ]
        for m in s["paper_vf_holders"]:
            ours = "; ".join(", ".join(h) or "(none)" for h in m["observed"])
            verdict = "–" if baseline else mark(m["match"])
            lines.append(f"| {m['label']} | {', '.join(m['paper'])} | {ours} | {verdict} |")
        lines.append("")
    return lines


def _classifications(scn: Scenario, pol: dict[str, Any]) -> list[str]:
    lines: list[str] = []
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
    return lines


def _per_vm(scn: Scenario, pol: dict[str, Any], by_name: dict[str, PolicyRun]) -> list[str]:
    from sova.sim import fleet

    lines = [
        "## Per VM",
        "",
        "| policy | VM | throughput (Mbit/s) | time on VF | VF on host | mean CPU |",
        "|---|---|---:|---:|---|---:|",
    ]
    big = fleet.aggregates_vms(scn)
    for name, s in pol.items():
        where = vf_hosts(by_name[name]) if name in by_name else {}
        per_vm = list(s["per_vm"].items())
        if big:
            # a fleet's table: the busiest VMs; every VM is in summary.json
            per_vm = sorted(per_vm, key=lambda kv: -kv[1]["throughput_mbps"])[:TABLE_VMS]
        for vm, v in per_vm:
            lines.append(
                f"| {name} | {vm} | {v['throughput_mbps']:.1f} | {v['vf_share']:.0%} | "
                f"{' then '.join(where.get(vm, [])) or '–'} | {v['mean_cpu_usage']:.2f} |"
            )
    if big:
        lines += [
            "",
            f"The {TABLE_VMS} VMs with the most traffic per policy; every VM is in "
            "`summary.json` (`per_vm`).",
        ]
    return lines


# --------------------------------------------------------------------------- paper values


def moves_between(policy_summary: dict[str, Any], window: str) -> str | None:
    """The migrations started in ``window`` ("START-END" in seconds), as the report shows
    them: a stage's outcome, not a run's total."""
    log = policy_summary.get("migration_log")
    if log is None:
        return None
    lo, hi = (float(x) for x in window.split("-", 1))
    moves = [m for m in log if lo <= float(m["start_s"]) < hi]
    if not moves:
        return "no migration"
    return "; ".join(
        f"{m['vm']} {m['src']} → {m['dst']} at {float(m['start_s']):.0f} s" for m in moves
    )


def metric_value(policy_summary: dict[str, Any], metric: str) -> Any:
    """A summary figure by path ("per_vm.VM2.throughput_mbps"), or a stage's migrations
    ("moves:200-400")."""
    if metric.startswith("moves:"):
        return moves_between(policy_summary, metric.removeprefix("moves:"))
    node: Any = policy_summary
    for part in metric.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def fmt_num(v: Any) -> str:
    """A figure as report.md's tables show it (– for none)."""
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
            f"| {v.label} | {v.policy} | {fmt_num(v.value)} | {fmt_num(ours)} | {v.claim} |"
        )
    return lines
