"""Write measured per-VM series as a trace-replay scenario: a YAML and the CSV it replays.

The CSV has ``time_s`` (seconds from the window's start, one row per step), one column of
network demand in Mbit/s per VM (named as the VM) and, where the source measured CPU, one
column ``<vm>.cpu`` with the share of the VM's vCPUs busy (0..1). The simulator holds a
row's value until the next row, so a row at ``time_s`` is the mean over the step that
starts there; sources resample onto that grid by holding each VM's last sample.
"""

from __future__ import annotations

import bisect
import csv
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CPU_SUFFIX = ".cpu"
DEFAULT_COMPARE = ("default", "dsr-iov", "sova")


class TraceError(ValueError):
    """Bad input, as one line naming the file, the line, the column and the value."""


@dataclass
class VMSeries:
    """One VM's measured samples: absolute times (s, ascending) and values at them."""

    name: str
    t: list[float]
    net_mbps: list[float]
    cpu: list[float] | None = None  # busy share of the VM's vCPUs, 0..1
    vcpus: int | None = None
    memory: int | None = None  # bytes
    host: str | None = None  # where the source says the VM ran


@dataclass
class HostPlan:
    """A host of the written scenario and the NIC it has."""

    name: str
    cores: int = 64
    memory: int = 512 * 2**30
    capacity: float = 10e9  # bit/s
    vf_pool: int = 2
    nic: str = "pf0"


@dataclass
class Written:
    """What :func:`write_replay` wrote, for the command's summary line."""

    scenario: Path
    trace: Path
    rows: int
    step: float
    vms: int
    hosts: int
    offered_mbps: float  # mean over the window of the fleet's summed demand


def median_step(series: Sequence[VMSeries]) -> float:
    """The sources' sampling interval: the median gap between a VM's consecutive samples."""
    gaps = [b - a for s in series for a, b in zip(s.t, s.t[1:], strict=False) if b > a]
    if not gaps:
        raise TraceError("cannot tell the sampling step: no VM has two samples; give --step")
    return float(statistics.median(gaps))


def held(t: list[float], values: list[float], grid: list[float]) -> list[float]:
    """The last sample at or before each grid time (0 before the first sample)."""
    out = []
    for g in grid:
        k = bisect.bisect_right(t, g + 1e-9) - 1
        out.append(values[k] if k >= 0 else 0.0)
    return out


def place_round_robin(vms: Sequence[str], hosts: Sequence[HostPlan]) -> dict[str, str]:
    """VM -> host, dealt in order like cards, so every host gets its share."""
    return {vm: hosts[i % len(hosts)].name for i, vm in enumerate(vms)}


