"""The records every world writes, and every conversion into them.

A run's output is the same in every world (simulator, demo, namespace testbed):
``timeline.csv`` (one row per control period and VM), ``events.csv`` (what the
controllers did and what came of it) and ``summary.json``. This module owns the first
two: their columns, their rows and how an agent's step, an action's outcome and a
manager's decision become rows. Worlds only add what they alone measure (the
simulator's offered load and response time, the testbed's kernel counters), so "the
demo writes the same events as simulate" rests on one function, not on copies.

Adding an output column: a field on :class:`TimelineRow` (or :class:`EventRow`), filled
in :func:`step_values` if the agent knows it; the CSV columns follow the fields.

A run keeps its timeline as columns (:class:`Timeline`), not as row objects: an hour of
1,000 hosts x 3 VMs is 1.08 M rows, which as dataclasses cost ~800 bytes each.
"""

from __future__ import annotations

import dataclasses
import operator
import os
import struct
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, overload

import numpy as np

from sova.agent.executor import EVENT_KIND, Outcome
from sova.agent.loop import StepReport
from sova.model import (
    AttachVF,
    Migrate,
    NicKind,
    SetGuestRateLimit,
    SetVFRate,
    VMCounters,
    VMState,
)
from sova.policy.sensing import VMFactors


@dataclass(frozen=True)
class TimelineRow:
    policy: str
    time_s: float
    host: str
    vm: str
    nic: str
    vf_rate_mbps: float | None
    tx_mbps: float
    rx_mbps: float
    cpu_usage: float
    io_degree: float
    net_factor: float
    net_degree: float
    io_factor: float
    offered_mbps: float | None  # the world's offered load; None where it is not known
    response_ms: float | None
    limit_mbps: float | None


@dataclass(frozen=True)
class EventRow:
    policy: str
    time_s: float
    event: str
    vm: str
    src_host: str
    dst_host: str
    detail: str


TIMELINE_COLUMNS = [f.name for f in dataclasses.fields(TimelineRow)]
EVENT_COLUMNS = [f.name for f in dataclasses.fields(EventRow)]
# Filled by the world, not by the agent: what the offered load and the response were.
WORLD_COLUMNS = ("policy", "host", "offered_mbps", "response_ms")
TEXT_COLUMNS = frozenset({"policy", "host", "vm", "nic"})
# An empty float cell (None) is stored as a NaN with its own payload, so a float column
# stays one float64 array and a NaN the world measured still reads back as NaN.
NONE_BITS = 0x7FF8_0000_5E0F_A0E0
NONE = struct.unpack("<d", struct.pack("<Q", NONE_BITS))[0]
Values = tuple[Any, ...]  # one row's values in TIMELINE_COLUMNS order
VM_COLUMN = TIMELINE_COLUMNS.index("vm")
_row_values = operator.attrgetter(*TIMELINE_COLUMNS)


def none_mask(a: np.ndarray) -> np.ndarray:
    """Where a float column holds None (an empty cell), not a number or a NaN."""
    out: np.ndarray = a.view(np.uint64) == NONE_BITS
    return out


