"""A simulated run's report.md and its plots: what an operator looks at after a run.

Formatting, the VF-holders plot and the atomic write are :mod:`sova.writer`'s, shared
with the testbed's report.

Why one module over 500 lines: report.md is written top to bottom here, each section
beside the plot it embeds; the shared parts (cell format, atomic writes, the VF-holders
panel) are already in :mod:`sova.writer`.
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
from sova.sim.world import PolicyRun
from sova.writer import PNG_META, HolderPanel, Plotted, mark

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


def plot_vf_holders(path: Path, scn: Scenario, runs: Sequence[PolicyRun]) -> Plotted | None:
    """VF holders over time, coloured by the host they held the VF on; None (and no file)
    when no run had a VF holder and the paper published none: nothing to show."""
    period = scn.controller.period
    panels = []
    for run in runs:
        spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        hosts: dict[str, list[str]] = defaultdict(list)
        for r in run.timeline:
            if r.nic == "vf":
                spans[r.vm].append((r.time_s - period, period))
                hosts[r.vm].append(r.host)
        marks = [p.at for p in scn.workload if p.at > 0]
        panels.append(HolderPanel(f"policy: {run.policy}", spans, marks, hosts))
    # A run that never held a VF gets no panel (an empty frame says nothing); the title
    # names it instead.
    empty = [p.title.removeprefix("policy: ") for p in panels if writer.holder_count([p]) == 0]
    panels = [p for p in panels if writer.holder_count([p]) > 0]
    if not panels:
        return None
    title = f"{scn.name}: VF holders, coloured by host"
    if scn.paper.vf_holders:
        title += " (orange: the paper's)"
    if empty:
        title += f"\nno VF held under: {', '.join(empty)}"
    return writer.plot_vf_holders(
        path,
        [v.name for v in scn.vms],
        panels,
        expected=[(ph.vms, ph.start, ph.end) for ph in scn.paper.vf_holders],
        title=title,
        minutes=True,
    )


def plot_metric(
    path: Path, scn: Scenario, run: PolicyRun, metric: str, label: str
) -> Plotted | None:
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in run.timeline:
        v = getattr(r, metric)
        if v is not None and np.isfinite(float(v)):
            series[r.vm].append((r.time_s / 60.0, float(v)))
    if not series:
        return None
    plotted: Plotted = {}
    plt = writer.pyplot()
    fig, ax = plt.subplots(figsize=(10, 4))
    for vm in [v.name for v in scn.vms]:
        pts = series.get(vm, [])
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=vm, lw=1.2)
            plotted[vm] = len(pts)
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
    return plotted


def plot_hosts(path: Path, scn: Scenario, runs: Sequence[PolicyRun]) -> Plotted:
    """Network and CPU utilisation of every host over time, migrations shaded (Sova Fig. 5/8)."""
    plotted: Plotted = {}
    plt = writer.pyplot()
    fig, axes = plt.subplots(
        len(runs), 1, figsize=(11, 2.6 * len(runs)), squeeze=False, sharex=True
    )
    for ax, run in zip(axes[:, 0], runs, strict=True):
        st = run.stats
        t = [x / 60.0 for x in st.series_t]
        hosts = [h.name for h in scn.hosts]
        # Averaged over one control period: what the manager sees, and readable.
        k = max(1, int(round(scn.controller.period / scn.tick)))
        ticks = st.host_net.ticks
        assert ticks is not None, "a line per host is drawn only where every tick is kept"
        peak = 0.0
        for j, h in enumerate(hosts):
            series = ticks[:, j]
            # edge-padded, so the average does not dip to zero at the run's ends
            smooth = (
                np.convolve(
                    np.pad(series, (k // 2, k - 1 - k // 2), mode="edge"),
                    np.ones(k) / k,
                    mode="valid",
                )
                if series.size >= k
                else series
            )
            colour = writer.HOST_COLOURS[j % len(writer.HOST_COLOURS)]
            ax.plot(t, smooth, lw=1.4, label=f"{h} net", color=colour)
            plotted[f"{run.policy}: {h}"] = int(np.isfinite(smooth).sum())
            if smooth.size and np.isfinite(smooth).any():
                peak = max(peak, float(np.nanmax(smooth)))
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
                    (float(m["start_s"]) / 60.0, 1.01),
                    xycoords=("data", "axes fraction"),
                    fontsize=7,
                    annotation_clip=False,
                )
        # A fleet at 2 % of its links drawn on a 0-1.1 scale is flat lines at the bottom:
        # the scale follows the busiest host unless the hosts come near alpha.
        top = 1.1 if 1.25 * peak >= 0.8 * alpha else max(0.05, 1.25 * peak)
        ax.set_ylim(0, top)
        ax.set_ylabel("link utilisation")
        above = f" — α = {alpha:g} is above this scale" if top < alpha else ""
        ax.set_title(f"policy: {run.policy}{above}", fontsize=10, loc="left")
        # beside the axes, not over the lines (a legend inside covered the hosts' traffic)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("time (min)")
    fig.tight_layout()
    fig.savefig(path, dpi=90, metadata=PNG_META)
    plt.close(fig)
    return plotted


def decisions_table(scn: Scenario, runs: Sequence[PolicyRun]) -> list[str]:
    """What each policy's decisions were and what they bought: VF moves (per host-hour),
    the useless ones (sova.sim.decisions), migrations and the moved-back ones."""
    from sova.sim import decisions as dq

    ceiling = dq.virtio_ceiling_bps(scn.profile)
    freed = dq.freed_cpu_saturation(scn.profile)
    vms = [v.name for v in scn.vms]
    hours = max(scn.duration, 1e-9) / 3600.0
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
    for run in runs:
        moves = dq.attaches(run.events)
        useless = dq.useless_attaches(
            moves, dq.demand_grid(run.timeline, vms), ceiling, cpu_saturation=freed
        )
        share = f" ({len(useless) / len(moves):.0%})" if moves else ""
        migrations = sum(1 for e in run.events if e.event == "migrate_end")
        lines.append(
            f"| {run.policy} | {len(moves)} | {len(moves) / (len(scn.hosts) * hours):.1f} | "
            f"{len(useless)}{share} | {migrations} | {dq.moved_back(run.events)} |"
        )
    return lines


def plot_vf_holding(path: Path, scn: Scenario, runs: Sequence[PolicyRun]) -> Plotted | None:
    """Each VM's share of the run on a VF against its mean offered load, per policy: a VF
    policy that pays puts its VF time on the right (the VMs that send), past the virtio
    ceiling where a VF buys throughput."""
    from sova.sim import decisions as dq

    vms = [v.name for v in scn.vms]
    points = []
    for run in runs:
        grid = dq.demand_grid(run.timeline, vms)
        if not grid.times.size:
            continue
        on_vf = np.zeros(len(vms))
        texts = run.timeline.texts("vm")
        nic = run.timeline.texts("nic")
        where = {v: i for i, v in enumerate(vms)}
        vm_of = np.array([where.get(str(t), -1) for t in texts] + [-1], dtype=np.int64)
        is_vf = np.array([t == "vf" for t in nic] + [False])
        for c in run.timeline.chunks():
            i = vm_of[c.columns["vm"]]
            ok = (i >= 0) & is_vf[c.columns["nic"]]
            on_vf += np.bincount(i[ok], minlength=len(vms))
        share = on_vf / grid.times.size
        if share.any():
            points.append((run.policy, grid.offered.mean(axis=1) / 1e6, share))
    if not points:
        return None
    plt = writer.pyplot()
    fig, ax = plt.subplots(figsize=(10, 4))
    plotted: Plotted = {}
    markers = "o^sDv<>"
    for k, (policy, demand, share) in enumerate(points):
        x = np.maximum(demand, 1e-3)
        ax.scatter(x, share, s=14, alpha=0.7, marker=markers[k % len(markers)], label=policy, lw=0)
        plotted[f"{policy}: VMs (mean demand, time on VF)"] = int(x.size)
    ceiling = dq.virtio_ceiling_bps(scn.profile) / 1e6
    ax.axvline(ceiling, color="red", lw=0.8, ls=":", label=f"virtio ceiling {ceiling:,.0f}")
    ax.set_xscale("log")
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("VM's mean offered load (Mbit/s, log)")
    ax.set_ylabel("share of the run on a VF")
    ax.set_title(
        f"{scn.name}: who held the VFs — VF time against each VM's demand",
        fontsize=10,
        loc="left",
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90, metadata=PNG_META)
    plt.close(fig)
    return plotted


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
                _fmt_num(b["mean_response_ms"]),
                _fmt_num(m["mean_response_ms"]),
            )
        )
        rows.append(
            ("p99 response (ms)", _fmt_num(b["p99_response_ms"]), _fmt_num(m["p99_response_ms"]))
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
    for chunk in tl.chunks():
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
    out: Path, scn: Scenario, runs: Sequence[PolicyRun], summary: dict[str, Any]
) -> None:
    from sova.sim import fleet

    plots: dict[str, Plotted] = {}

    def keep(name: str, plotted: Plotted | None) -> bool:
        if plotted is None:
            return False
        plots[name] = plotted
        return True

    main = next((r for r in runs if r.policy in ("sova", "dsr-iov")), runs[-1])
    metrics = (
        ("throughput.png", "tx_mbps", "tx (Mbit/s)"),
        ("net_degree.png", "net_degree", "net_degree (ranking score)"),
        ("io_degree.png", "io_degree", "io_degree (I/O filter)"),
    )
    if fleet.aggregates_vms(scn):
        vms, hosts = [v.name for v in scn.vms], [h.name for h in scn.hosts]
        # every run's VF holders are drawn; the metrics for the main run only, one at a time
        grids = [fleet.grid(r, vms, hosts) for r in runs]
        has_holders = keep(
            "vf_holders.png", fleet.plot_vf_holders_fleet(out / "vf_holders.png", scn, runs, grids)
        )
        g = next(gr for r, gr in zip(runs, grids, strict=True) if r is main)
        del grids  # the other runs' grids are not drawn again
        metric_pngs = [
            (name, label)
            for name, metric, label in metrics
            if keep(name, fleet.plot_metric_fleet(out / name, scn, main, g, metric, label))
        ]
    else:
        has_holders = keep("vf_holders.png", plot_vf_holders(out / "vf_holders.png", scn, runs))
        metric_pngs = [
            (name, label)
            for name, metric, label in metrics
            if keep(name, plot_metric(out / name, scn, main, metric, label))
        ]
    multi = len(scn.hosts) > 1
    if fleet.aggregates_hosts(scn):
        keep("hosts.png", fleet.plot_hosts_fleet(out / "hosts.png", scn, runs))
    elif multi:
        keep("hosts.png", plot_hosts(out / "hosts.png", scn, runs))
    has_holding = keep("vf_holding.png", plot_vf_holding(out / "vf_holding.png", scn, runs))
    specs = {p.name: p for p in scn.policy_specs}

    pol = summary["policies"]
    lines = [
        f"# Sova simulation report: {scn.name}",
        "",
        scn.description.strip(),
        "",
    ]
    rows = compare_rows(summary)
    if rows:
        _, base, mname = rows[0]
        lines += [
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
    lines += [
        f"Seed {scn.seed}, {scn.duration / 60:g} simulated minutes at {scn.tick:g} s ticks, "
        f"controller period {scn.controller.period:g} s, hardware profile `{scn.profile.name}`.",
        "",
        "Files: `timeline.csv` (one row per period and VM), `events.csv` (VF attach/detach, "
        "tier changes, migrations, the manager's hotspot decisions, failures), `summary.json` "
        "(the figures below), `plots.json` (what each plot draws).",
        "",
        "## Policies side by side",
        "",
        "| policy | throughput (Mbit/s) | link utilisation | mean host CPU | mean response (ms) "
        "| p99 (ms) | guarantee met | migrations | VF changes | failed actions |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    by_name = {r.policy: r for r in runs}
    for name, s in pol.items():
        cpu = host_cpu(by_name[name]) if name in by_name else None
        lines.append(
            f"| {name} | {s['throughput_mbps']:.1f} | {s['link_utilization']:.3f} | "
            f"{_fmt_num(cpu)} | "
            f"{_fmt_num(s['mean_response_ms'])} | {_fmt_num(s['p99_response_ms'])} | "
            f"{_fmt_num(s['guarantee_met_fraction'])} | {s['migrations']} | "
            f"{s['vf_changes']} | {s['failed_actions']} |"
        )
    tps = [s["throughput_mbps"] for s in pol.values()]
    if len(tps) > 1 and max(tps) - min(tps) <= EQUAL * max(max(tps), 1e-9):
        lines += [
            "",
            "Throughput is the same under every policy (within 1 %): the load fits either "
            "way, and the policies differ in what it costs — host CPU and response time above.",
        ]
    lines += ["", *migrations_table(pol)]
    lines += ["", *decisions_table(scn, runs)]
    if scn.paper.vf_holders:
        lines += [
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
    lines += ["", "## Plots", ""]
    if not rows:
        if has_holders:
            lines += ["![VF holders](vf_holders.png)", ""]
        if multi:
            lines += ["![hosts](hosts.png)", ""]
    if not has_holders:
        lines += ["No VM held a VF in this run (no VF plot).", ""]
    if has_holding:
        lines += ["![VF holding time against demand](vf_holding.png)", ""]
    for name, label in metric_pngs:
        lines += [f"![{label}]({name})", ""]
    lines += [
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
    (out / "report.md").write_text("\n".join(lines) + "\n")
    writer.write_plot_index(out, plots)


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
    fig, ax = plt.subplots(figsize=(8, 4.5))
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
    fig.savefig(path, dpi=90, metadata=PNG_META)
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
            vals = [_fmt_num(metric_value(p["policies"][n], m)) for n in policies]
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
                + " | ".join(_fmt_num(cpu[n][i]) for n in policies)
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
