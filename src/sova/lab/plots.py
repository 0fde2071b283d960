"""PNG plots of a lab run: fast-path holders over time coloured by host, each guest's rates
and CPU, and (hotspot-migration) each hypervisor's utilisation against alpha.

Every plot says what it drew (series -> points); one with nothing to draw is not written,
and ``plots.json`` lists what was (an empty frame says nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from sova.record import TimelineRow
from sova.writer import PNG_META, HolderPanel, Plotted, plot_vf_holders


def holder_spans(
    rows: Sequence[TimelineRow], step_s: float = 1.0
) -> tuple[dict[str, list[tuple[float, float]]], dict[str, list[str]]]:
    """Per guest, the (start, width) stretches it held a fast NIC, and the host of each."""
    spans: dict[str, list[tuple[float, float]]] = {}
    hosts: dict[str, list[str]] = {}
    open_: dict[str, tuple[float, float, str]] = {}  # vm -> (start, last, host)
    for r in sorted(rows, key=lambda r: (r.time_s, r.vm)):
        cur = open_.get(r.vm)
        held = r.nic == "vf"
        if cur is not None and (not held or r.host != cur[2] or r.time_s - cur[1] > 2.5 * step_s):
            spans.setdefault(r.vm, []).append((cur[0], cur[1] - cur[0] + step_s))
            hosts.setdefault(r.vm, []).append(cur[2])
            del open_[r.vm]
            cur = None
        if held:
            open_[r.vm] = (cur[0] if cur else r.time_s, r.time_s, r.host)
    for vm, (start, last, host) in open_.items():
        spans.setdefault(vm, []).append((start, last - start + step_s))
        hosts.setdefault(vm, []).append(host)
    return spans, hosts


def plot_holders(
    out: Path,
    rows: Sequence[TimelineRow],
    guests: Sequence[str],
    title: str,
    expected: Sequence[tuple[Sequence[str], float, float]] = (),
    marks: Sequence[float] = (),
) -> Plotted:
    spans, hosts = holder_spans(rows)
    if not spans:
        return {}
    panel = HolderPanel(
        "fast-path holders (bar colour: the host it was held on)", spans, marks, hosts
    )
    return plot_vf_holders(out, list(guests), [panel], expected=expected, title=title)


def plot_rates(
    out: Path,
    rows: Sequence[TimelineRow],
    guests: Sequence[str],
    title: str,
    marks: Sequence[float] = (),
) -> Plotted:
    """Each guest's sent and received Mbit/s, and its vCPU use, over time."""
    plotted: Plotted = {}
    fig, (ax_net, ax_cpu) = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True)
    for vm in guests:
        mine = sorted((r for r in rows if r.vm == vm), key=lambda r: r.time_s)
        if not mine:
            continue
        t = [r.time_s for r in mine]
        net = [r.tx_mbps + r.rx_mbps for r in mine]
        (line,) = ax_net.plot(t, net, lw=1.0, label=f"{vm} tx+rx")
        ax_cpu.plot(t, [r.cpu_usage for r in mine], lw=1.0, color=line.get_color(), label=vm)
        plotted[f"{vm} Mbit/s"] = len(mine)
        plotted[f"{vm} cpu"] = len(mine)
    if not plotted:
        plt.close(fig)
        return {}
    for ax in (ax_net, ax_cpu):
        for m in marks:
            ax.axvline(m, color="grey", lw=0.8, ls="--")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    ax_net.set_ylabel("Mbit/s")
    ax_cpu.set_ylabel("vCPU busy")
    ax_cpu.set_ylim(0, 1.05)
    ax_cpu.set_xlabel("time (s)")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=90, metadata=PNG_META)
    plt.close(fig)
    return plotted


def plot_hosts(
    out: Path,
    hosts_rows: Sequence[dict[str, Any]],
    alpha: float,
    title: str,
    marks: Sequence[float] = (),
) -> Plotted:
    """Each hypervisor's CPU utilisation as its agent computes it, against alpha."""
    plotted: Plotted = {}
    fig, ax = plt.subplots(figsize=(10, 3.2))
    for host in sorted({r["host"] for r in hosts_rows}):
        mine = [r for r in hosts_rows if r["host"] == host]
        ax.plot([r["time_s"] for r in mine], [r["cpu"] for r in mine], lw=1.2, label=f"{host} cpu")
        plotted[f"{host} cpu"] = len(mine)
    if not plotted:
        plt.close(fig)
        return {}
    ax.axhline(alpha, color="tab:red", lw=1, ls=":", label=f"alpha {alpha:g}")
    for m in marks:
        ax.axvline(m, color="grey", lw=0.8, ls="--")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("utilisation")
    ax.set_xlabel("time (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=90, metadata=PNG_META)
    plt.close(fig)
    return plotted


def plot_goodput(
    out: Path,
    goodput: Sequence[dict[str, Any]],
    minimums: dict[str, float],
    link_mbit: float,
    title: str,
    marks: Sequence[float] = (),
) -> Plotted:
    """Each guest's own iperf3 throughput per second, its minimum, and the shared link."""
    plotted: Plotted = {}
    fig, ax = plt.subplots(figsize=(10, 3.6))
    for vm in sorted({r["vm"] for r in goodput}):
        mine = [r for r in goodput if r["vm"] == vm]
        (line,) = ax.plot([r["time_s"] for r in mine], [r["mbps"] for r in mine], lw=1.0, label=vm)
        plotted[f"{vm} Mbit/s"] = len(mine)
        if vm in minimums:
            ax.axhline(minimums[vm], color=line.get_color(), lw=1, ls=":", label=f"{vm} minimum")
    if not plotted:
        plt.close(fig)
        return {}
    ax.axhline(link_mbit, color="black", lw=0.8, ls="--", label="shared link")
    for m in marks:
        ax.axvline(m, color="grey", lw=0.8, ls="--")
    ax.set_ylabel("Mbit/s (iperf3 in the guest)")
    ax.set_xlabel("time (s)")
    ax.set_ylim(0, link_mbit * 1.3)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right", ncol=3)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=90, metadata=PNG_META)
    plt.close(fig)
    return plotted