def read_placement(path: Path) -> dict[str, str]:
    """A placement file: CSV lines ``vm,host`` (a header line ``vm,host`` is allowed)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read the placement file: {exc}") from None
    out: dict[str, str] = {}
    for n, row in enumerate(csv.reader(text.splitlines()), start=1):
        cells = [c.strip() for c in row]
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        if n == 1 and [c.lower() for c in cells] == ["vm", "host"]:
            continue
        if len(cells) != 2 or not all(cells):
            raise TraceError(f"{path}:{n}: needs 'vm,host', got {','.join(row)!r}")
        if cells[0] in out:
            raise TraceError(f"{path}:{n}: VM {cells[0]!r} is placed twice")
        out[cells[0]] = cells[1]
    return out


def write_replay(
    out: Path,
    series: Sequence[VMSeries],
    hosts: Sequence[HostPlan],
    placement: dict[str, str],
    *,
    step: float,
    start: float | None = None,
    end: float | None = None,
    tick: float | None = None,
    period: float = 10.0,
    compare: Sequence[str] = DEFAULT_COMPARE,
    name: str | None = None,
    description: str = "",
    default_vcpus: int = 2,
    default_memory: int = 4 * 2**30,
) -> Written:
    """Write ``out`` (the scenario YAML) and ``<out stem>.csv`` beside it.

    ``start``/``end`` bound the window (default: the first and last sample of any VM);
    ``placement`` maps every VM to one of ``hosts``.
    """
    _check_replay(series, hosts, placement, step)
    names = [s.name for s in series]
    t0 = min(s.t[0] for s in series if s.t) if start is None else start
    t1 = max(s.t[-1] for s in series if s.t) if end is None else end
    rows = int(math.floor((t1 - t0) / step + 1e-9)) + (1 if end is None else 0)
    if rows < 1:
        raise TraceError(f"the window holds no step of {step:g} s")
    out.parent.mkdir(parents=True, exist_ok=True)
    trace = out.with_suffix(".csv")
    columns = _write_trace(trace, series, [t0 + k * step for k in range(rows)], step)
    duration = rows * step
    tick = min(5.0, step) if tick is None else tick
    data = _replay_document(
        series,
        hosts,
        {hp.name: [vm for vm in names if placement[vm] == hp.name] for hp in hosts},
        trace.name,
        name=name or out.stem,
        description=description,
        duration=duration,
        tick=tick,
        period=period,
        compare=compare,
        default_vcpus=default_vcpus,
        default_memory=default_memory,
    )
    body = yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True)
    out.write_text(
        "# Written by Sova from measured per-VM series: network demand in Mbit/s (rx + tx\n"
        f"# unless the command said otherwise), {rows} rows of {step:g} s in {trace.name}.\n"
        + body,
        encoding="utf-8",
    )
    offered = sum(sum(col) for col in columns[: len(series)]) / rows
    return Written(out, trace, rows, step, len(series), len(hosts), offered)


def _check_replay(
    series: Sequence[VMSeries], hosts: Sequence[HostPlan], placement: dict[str, str], step: float
) -> None:
    """What would make the scenario invalid, refused before anything is written: no
    series, a bad step, a VM name empty, reserved, repeated or clashing with a CPU
    column, a VM on no host of the scenario."""
    if not series:
        raise TraceError("no VM series to write")
    if not math.isfinite(step) or step <= 0:
        raise TraceError(f"step must be > 0 s, got {step!r}")
    seen: set[str] = set()
    for s in series:
        if not s.name or s.name == "time_s" or s.name in seen:
            raise TraceError(f"VM name {s.name!r} is empty, reserved or repeated")
        seen.add(s.name)
    for s in series:
        if s.name.endswith(CPU_SUFFIX) and s.name[: -len(CPU_SUFFIX)] in seen:
            raise TraceError(f"VM name {s.name!r} clashes with the CPU column of another VM")
    by_host = {h.name: h for h in hosts}
    for vm in (s.name for s in series):
        h = placement.get(vm)
        if h is None:
            raise TraceError(f"VM {vm!r} is on no host (the placement does not list it)")
        if h not in by_host:
            raise TraceError(f"VM {vm!r} is placed on {h!r}, which is not a host of the scenario")


def _write_trace(
    trace: Path, series: Sequence[VMSeries], grid: list[float], step: float
) -> list[list[float]]:
    """The trace CSV: each VM's network column, then the CPU columns of those that have
    one, held on ``grid``; returns the columns written."""
    header = ["time_s"]
    columns: list[list[float]] = []
    for s in series:
        header.append(s.name)
        columns.append(held(s.t, s.net_mbps, grid))
    for s in series:
        if s.cpu is not None:
            header.append(s.name + CPU_SUFFIX)
            columns.append([min(max(c, 0.0), 1.0) for c in held(s.t, s.cpu, grid)])
    with trace.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        for k in range(len(grid)):
            w.writerow([_num(k * step)] + [_num(col[k]) for col in columns])
    return columns


def _replay_document(
    series: Sequence[VMSeries],
    hosts: Sequence[HostPlan],
    on_host: dict[str, list[str]],
    trace_name: str,
    *,
    name: str,
    description: str,
    duration: float,
    tick: float,
    period: float,
    compare: Sequence[str],
    default_vcpus: int,
    default_memory: int,
) -> dict[str, Any]:
    """The scenario YAML's content: the hosts with their VMs, every VM replaying its
    columns of the trace from t = 0."""
    return {
        "name": name,
        "description": description,
        "seed": 1,
        "duration": _num(duration),
        "tick": _num(tick),
        "hosts": [
            {
                "name": h.name,
                "cores": h.cores,
                "memory": h.memory,
                "nic": {"name": h.nic, "capacity": _num(h.capacity), "vf_pool": h.vf_pool},
                "vms": on_host[h.name],
            }
            for h in hosts
        ],
        "vms": [
            {
                "name": s.name,
                "vcpus": s.vcpus or default_vcpus,
                "memory": s.memory or default_memory,
            }
            for s in series
        ],
        "workload": [
            {
                "at": 0,
                "vms": {
                    s.name: {"kind": "trace", "trace": trace_name, "column": s.name}
                    | ({"cpu_column": s.name + CPU_SUFFIX} if s.cpu is not None else {})
                    for s in series
                },
            }
        ],
        "controller": {"period": _num(period)},
        "compare": list(compare),
    }


def _num(x: float) -> float | int:
    """A number as YAML/CSV should print it: integers without '.0', others as repr."""
    if float(x).is_integer() and abs(x) < 2**53:
        return int(x)
    return float(f"{x:.6g}") if abs(x) >= 1e-3 or x == 0 else float(x)
