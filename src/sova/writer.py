"""The one report writer: how every world's output files are formatted and written.

The simulator (:mod:`sova.sim.output`) and the namespace testbed
(:mod:`sova.testbed.report`) each compute their own summary, but both write through
these functions, so a value is formatted the same way in every world's CSV and report,
a VF-holders plot looks the same, and every file set lands atomically.

Floats are written with fixed precision and plots without the PNG "Software" and date
metadata, so the same seed gives byte-identical files.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sova.record import none_mask

PNG_META = {"Software": None}
# The plots' resolution, given to the figure when it is made as well as to savefig: laid out
# (tight_layout) at the dpi it is saved at, every text's extent measured for the layout is
# the one the saved drawing reuses (matplotlib caches a text's layout per dpi); laid out at
# the default 100 and saved at 90, each was measured twice (~0.1 CPU-s of a fleet report)
PNG_DPI = 90


def fmt(value: Any) -> str:
    """A CSV cell: empty for None, floats to 4 decimals without trailing zeros.

    NaN is "nan" and infinity "inf"/"-inf" (an unbounded limit is not an unknown one).
    """
    if value.__class__ is float:  # the common case first: most cells are plain floats
        if value != value:
            return "nan"
        return f"{value:.4f}".rstrip("0").rstrip(".")
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.4f}".rstrip("0").rstrip(".")
    return str(value)


def mark(ok: bool) -> str:
    """A check's verdict in a report table: failures stand out."""
    return "yes" if ok else "**NO**"


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        # writerows over a generator: one C-level loop instead of a Python call per row
        w.writerows([fmt(v) for v in r] for r in rows)


