"""Readers of per-VM time series as public trace archives publish them.

* ``bitbrains``: the GWA-T-12 Bitbrains archive (fastStorage and Rnd): one file per VM,
  named by the VM's number, cells separated by ``;`` and a tab, a header of eleven
  columns (timestamp, CPU cores, CPU capacity and usage, memory, disk and network
  throughput). Columns are found by their header text, so an export with the columns in
  another order reads the same.
* ``long``: one CSV for the whole fleet, one row per VM and sample, columns ``timestamp``,
  ``vm``, ``rx`` and/or ``tx``, optionally ``cpu`` and ``host``; the units are named by the
  caller (:class:`LongUnits`).

Every bad cell is refused as one line: ``FILE:LINE: column NAME: VALUE ...``.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sova.traces.replay import TraceError, VMSeries

# Bitbrains' throughputs and memory come from VMware's counters, which count a KB as
# 1,024 bytes.
_KB = 1024
_BITBRAINS = {
    "time": "timestamp [ms]",
    "cores": "cpu cores",
    "cpu_pct": "cpu usage [%]",
    "memory": "memory capacity provisioned [kb]",
    "rx": "network received throughput [kb/s]",
    "tx": "network transmitted throughput [kb/s]",
}
_BITBRAINS_NEEDED = ("time", "cpu_pct", "rx", "tx")
# The archive's header says milliseconds, but its published files count seconds since
# 1970 (2013 is ~1.37e9). A value below 1e11 (1973 in ms, 5138 AD in s) is read as seconds.
_SECONDS_BELOW = 1e11
DIRECTIONS = ("sum", "rx", "tx")


def _norm(header: str) -> str:
    return re.sub(r"\s+", " ", header.strip().lower())


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text (byte offset {exc.start})") from None


def _number(path: Path, line: int, column: str, cell: str, *, low: float = 0.0) -> float:
    try:
        x = float(cell)
    except ValueError:
        raise TraceError(f"{path}:{line}: column {column!r}: {cell!r} is not a number") from None
    if not math.isfinite(x) or x < low:
        raise TraceError(
            f"{path}:{line}: column {column!r}: {cell!r} must be finite and >= {low:g}"
        )
    return x


def _mbps(rx: float, tx: float, direction: str) -> float:
    return {"sum": rx + tx, "rx": rx, "tx": tx}[direction]


def bitbrains_vm_name(path: Path) -> str:
    """The archive names files by VM number (``17.csv``); the VM is ``vm17``."""
    stem = path.stem
    return f"vm{stem}" if stem.isdigit() else stem


def read_bitbrains(paths: Iterable[Path], direction: str = "sum") -> list[VMSeries]:
    """Every file as one VM, in the order given (numeric file names sort by number)."""
    files = sorted(
        paths, key=lambda p: (not p.stem.isdigit(), int(p.stem) if p.stem.isdigit() else 0, p.name)
    )
    if not files:
        raise TraceError("no Bitbrains files given")
    return [_read_bitbrains_file(p, direction) for p in files]


def _read_bitbrains_file(path: Path, direction: str) -> VMSeries:
    lines = _read_text(path).splitlines()
    if not lines:
        raise TraceError(f"{path}:1: empty file; a Bitbrains file starts with its header")
    header = [c for c in (_norm(h) for h in lines[0].split(";"))]
    index: dict[str, int] = {}
    for key, text in _BITBRAINS.items():
        if text in header:
            index[key] = header.index(text)
    missing = [_BITBRAINS[k] for k in _BITBRAINS_NEEDED if k not in index]
    if missing:
        raise TraceError(
            f"{path}:1: header lacks column(s) {missing} (has {[h for h in header if h]})"
        )
    names = [h.strip() for h in lines[0].split(";")]
    t: list[float] = []
    net: list[float] = []
    cpu: list[float] = []
    cores: int | None = None
    memory: int | None = None
    keys = [k for k in ("time", "rx", "tx", "cpu_pct", "cores", "memory") if k in index]
    at = [index[k] for k in keys]
    width = len(header)
    for n, raw in enumerate(lines[1:], start=2):
        cells = raw.split(";")
        if len(cells) != width:
            if not raw.strip():
                continue
            raise TraceError(
                f"{path}:{n}: {len(cells)} cells, the header has {width}: {raw.strip()!r}"
            )
        # float() takes the cells' surrounding tabs; a cell it refuses, or a value out of
        # range, goes to _number for the one-line error naming it
        try:
            v = [float(cells[i]) for i in at]
            ok = all(0.0 <= x < math.inf for x in v)
        except ValueError:
            ok = False
        if not ok:
            for k in keys:
                _number(path, n, names[index[k]], cells[index[k]].strip())
        got = dict(zip(keys, v, strict=True))
        ts = got["time"]
        ts = ts if ts < _SECONDS_BELOW else ts / 1000.0
        if t and ts < t[-1]:
            raise TraceError(
                f"{path}:{n}: column {names[index['time']]!r}: "
                f"{cells[index['time']].strip()!r} is earlier than the line before"
            )
        if t and ts == t[-1]:
            continue  # a repeated sample adds nothing to a held series
        t.append(ts)
        net.append(_mbps(got["rx"], got["tx"], direction) * _KB * 8 / 1e6)
        # usage above 100 % (the archive has some) is every vCPU busy
        cpu.append(min(got["cpu_pct"] / 100.0, 1.0))
        if "cores" in got:
            cores = max(cores or 0, int(got["cores"]))
        if "memory" in got:
            memory = max(memory or 0, int(got["memory"] * _KB))
    if not t:
        raise TraceError(f"{path}:2: no samples after the header")
    return VMSeries(
        bitbrains_vm_name(path), t, net, cpu, vcpus=cores or None, memory=memory or None
    )


# Rates in a long-format file, per unit name: the factor to Mbit/s.
RATE_UNITS = {
    "bit/s": 1e-6,
    "kbit/s": 1e-3,
    "Mbit/s": 1.0,
    "Gbit/s": 1e3,
    "B/s": 8e-6,
    "kB/s": 8e-3,
    "KiB/s": 8 * 1024 / 1e6,
    "MB/s": 8.0,
    "MiB/s": 8 * 1024**2 / 1e6,
}
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "iso8601": 0.0}
CPU_UNITS = {"fraction": 1.0, "percent": 0.01}


@dataclass(frozen=True)
class LongUnits:
    """The units of a long-format file's cells: its time, rate and CPU columns."""

    time: str = "s"  # seconds since an epoch, "ms", or ISO 8601 date-times
    rate: str = "Mbit/s"
    cpu: str = "fraction"  # share of the VM's vCPUs (0..1), or "percent"

    def __post_init__(self) -> None:
        for what, value, table in (
            ("time", self.time, TIME_UNITS),
            ("rate", self.rate, RATE_UNITS),
            ("cpu", self.cpu, CPU_UNITS),
        ):
            if value not in table:
                raise TraceError(f"{what} unit {value!r} is not one of {', '.join(table)}")