class _Codes(dict[Any, int]):
    """Text -> its code in a column's vocabulary, new texts appended as they come."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str | None] = []

    def __missing__(self, text: str | None) -> int:
        self[text] = code = len(self.texts)
        self.texts.append(text)
        return code


def _same(a: Sequence[str | None], b: Sequence[str | None]) -> bool:
    """Whether two short vocabularies are equal (a long one is the same object or is
    taken as another)."""
    return len(a) == len(b) <= 8 and all(x == y for x, y in zip(a, b, strict=True))


@dataclass(frozen=True)
class Chunk:
    """Consecutive timeline rows as columns: float64 arrays (None as :data:`NONE`) and,
    for the text columns, int32 codes into :attr:`Timeline.texts`."""

    n: int
    columns: dict[str, np.ndarray]


DTYPES = {c: np.dtype(np.int32 if c in TEXT_COLUMNS else np.float64) for c in TIMELINE_COLUMNS}
ROW_BYTES = sum(d.itemsize for d in DTYPES.values())
# Past this many bytes of columns a timeline moves its chunks to a temporary file: an hour
# of 1,000 hosts x 3 VMs is ~120 MB of columns, most of a run's memory, read back only
# when the outputs are written. 4 MiB rather than 16: on that hour the run's peak RSS fell
# from 111 to 99 MiB (the freed chunks' pages are not all returned to the system); a run of
# fewer than ~37,000 rows (112 bytes each) never touches the file.
SPILL_BYTES = 4 << 20


@dataclass(frozen=True)
class _Spilled:
    offset: int
    n: int


class Timeline(Sequence[TimelineRow]):
    """A run's timeline rows kept as columns, in chunks of ``chunk_rows`` rows.

    Rows come in as values (:meth:`extend_values`, a world's fast path) or as
    :class:`TimelineRow` (:meth:`append`); readers iterate rows (built a chunk at a time)
    or read the columns (:meth:`chunks`, :meth:`column`) without building rows. Texts are
    stored once per run (host and VM names), numbers as float64, so an hour of 1,000
    hosts x 3 VMs is ~100 bytes a row instead of ~800 as row objects.
    """

    def __init__(
        self,
        rows: Iterable[TimelineRow] = (),
        chunk_rows: int = 8192,
        spill_bytes: int = SPILL_BYTES,
    ) -> None:
        self.chunk_rows = chunk_rows
        self.spill_bytes = spill_bytes
        self._chunks: list[Chunk | _Spilled] = []
        self._pending: list[Values] = []
        self._parts: list[Chunk] = []  # rows in columns not yet in a chunk, in order
        self._parts_n = 0
        self._codes = {c: _Codes() for c in TEXT_COLUMNS}
        # per text column: a vocabulary extend_columns was given and its entries' codes
        self._luts: dict[str, tuple[Sequence[str | None], np.ndarray]] = {}
        self._n = 0
        self._held = 0  # bytes of chunks in memory
        self._file: IO[bytes] | None = None
        self._times: tuple[int, np.ndarray] | None = None  # (rows when read, sample_times())
        self.extend(rows)

    # ------------------------------------------------------------------ writing

    def append(self, row: TimelineRow) -> None:
        self.extend_values((_row_values(row),))

    def extend(self, rows: Iterable[TimelineRow]) -> None:
        self.extend_values(map(_row_values, rows))

    def extend_values(self, rows: Iterable[Values]) -> None:
        """Rows as tuples of values in :data:`TIMELINE_COLUMNS` order."""
        pending = self._pending
        before = len(pending)
        pending.extend(rows)
        self._n += len(pending) - before
        if len(pending) + self._parts_n >= self.chunk_rows:
            self._seal()

    def extend_columns(
        self,
        n: int,
        numbers: Mapping[str, np.ndarray],
        texts: Mapping[str, tuple[Sequence[str | None], np.ndarray]],
    ) -> None:
        """``n`` rows as columns (a world holding its state as arrays builds no row):
        ``numbers`` the float columns (None as :data:`NONE`), ``texts`` each text column as
        a vocabulary and every row's index into it."""
        if n == 0:
            return
        self._rows_to_part()  # rows before these keep their place
        cols: dict[str, np.ndarray] = {}
        for name in TIMELINE_COLUMNS:
            if name in TEXT_COLUMNS:
                vocab, index = texts[name]
                cols[name] = self._code(name, vocab, np.asarray(index))
            else:
                cols[name] = np.asarray(numbers[name], dtype=np.float64)
        self._parts.append(Chunk(n, cols))
        self._parts_n += n
        self._n += n
        if self._parts_n >= self.chunk_rows:
            self._seal()

    def _code(self, column: str, vocab: Sequence[str | None], index: np.ndarray) -> np.ndarray:
        """This timeline's codes of ``vocab[index]``, new texts coded in the order they
        first come (as row by row). A world passes the same vocabulary every period (its
        host and VM names): each column keeps the codes of its last vocabulary's entries
        (-1 where not coded yet), so a period costs one lookup, not an ``np.unique`` over
        its rows (a vocabulary is not changed in place)."""
        held = self._luts.get(column)
        if (
            held is None
            or len(held[1]) != len(vocab)
            or not (held[0] is vocab or _same(held[0], vocab))
        ):
            held = self._luts[column] = (vocab, np.full(len(vocab), -1, dtype=np.int32))
        lut = held[1]
        out: np.ndarray = lut[index]
        new = out < 0
        if new.any():
            codes = self._codes[column]
            used, first = np.unique(index[new], return_index=True)
            for k in np.argsort(first, kind="stable").tolist():
                i = int(used[k])
                lut[i] = codes[vocab[i]]
            out = lut[index]
        return out

    def _rows_to_part(self) -> None:
        rows, self._pending = self._pending, []
        if not rows:
            return
        cols: dict[str, np.ndarray] = {}
        for name, values in zip(TIMELINE_COLUMNS, zip(*rows, strict=True), strict=True):
            if name in TEXT_COLUMNS:
                codes = self._codes[name]
                cols[name] = np.fromiter(map(codes.__getitem__, values), np.int32, len(values))
            elif None in values:
                cols[name] = np.array([NONE if v is None else v for v in values], dtype=float)
            else:
                cols[name] = np.array(values, dtype=float)
        self._parts.append(Chunk(len(rows), cols))
        self._parts_n += len(rows)

    def _seal(self) -> None:
        self._rows_to_part()
        parts, self._parts, self._parts_n = self._parts, [], 0
        if not parts:
            return
        if len(parts) == 1:
            chunk = parts[0]
        else:
            cols = {k: np.concatenate([p.columns[k] for p in parts]) for k in TIMELINE_COLUMNS}
            chunk = Chunk(sum(p.n for p in parts), cols)
        self._chunks.append(chunk)
        self._held += chunk.n * ROW_BYTES
        if self._held > self.spill_bytes:
            self._spill()

    def _spill(self) -> None:
        """Every chunk held in memory to the temporary file (made on first use; the OS
        deletes it when it is closed, also after a crash)."""
        if self._file is None:
            # open as long as the timeline lives (closed, so deleted, when it is freed)
            self._file = tempfile.TemporaryFile(prefix="sova-timeline-")  # noqa: SIM115
        f = self._file
        for k, c in enumerate(self._chunks):
            if isinstance(c, Chunk):
                f.seek(0, os.SEEK_END)
                offset = f.tell()
                for name in TIMELINE_COLUMNS:
                    # the array's own buffer (tobytes() copied every column first)
                    f.write(np.ascontiguousarray(c.columns[name], DTYPES[name]).data)
                self._chunks[k] = _Spilled(offset, c.n)
        f.flush()  # read back with os.pread, beneath the file object's buffer
        self._held = 0

    def _load(self, s: _Spilled, columns: Collection[str] | None = None) -> Chunk:
        """A spilled chunk read back: every column, or only ``columns`` (each its own read:
        a chunk's columns lie one after another in the file)."""
        assert self._file is not None
        # at an offset, not seek-then-read: chunks() is a generator, two walks of it may
        # be interleaved, and a shared file position would mix their reads
        fd = self._file.fileno()
        if columns is None:
            data = os.pread(fd, s.n * ROW_BYTES, s.offset)
        cols, at = {}, 0
        for name in TIMELINE_COLUMNS:
            dt = DTYPES[name]
            size = s.n * dt.itemsize
            if columns is None:
                cols[name] = np.frombuffer(data, dt, s.n, at)
            elif name in columns:
                cols[name] = np.frombuffer(os.pread(fd, size, s.offset + at), dt, s.n)
            at += size
        return Chunk(s.n, cols)

    # ------------------------------------------------------------------ reading

    def texts(self, column: str) -> list[str | None]:
        """The vocabulary of a text column: code -> text."""
        self._seal()
        return self._codes[column].texts

    def chunks(self, columns: Collection[str] | None = None) -> Iterator[Chunk]:
        """The rows so far as column chunks, in order; with ``columns``, a chunk read back
        from the file holds only those (a walk that needs 3 of the 15 columns reads 3: an
        hour of 1,000 x 3 is ~120 MB of columns a walk, the report walks it ~10 times)."""
        self._seal()
        for c in self._chunks:
            yield c if isinstance(c, Chunk) else self._load(c, columns)

    def sample_times(self) -> np.ndarray:
        """The distinct ``time_s`` values, ascending, read-only: the summary, the decisions
        and the fleet plots each need them, and a walk of a spilled hour costs ~0.025 CPU-s,
        so they are read again only after rows came in. A chunk at a time: an hour's column
        is 8.6 MB and ``np.unique`` sorts a copy."""
        if self._times is not None and self._times[0] == self._n:
            return self._times[1]
        per_chunk = [np.unique(c.columns["time_s"]) for c in self.chunks()]
        times = np.unique(np.concatenate(per_chunk)) if per_chunk else np.zeros(0)
        times.setflags(write=False)
        self._times = (self._n, times)
        return times

    def column(self, name: str) -> np.ndarray:
        """One column of every row (float64, or int32 codes for a text column)."""
        # copies: a chunk read back from the file is one buffer of all its columns
        parts = [c.columns[name].copy() for c in self.chunks((name,))]
        if parts:
            return np.concatenate(parts)
        return np.zeros(0, dtype=np.int32 if name in TEXT_COLUMNS else float)

    def _rows(self, chunk: Chunk) -> list[TimelineRow]:
        cols: list[list[Any]] = []
        for name in TIMELINE_COLUMNS:
            a = chunk.columns[name]
            if name in TEXT_COLUMNS:
                cols.append(list(map(self._codes[name].texts.__getitem__, a.tolist())))
                continue
            values = a.tolist()
            for i in np.flatnonzero(none_mask(a)).tolist():
                values[i] = None
            cols.append(values)
        return [TimelineRow(*v) for v in zip(*cols, strict=True)]

    def __iter__(self) -> Iterator[TimelineRow]:
        for chunk in self.chunks():
            yield from self._rows(chunk)

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> TimelineRow: ...

    @overload
    def __getitem__(self, i: slice) -> list[TimelineRow]: ...

    def __getitem__(self, i: int | slice) -> TimelineRow | list[TimelineRow]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("timeline row out of range")
        for chunk in self.chunks():
            if i < chunk.n:
                one = Chunk(1, {k: v[i : i + 1] for k, v in chunk.columns.items()})
                return self._rows(one)[0]
            i -= chunk.n
        raise IndexError("timeline row out of range")  # pragma: no cover (n counts rows)

    def sort(self, key: Callable[[TimelineRow], Any]) -> None:
        """Reorder the rows (a world whose agents report out of order)."""
        rows = sorted(self, key=key)
        self._chunks, self._pending, self._n, self._held = [], [], 0, 0
        self._parts, self._parts_n = [], 0
        if self._file is not None:
            self._file.truncate(0)
        self.extend(rows)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Timeline | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with every chunk in the state (a run going back from a worker)."""
        chunks = list(self.chunks())  # pending rows sealed first
        state = dict(self.__dict__)
        state["_chunks"] = chunks
        state["_file"], state["_held"] = None, 0
        state["_times"] = None  # read again where it lands (a pickled array is writable)
        state["_luts"] = {}  # a cache (holding the world's name lists)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._held = sum(c.n for c in self._chunks) * ROW_BYTES
        if self._held > self.spill_bytes:
            self._spill()


@dataclass
class RunRecord:
    """The records of one policy's run in any world."""

    policy: str
    timeline: Timeline = field(default_factory=Timeline)
    events: list[EventRow] = field(default_factory=list)
    decisions: list[dict[str, object]] = field(default_factory=list)


# --------------------------------------------------------------------------- conversions


def step_rows(
    rep: StepReport,
    *,
    policy: str = "",
    host: str = "",
    world: Callable[[str], tuple[float | None, float | None]] | None = None,
) -> Iterator[TimelineRow]:
    """An agent's control step as timeline rows, one per VM it has factors for.

    ``offered_mbps`` and ``response_ms`` come from ``world`` (VM name -> both) when the
    world knows them at once, else they are left empty (see :func:`complete_row`).
    """
    for values in step_values(rep, policy=policy, host=host, world=world):
        yield TimelineRow(*values)


def step_values(
    rep: StepReport,
    *,
    policy: str = "",
    host: str = "",
    world: Callable[[str], tuple[float | None, float | None]] | None = None,
) -> Iterator[Values]:
    """:func:`step_rows` as tuples in :data:`TIMELINE_COLUMNS` order (what a
    :class:`Timeline` stores, without building a row object per VM)."""
    time_s = round(rep.time_s, 3)
    vms = rep.actual.vms
    for vm, f in sorted(rep.factors.items()):
        st = vms.get(vm)
        if st is None:
            continue
        on_vf = st.nic is NicKind.VF
        offered, response = (None, None) if world is None else world(vm)
        yield (
            policy,
            time_s,
            host,
            vm,
            st.nic.value,
            (st.vf_max_bps / 1e6 if st.vf_max_bps else None) if on_vf else None,
            f.tx_bps / 1e6,
            f.rx_bps / 1e6,
            f.cpu_usage,
            f.io_degree,
            f.net_factor,
            f.net_degree,
            f.io_factor,
            offered,
            response,
            st.guest_limit_bps / 1e6 if st.guest_limit_bps else None,
        )


ColumnBlock = tuple[
    int, dict[str, np.ndarray], dict[str, tuple[Sequence[str | None], np.ndarray]]
]  # rows, float columns, text columns: what Timeline.extend_columns takes


def column_block(
    *,
    policy: str,
    time_s: float,
    host_names: Sequence[str],
    host: np.ndarray,
    vm_names: Sequence[str],
    vm: np.ndarray,
    on_vf: np.ndarray,
    vf_max_bps: np.ndarray,
    guest_limit_bps: np.ndarray,
    factors: Sequence[np.ndarray],
    offered_mbps: np.ndarray,
    response_ms: np.ndarray,
) -> ColumnBlock:
    """:func:`step_values` of many VMs from arrays, as columns for
    :meth:`Timeline.extend_columns` (a world that holds its hosts' state and sensing as
    arrays builds no step report for them): the host and
    VM of each row as indices into ``host_names`` and ``vm_names``, the world's columns as
    arrays (None as :data:`NONE`). The floats are :func:`step_values`' (one
    division each, the same in numpy as in Python)."""
    vf = on_vf.astype(bool)
    n = len(vf)
    tx, rx, cpu, io_degree, net_factor, net_degree, io_factor = factors
    numbers = {
        "time_s": np.full(n, round(time_s, 3)),
        "vf_rate_mbps": _mbps_or_none(vf_max_bps, vf),
        "tx_mbps": tx / 1e6,
        "rx_mbps": rx / 1e6,
        "cpu_usage": cpu,
        "io_degree": io_degree,
        "net_factor": net_factor,
        "net_degree": net_degree,
        "io_factor": io_factor,
        "offered_mbps": offered_mbps,
        "response_ms": response_ms,
        "limit_mbps": _mbps_or_none(guest_limit_bps, np.ones(n, dtype=bool)),
    }
    texts: dict[str, tuple[Sequence[str | None], np.ndarray]] = {
        "policy": ([policy], np.zeros(n, dtype=np.int64)),
        "host": (host_names, host),
        "vm": (vm_names, vm),
        "nic": ([NicKind.VF.value, NicKind.VIRTIO.value], (~vf).astype(np.int64)),
    }
    return n, numbers, texts


def _mbps_or_none(bps: np.ndarray, where: np.ndarray) -> np.ndarray:
    """``bps / 1e6`` where ``where`` holds and the rate is set (finite and not zero: a
    zero rate is no rate, as in :func:`step_values`), else :data:`NONE` (an empty cell)."""
    unset = ~where | ~np.isfinite(bps) | (bps == 0)
    out: np.ndarray = np.where(unset, NONE, bps / 1e6)
    return out


def measured_rates(
    prev: VMCounters | None, cur: VMCounters, dt: float
) -> tuple[float, float, float]:
    """tx and rx in Mbit/s and the share of the VM's vCPUs it used over ``dt`` seconds, from
    two counter readings (all zero without an earlier one; a counter that went back counts
    as zero, not as negative traffic)."""
    if prev is None:
        return 0.0, 0.0, 0.0
    return (
        max(0, cur.tx_bytes - prev.tx_bytes) * 8 / dt / 1e6,
        max(0, cur.rx_bytes - prev.rx_bytes) * 8 / dt / 1e6,
        max(0, cur.cpu_time_ns - prev.cpu_time_ns) / (dt * 1e9 * cur.vcpus),
    )


def measured_row(
    *,
    policy: str,
    time_s: float,
    host: str,
    vm: str,
    state: VMState,
    tx_mbps: float,
    rx_mbps: float,
    cpu_usage: float,
    factors: VMFactors | None,
    **world: Any,
) -> TimelineRow:
    """A row of a world that measures rates itself each second (testbed, lab): its own
    tx/rx/CPU beside the agent's latest sensing factors (neutral before the first ones).
    """
    f = factors
    on_vf = state.nic is NicKind.VF
    return timeline_row(
        policy=policy,
        time_s=time_s,
        host=host,
        vm=vm,
        nic=state.nic.value,
        vf_rate_mbps=state.vf_max_bps / 1e6 if on_vf and state.vf_max_bps else None,
        tx_mbps=tx_mbps,
        rx_mbps=rx_mbps,
        cpu_usage=min(1.0, cpu_usage),
        io_degree=f.io_degree if f else 100.0,
        net_factor=f.net_factor if f else 0.0,
        net_degree=f.net_degree if f else 0.0,
        io_factor=f.io_factor if f else 0.0,
        **world,
    )


def complete_row(row: TimelineRow, **world: Any) -> TimelineRow:
    """``row`` with the columns the world fills (policy, host, offered, response)."""
    unknown = set(world) - set(WORLD_COLUMNS)
    if unknown:
        raise ValueError(f"not world columns: {sorted(unknown)}")
    return dataclasses.replace(row, **world)


def timeline_row(**values: Any) -> TimelineRow:
    """A timeline row from named values; columns this world does not measure stay empty."""
    for f in dataclasses.fields(TimelineRow):
        values.setdefault(f.name, None)
    return TimelineRow(**values)


def outcome_event(
    o: Outcome,
    *,
    policy: str = "",
    host: str = "",
    time_s: float | None = None,
    rate_limits: bool = False,
) -> EventRow | None:
    """An action's outcome as an event row, or None for what the timeline already shows.

    Successful guest rate limits change every bandwidth period and the timeline carries
    them, so they are no event unless ``rate_limits`` (the testbed, whose timeline is
    per second but whose limits are checked against the second they came into force).
    """
    a = o.action
    if isinstance(a, SetGuestRateLimit) and o.result == "succeeded" and not rate_limits:
        return None
    kind = EVENT_KIND.get(type(a), a.kind)
    event = kind if o.result == "succeeded" else f"{kind}_{o.result}"
    detail = o.detail
    if isinstance(a, AttachVF | SetVFRate) and a.max_bps:
        detail = _join(detail, f"rate {a.max_bps / 1e6:.0f} Mbit/s")
    if rate_limits and isinstance(a, SetGuestRateLimit):
        limit = "none" if a.rate_bps is None else f"{a.rate_bps / 1e6:.1f} Mbit/s"
        detail = _join(detail, f"limit {limit}")
    dst = ""
    if isinstance(a, Migrate):
        dst = a.dst_host
        if o.result != "succeeded":
            event = "migrate_failed"
    t = o.time_s if time_s is None else time_s
    return EventRow(policy, round(t, 3), event, a.vm, host, dst, detail)


def migration_start_event(policy: str, time_s: float, a: Migrate, host: str) -> EventRow:
    return EventRow(policy, round(time_s, 3), "migrate_start", a.vm, host, a.dst_host, "")


def decision_event(
    policy: str,
    time_s: float,
    host: str,
    *,
    vm: str | None,
    target: str | None,
    reason: str,
    utilisation: Sequence[float],
) -> EventRow:
    """A manager's decision (a hot spot and what it chose) as a ``hotspot`` event."""
    u = utilisation
    detail = f"cpu={u[0]:.2f} mem={u[1]:.2f} net={u[2]:.2f}; {reason}"
    return EventRow(policy, round(time_s, 3), "hotspot", vm or "", host, target or "", detail)


def decision_record(
    time_s: float, host: str, *, flag: bool, target: str | None, vm: str | None, reason: str
) -> dict[str, object]:
    """A manager's decision as the run's decision log keeps it."""
    return {
        "time_s": time_s,
        "host": host,
        "flag": flag,
        "target": target,
        "vm": vm,
        "reason": reason,
    }


def row_dict(row: TimelineRow | EventRow) -> dict[str, Any]:
    """A row as JSON-ready values (the demo's agents send theirs to the world)."""
    return dataclasses.asdict(row)


def timeline_from_dict(values: Mapping[str, Any]) -> TimelineRow:
    return timeline_row(**{f.name: values[f.name] for f in dataclasses.fields(TimelineRow)})


def event_from_dict(values: Mapping[str, Any]) -> EventRow:
    return EventRow(**{f.name: values.get(f.name, "") for f in dataclasses.fields(EventRow)})


def _join(detail: str, more: str) -> str:
    return (detail + "; " if detail else "") + more
