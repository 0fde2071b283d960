"""The files a scenario names, read with bounds: a scenario, profile or trace file is a
regular file of a sane size in UTF-8, and a trace CSV is checked whole, as the simulator
will read it, before anything runs."""

from __future__ import annotations

import csv
import hashlib
import io
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path

MAX_FILE_BYTES = 64 * 2**20  # a scenario, profile or trace file larger than this is refused


def _read_bytes(path: Path, what: str) -> bytes:
    """The file's bytes, if it is a regular file of a sane size.

    A FIFO would block ``validate`` forever and /dev/zero would fill the memory, so only
    regular files are opened (O_NONBLOCK: opening a FIFO must not wait for a writer).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ValueError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)  # fdopen would raise IsADirectoryError on a folder
        raise ValueError(f"{what} {str(path)!r} is not a regular file")
    with os.fdopen(fd, "rb") as fh:
        if st.st_size > MAX_FILE_BYTES:
            raise ValueError(
                f"{what} {str(path)!r} is {st.st_size} B, above the limit {MAX_FILE_BYTES} B"
            )
        return fh.read(MAX_FILE_BYTES + 1)


def _decode(data: bytes, path: Path, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{what} {str(path)!r} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start})"
        ) from None


@dataclass(frozen=True)
class _TraceSummary:
    """What checking any column of one trace CSV needs, from one pass over it: a scenario
    of N trace VMs sharing a CSV parsed it N times (200 VMs of an imported day: 31 s,
    benchmarks/trace_import.py)."""

    header: list[str]
    rows: int
    # the first line the reader cannot take: (line, "cells") for a cell count or a
    # non-number, (line, "order") for a non-finite number or time_s going back
    broken: tuple[int, str] | None
    negative: dict[int, int]  # column -> first line where it is < 0
    outside_unit: dict[int, tuple[int, str]]  # column -> first line (and cell) outside [0, 1]


# Summaries by the file's content (its BLAKE2 digest, not its mtime: a file rewritten within
# the clock's granularity must not pass on its old summary); a few files at a time.
_SUMMARIES: dict[tuple[str, bytes], _TraceSummary] = {}


def _trace_summary(trace: str) -> _TraceSummary:
    path = Path(trace)
    data = _read_bytes(path, "trace")
    key = (trace, hashlib.blake2b(data, digest_size=16).digest())
    found = _SUMMARIES.get(key)
    if found is None:
        if len(_SUMMARIES) >= 16:
            _SUMMARIES.clear()
        found = _SUMMARIES[key] = _summarize(trace, _decode(data, path, "trace"))
    return found


def _summarize(trace: str, text: str) -> _TraceSummary:
    rows = csv.reader(io.StringIO(text))
    header = next(rows, [])
    i_t = header.index("time_s") if "time_s" in header else None
    negative: dict[int, int] = {}
    outside: dict[int, tuple[int, str]] = {}
    broken: tuple[int, str] | None = None
    last, n_rows = -math.inf, 0
    for n, row in enumerate(rows, start=2):
        if not row:
            continue  # the simulator's reader skips blank lines too
        try:
            if len(row) != len(header):
                raise ValueError
            cells = [float(x) for x in row]
        except ValueError:
            broken = (n, "cells")
            break
        t = cells[i_t] if i_t is not None else last
        if not all(math.isfinite(x) for x in cells) or t < last:
            broken = (n, "order")
            break
        for i, x in enumerate(cells):
            if x < 0 and i not in negative:
                negative[i] = n
            if not 0.0 <= x <= 1.0 and i not in outside:
                outside[i] = (n, row[i])
        last, n_rows = t, n_rows + 1
    return _TraceSummary(header, n_rows, broken, negative, outside)


def _check_trace(trace: str, column: str, cpu_column: str | None = None) -> None:
    """The whole CSV as the simulator will read it: a header, then a number in every cell;
    the demand column >= 0, the CPU column (if any) a busy share in [0, 1]."""
    summary = _trace_summary(trace)
    header = summary.header
    wanted = [c for c in ("time_s", column, cpu_column) if c is not None]
    if any(c not in header for c in wanted):
        need = " and ".join(repr(c) if c != "time_s" else c for c in wanted)
        raise ValueError(f"trace {trace!r} needs columns {need}, has {header}")
    i_v = header.index(column)
    # the first line with an error that concerns these columns, as a reader going down
    # the file would meet it (on one line: cells, then order and sign, then the CPU share)
    found: list[tuple[int, int, str]] = []
    if summary.broken is not None:
        line, kind = summary.broken
        found.append((line, 0 if kind == "cells" else 1, kind))
    if i_v in summary.negative:
        found.append((summary.negative[i_v], 1, "order"))
    if cpu_column is not None and header.index(cpu_column) in summary.outside_unit:
        found.append((summary.outside_unit[header.index(cpu_column)][0], 2, "cpu"))
    if found:
        n, _, kind = min(found)
        if kind == "cells":
            raise ValueError(
                f"trace {trace!r} line {n}: needs {len(header)} numbers, one per column"
            )
        if kind == "order":
            raise ValueError(
                f"trace {trace!r} line {n}: needs finite numbers, time_s in order "
                f"and {column!r} >= 0"
            )
        cell = summary.outside_unit[header.index(str(cpu_column))][1]
        raise ValueError(
            f"trace {trace!r} line {n}: cpu_column {cpu_column!r} is a busy share "
            f"in [0, 1] (got {cell})"
        )
    if summary.rows == 0:
        raise ValueError(f"trace {trace!r} has no rows")