def _digit_tables() -> tuple[np.ndarray, np.ndarray]:
    """fmt's texts of the integers 0-9999, as the column formatter looks them up.

    Integer groups (one uint32 of four bytes each, right-aligned, 0 bytes before the
    first digit): rows 0-9999 without leading zeros and 0 blank (a group left of a
    number's first digit), 10000-19999 with leading zeros (a group right of it),
    20000-29999 without, 0 as "0" (the units group of a number below 10,000).
    Decimals (one uint64 of eight bytes each, left-aligned): "" for 0, else "." and the
    four digits without trailing zeros, as fmt ends a number."""
    k = np.arange(10000)
    digits = np.stack([k // 1000, k // 100 % 10, k // 10 % 10, k % 10], axis=1)
    text = (digits + ord("0")).astype(np.uint8)
    place = np.array([1000, 100, 10, 1])
    lead = text * (k[:, None] >= place)  # no leading zeros; 0 blank
    units = lead.copy()
    units[0, 3] = ord("0")
    ints = np.vstack([lead, text, units]).astype(np.uint8)
    # decimal j is written while a non-zero decimal follows it (or is it)
    kept = np.flip(np.logical_or.accumulate(np.flip(digits != 0, axis=1), axis=1), axis=1)
    dec = np.zeros((10000, 8), dtype=np.uint8)
    dec[:, 0] = (k > 0) * ord(".")
    dec[:, 1:5] = text * kept
    return ints.view(np.uint32).ravel(), dec.view(np.uint64).ravel()


_INT4, _DEC4 = _digit_tables()


def float_cells(a: np.ndarray) -> np.ndarray:
    """:func:`fmt` of every value of a float column (empty cells stored as
    :data:`sova.record.NONE`), as a rows x width byte matrix, 0 where a cell has no byte.

    A value is its 4-decimal rounding as an integer (``rint(v * 1e4)``), exact below
    2**53; its integer part is written four digits at a time and its decimals at once,
    each looked up in a table of fmt's own texts for 0-9999 (:data:`_INT4`,
    :data:`_DEC4`), so the text is fmt's wherever the integer is fmt's rounding. Values
    whose rounding the product could get wrong (within a few units in the last place of a
    half) or beyond 1e11 go through :func:`fmt` itself; NaN, infinite and empty cells
    get fmt's fixed texts. A property test holds every cell equal to fmt's.
    """
    a = np.asarray(a, dtype=float)
    n = a.size
    finite = np.isfinite(a) & (np.abs(a) < 1e11)
    x = np.where(finite, a, 0.0)
    p = x * 1e4
    frac = np.abs(p - np.trunc(p))
    near_half = np.abs(frac - 0.5) <= np.abs(p) * 2.0**-50
    slow = ~finite | near_half
    q = np.abs(np.rint(p)).astype(np.int64)
    ip, fp = np.divmod(q, 10000)
    top = int(ip.max()) if n else 0
    parts: list[np.ndarray] = []
    sign = np.signbit(x)
    if sign.any():
        parts.append((sign * np.uint8(ord("-"))).reshape(n, 1))
    if top >= 10**8:
        hi, rest = np.divmod(ip, 10**8)
        parts.append(_INT4[hi].view(np.uint8).reshape(n, 4))
        mid, lo = np.divmod(rest, 10000)
        parts.append(_INT4[mid + 10000 * (hi > 0)].view(np.uint8).reshape(n, 4))
        parts.append(_INT4[lo + np.where(ip >= 10000, 10000, 20000)].view(np.uint8).reshape(n, 4))
    elif top >= 10000:
        mid, lo = np.divmod(ip, 10000)
        parts.append(_INT4[mid].view(np.uint8).reshape(n, 4))
        parts.append(_INT4[lo + np.where(ip >= 10000, 10000, 20000)].view(np.uint8).reshape(n, 4))
    else:
        parts.append(_INT4[ip + 20000].view(np.uint8).reshape(n, 4))
    parts.append(_DEC4[fp].view(np.uint8).reshape(n, 8)[:, :5])
    m = np.hstack(parts)
    if not slow.any():
        return m
    # cells that are no number to round: empty (None), NaN and infinite, by mask; the
    # rest of the slow ones (near a half, huge) through fmt itself
    none = none_mask(a)
    nan = np.isnan(a) & ~none
    inf = np.isinf(a)
    fixed = none | nan | inf
    rows = np.flatnonzero(slow & ~fixed)
    texts = [fmt(float(a[i])).encode() for i in rows.tolist()]
    width = max(m.shape[1], 4 if inf.any() else 3, max(map(len, texts), default=0))
    if width > m.shape[1]:
        m = np.hstack([m, np.zeros((n, width - m.shape[1]), dtype=np.uint8)])
    m[slow] = 0
    for mask, text in ((nan, b"nan"), (inf & (a > 0), b"inf"), (inf & (a < 0), b"-inf")):
        if mask.any():
            m[mask, : len(text)] = np.frombuffer(text, dtype=np.uint8)
    for i, t in zip(rows.tolist(), texts, strict=True):
        m[i, : len(t)] = np.frombuffer(t, dtype=np.uint8)
    return m


def text_table(texts: Sequence[Any]) -> np.ndarray:
    """A text column's distinct values as a code x width byte matrix (each formatted and
    quoted once, by :func:`csv_cell`): ``text_table(texts)[codes]`` are its cells."""
    encoded = [csv_cell(t).encode() for t in texts]
    table = np.zeros((len(encoded), max(map(len, encoded), default=0)), dtype=np.uint8)
    for k, t in enumerate(encoded):
        table[k, : len(t)] = np.frombuffer(t, dtype=np.uint8)
    return table


def csv_cell(value: Any) -> str:
    """A cell as :func:`write_csv` writes it: :func:`fmt`, quoted where the csv module
    quotes (once per distinct text, so column writers can reuse it)."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([fmt(value), ""])
    return buf.getvalue()[: -len(",\n")]


Block = Sequence[np.ndarray]  # a block of rows: one rows x width byte matrix per column


def write_csv_columns(path: Path, header: Sequence[str], blocks: Iterable[Block]) -> None:
    """A CSV file from blocks of columns (:func:`float_cells`, :func:`text_table`): the
    bytes :func:`write_csv` writes for the same values, laid out a block at a time (cells
    side by side with their commas, the empty bytes dropped) instead of a cell at a time."""
    with path.open("wb") as fh:
        fh.write((",".join(csv_cell(h) for h in header) + "\n").encode())
        for block in blocks:
            n = block[0].shape[0] if block else 0
            if n == 0:
                continue
            comma = np.full((n, 1), ord(","), dtype=np.uint8)
            parts: list[np.ndarray] = []
            for m in block:
                parts += [m, comma]
            parts[-1] = np.full((n, 1), ord("\n"), dtype=np.uint8)
            flat = np.hstack(parts).ravel()
            fh.write(flat[flat != 0].tobytes())


ColumnBlock = Mapping[str, np.ndarray]  # a block of rows: one array per column


def write_npy_columns(
    folder: Path,
    rows: int,
    dtypes: Mapping[str, np.dtype[Any]],
    texts: Mapping[str, Sequence[str | None]],
    blocks: Iterable[ColumnBlock],
) -> None:
    """A table as a folder of numpy ``.npy`` files, one per column (``np.load`` reads one,
    memory-mapped with ``mmap_mode="r"``), and ``columns.json``: the row count, the columns
    in order and each text column's names (its ``.npy`` holds codes into them).

    Written a block at a time to every column's file (the headers first: ``rows`` is
    known), so no column is held whole (docs/design.md#timeline-resolution)."""
    folder.mkdir()
    with ExitStack() as stack:
        files = {}
        for name, dtype in dtypes.items():
            fh = stack.enter_context((folder / f"{name}.npy").open("wb"))
            header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False}
            np.lib.format.write_array_header_1_0(fh, {**header, "shape": (rows,)})
            files[name] = fh
        written = 0
        for block in blocks:
            for name, fh in files.items():
                fh.write(np.ascontiguousarray(block[name], dtype=dtypes[name]).tobytes())
            written += len(block[next(iter(files))]) if files else 0
    if written != rows:
        raise ValueError(f"rows: {rows} announced, {written} written")
    meta = {"rows": rows, "columns": list(dtypes), "texts": {k: list(v) for k, v in texts.items()}}
    (folder / "columns.json").write_text(json_text(meta, 1) + "\n")


def read_npy_columns(folder: Path) -> tuple[dict[str, np.ndarray], dict[str, list[str | None]]]:
    """A folder :func:`write_npy_columns` wrote: every column memory-mapped (read only,
    codes for a text column) and the text columns' names."""
    meta = json.loads((folder / "columns.json").read_text())
    cols = {c: np.load(folder / f"{c}.npy", mmap_mode="r") for c in meta["columns"]}
    return cols, meta["texts"]


def cells(record: Any, columns: Sequence[str]) -> list[Any]:
    """A record's values for ``columns`` (absent attributes are empty cells)."""
    return [getattr(record, c, None) for c in columns]


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
            if item.is_dir() and (final / item.name).is_dir():
                shutil.rmtree(final / item.name)  # a folder is not replaced by a rename
            os.replace(item, final / item.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


Table = tuple[Sequence[str], Iterable[Sequence[Any]]]  # header, rows of raw values


_JSON_SPECIAL = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_enc = json.encoder.encode_basestring_ascii


def json_text(obj: Any, indent: int, sort_keys: bool = False) -> str:
    """``json.dumps(obj, indent=indent, sort_keys=sort_keys)``, the same text, faster.

    With an indent the standard library encodes in pure Python, a generator per container;
    :class:`_Json` builds the same pieces with plain recursion, a plain leaf of a container
    without a call, with the same leaf encoders (``encode_basestring_ascii``,
    ``float.__repr__``, ``int.__repr__``): the summary.json of 1,000 x 20 VMs (2.9 MB) in
    about two thirds of the time. Types the standard encoder refuses raise its
    ``TypeError``; a circular container recurses until Python stops it (``RecursionError``
    where the standard encoder raises ``ValueError``): the outputs hold neither."""
    out: list[str] = []
    _Json(out, " " * indent, sort_keys).value(obj, "\n")
    return "".join(out)


def _json_float(o: float) -> str:
    r = float.__repr__(o)
    # repr's texts of NaN and the infinities end in a letter, any other float's in a digit
    return _JSON_SPECIAL[r] if r[-1] in "nf" else r


def _json_leaf(o: Any) -> str | None:
    """A plain leaf's text (None: a container, or a subclass to dispatch on)."""
    t = type(o)
    if t is float:
        return _json_float(o)
    if t is str:
        return _enc(o)
    if t is int:
        return int.__repr__(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    return None


def _json_key(k: Any) -> str:
    if isinstance(k, str):
        return _enc(k)
    if isinstance(k, float):
        return _enc(_json_float(k))
    if k is True:
        return '"true"'
    if k is False:
        return '"false"'
    if k is None:
        return '"null"'
    if isinstance(k, int):
        return _enc(int.__repr__(k))
    raise TypeError(f"keys must be str, int, float, bool or None, not {k.__class__.__name__}")


class _Json:
    """:func:`json_text`'s pieces into ``out``, indented by ``step`` per level."""

    def __init__(self, out: list[str], step: str, sort_keys: bool) -> None:
        self.append, self.step, self.sort_keys = out.append, step, sort_keys

    def value(self, o: Any, nl: str) -> None:
        text = _json_leaf(o)
        if text is not None:
            self.append(text)
        elif isinstance(o, str):  # subclasses, in the standard encoder's order
            self.append(_enc(o))
        elif isinstance(o, int):
            self.append(int.__repr__(o))
        elif isinstance(o, float):
            self.append(_json_float(o))
        elif isinstance(o, list | tuple):
            self.seq(o, nl)
        elif isinstance(o, dict):
            self.mapping(o, nl)
        else:
            raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")

    def seq(self, o: list[Any] | tuple[Any, ...], nl: str) -> None:
        append = self.append
        if not o:
            append("[]")
            return
        inner = nl + self.step
        sep = "," + inner
        append("[")
        pre = inner
        for v in o:
            text = _json_leaf(v)
            if text is not None:
                append(pre + text)
            else:
                append(pre)
                self.value(v, inner)
            pre = sep
        append(nl + "]")

    def mapping(self, o: dict[Any, Any], nl: str) -> None:
        append = self.append
        if not o:
            append("{}")
            return
        inner = nl + self.step
        sep = "," + inner
        append("{")
        pre = inner
        for k, v in sorted(o.items()) if self.sort_keys else o.items():
            head = pre + (_enc(k) if type(k) is str else _json_key(k)) + ": "
            text = _json_leaf(v)
            if text is not None:
                append(head + text)
            else:
                append(head)
                self.value(v, inner)
            pre = sep
        append(nl + "}")


def write_outputs(
    out: Path,
    tables: Mapping[str, Table | Callable[[Path], None]],
    summary: Mapping[str, Any],
    report: Callable[[Path], None],
) -> None:
    """CSV tables (header and rows, or a function writing the file it is given),
    ``summary.json`` and the report (written by ``report`` into the staging directory it
    is given) into ``out``, atomically.

    The report is drawn after the tables, in this process. Drawing it in a forked child
    beside the tables saved ~1.3 s of wall on a 1,000-host hour but the two processes
    together held ~60 MiB more at their peak (201 against 141 MiB, proportional set
    size), and the simulator's peak memory is a target of its own (issue 23), so the
    fork was removed. What ``report`` reads must be complete before the call."""
    with staged_dir(out) as tmp:
        for name, table in tables.items():
            if callable(table):
                table(tmp / name)
            else:
                write_csv(tmp / name, *table)
        (tmp / "summary.json").write_text(json_text(summary, 2, sort_keys=True) + "\n")
        report(tmp)


# --------------------------------------------------------------------------- plots


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display on servers, byte-stable PNGs),
    imported when a plot is drawn: ~30 MiB a run that only writes tables never needs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@dataclass(frozen=True)
class HolderPanel:
    """One run in the VF-holders plot."""

    title: str
    spans: Mapping[str, Sequence[tuple[float, float]]]  # VM -> (start_s, width_s) on a VF
    marks: Sequence[float] = ()  # times worth a vertical line (phase changes, VF switches)
    # VM -> the host of each span (same order): bars are coloured by host, so a VF holder
    # that migrated shows on which host it held a VF
    hosts: Mapping[str, Sequence[str]] | None = None


# Orange is the expected holders' colour: hosts get the others.
# One colour per host up to the report's line-per-host limit (sim.world.TICK_HOSTS = 10),
# none of them red (the alpha line and the burst markers are red)
HOST_COLOURS = (
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:grey",
    "tab:olive",
    "tab:cyan",
    "black",
)

Plotted = dict[str, int]  # series label -> points (or bars) drawn: what a PNG shows


def holder_count(panels: Sequence[HolderPanel]) -> int:
    return sum(len(v) for p in panels for v in p.spans.values())


def plot_vf_holders(
    path: Path,
    vms: Sequence[str],
    panels: Sequence[HolderPanel],
    *,
    expected: Sequence[tuple[Sequence[str], float, float]] = (),
    title: str,
    minutes: bool = False,
) -> Plotted:
    """VF holders over time, one panel per run, the expected holders (vms, start, end) in
    orange beside them. Returns the bars drawn per panel (the caller leaves out a plot
    with none: an empty plot says nothing)."""
    plt = pyplot()
    unit = 60.0 if minutes else 1.0
    plotted: Plotted = {}
    all_hosts = sorted({h for p in panels for v in (p.hosts or {}).values() for h in v})
    colour = {h: HOST_COLOURS[i % len(HOST_COLOURS)] for i, h in enumerate(all_hosts)}
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(10, 1.0 + 0.32 * len(vms) * len(panels)),
        squeeze=False,
        dpi=PNG_DPI,
        sharex=True,
    )
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        drawn = 0
        for i, vm in enumerate(vms):
            bars = [(s / unit, w / unit) for s, w in panel.spans.get(vm, [])]
            if not bars:
                continue
            drawn += len(bars)
            where = (panel.hosts or {}).get(vm)
            if where:
                colors = [colour[h] for h in where]
                ax.broken_barh(bars, (i - 0.35, 0.7), color=colors)
            else:
                ax.broken_barh(bars, (i - 0.35, 0.7), color="tab:blue")
        plotted[panel.title] = drawn
        for holders, start, end in expected:
            for vm in holders:
                if vm in vms:
                    i = vms.index(vm)
                    ax.plot([start / unit, end / unit], [i, i], color="tab:orange", lw=2)
        for t in panel.marks:
            ax.axvline(t / unit, color="grey", lw=0.8, ls="--")
        ax.set_yticks(range(len(vms)), vms)
        ax.set_ylim(-0.6, len(vms) - 0.4)
        ax.invert_yaxis()
        ax.set_title(panel.title, fontsize=10, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("time (min)" if minutes else "time (s)")
    if len(all_hosts) > 1:
        from matplotlib.patches import Patch

        axes[0, 0].legend(
            handles=[Patch(color=colour[h], label=f"VF on {h}") for h in all_hosts],
            fontsize=7,
            ncol=len(all_hosts),
            loc="upper right",
        )
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=PNG_DPI, metadata=PNG_META)
    plt.close(fig)
    return plotted


def write_plot_index(out: Path, plots: Mapping[str, Plotted]) -> None:
    """``plots.json``: every PNG of a report and the series it draws with their point
    counts, so a check (and a reader) can tell a plot with content from an empty frame."""
    (out / "plots.json").write_text(
        json_text({k: dict(v) for k, v in sorted(plots.items())}, 1, sort_keys=True) + "\n"
    )