def read_long(path: Path, units: LongUnits = LongUnits(), direction: str = "sum") -> list[VMSeries]:
    """One VM per distinct ``vm`` cell, in order of first appearance."""
    text = _read_text(path)
    rows = csv.reader(text.splitlines())
    raw_header = next(rows, None)
    if raw_header is None:
        raise TraceError(f"{path}:1: empty file; needs a header timestamp,vm,rx,tx[,cpu][,host]")
    header = [_norm(h) for h in raw_header]
    known = {"timestamp", "vm", "rx", "tx", "cpu", "host"}
    unknown = [h for h in header if h not in known]
    if unknown:
        raise TraceError(
            f"{path}:1: unknown column {unknown[0]!r}; the columns are timestamp, vm, rx, tx, "
            "cpu and host (give units with the options, not in the header)"
        )
    needed = ["timestamp", "vm"] + ([] if direction == "sum" else [direction])
    if direction == "sum" and "rx" not in header and "tx" not in header:
        needed.append("rx or tx")
    missing = [c for c in needed if c not in header]
    if missing:
        raise TraceError(f"{path}:1: header lacks column(s) {missing} (has {header})")
    col = {h: i for i, h in enumerate(header)}
    factor = RATE_UNITS[units.rate]
    by_vm: dict[str, VMSeries] = {}
    for n, row in enumerate(rows, start=2):
        if not row or not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise TraceError(f"{path}:{n}: {len(row)} cells, the header has {len(header)}")
        vm = row[col["vm"]].strip()
        if not vm:
            raise TraceError(f"{path}:{n}: column 'vm': empty")
        ts = _timestamp(path, n, row[col["timestamp"]].strip(), units.time)
        rx = _number(path, n, "rx", row[col["rx"]].strip()) if "rx" in col else 0.0
        tx = _number(path, n, "tx", row[col["tx"]].strip()) if "tx" in col else 0.0
        s = by_vm.get(vm)
        if s is None:
            s = by_vm[vm] = VMSeries(vm, [], [], [] if "cpu" in col else None)
        if s.t and ts < s.t[-1]:
            raise TraceError(
                f"{path}:{n}: column 'timestamp': {row[col['timestamp']].strip()!r} is earlier "
                f"than VM {vm!r}'s sample before it"
            )
        if s.t and ts == s.t[-1]:
            raise TraceError(
                f"{path}:{n}: column 'timestamp': VM {vm!r} has two samples at "
                f"{row[col['timestamp']].strip()!r}"
            )
        s.t.append(ts)
        s.net_mbps.append(_mbps(rx, tx, direction) * factor)
        if s.cpu is not None:
            c = _number(path, n, "cpu", row[col["cpu"]].strip()) * CPU_UNITS[units.cpu]
            if c > 1.0 + 1e-9:
                raise TraceError(
                    f"{path}:{n}: column 'cpu': {row[col['cpu']].strip()!r} is above all of "
                    f"the VM's vCPUs (cpu unit: {units.cpu})"
                )
            s.cpu.append(c)
        if "host" in col:
            host = row[col["host"]].strip()
            if s.host is None and host:
                s.host = host
    if not by_vm:
        raise TraceError(f"{path}:2: no samples after the header")
    return list(by_vm.values())


def _timestamp(path: Path, line: int, cell: str, unit: str) -> float:
    if unit == "iso8601":
        try:
            return datetime.fromisoformat(cell.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise TraceError(
                f"{path}:{line}: column 'timestamp': {cell!r} is not an ISO 8601 date-time"
            ) from None
    return _number(path, line, "timestamp", cell, low=-math.inf) * TIME_UNITS[unit]


def placement_from_series(series: Sequence[VMSeries]) -> dict[str, str] | None:
    """VM -> host where every VM's source named its host, else None."""
    if series and all(s.host for s in series):
        return {s.name: s.host for s in series if s.host}
    return None
