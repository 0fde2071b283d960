"""The one record: how every world turns outcomes, steps and decisions into rows."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sova.agent.executor import Outcome, Result
from sova.model import AttachVF, Migrate, SetGuestRateLimit
from sova.record import (
    EVENT_COLUMNS,
    TIMELINE_COLUMNS,
    complete_row,
    decision_event,
    event_from_dict,
    outcome_event,
    row_dict,
    timeline_from_dict,
    timeline_row,
)


def test_outcomes_become_events_worded_once() -> None:
    ev = outcome_event(
        Outcome(12.34567, AttachVF("vm1", max_bps=2e9), Result.SUCCEEDED, "vf0"),
        policy="p",
        host="h",
    )
    assert ev is not None
    assert (ev.time_s, ev.event, ev.vm, ev.src_host, ev.detail) == (
        12.346,
        "vf_attach",
        "vm1",
        "h",
        "vf0; rate 2000 Mbit/s",
    )
    failed = outcome_event(Outcome(1.0, Migrate("vm1", "h2"), Result.TIMEOUT, "late"), host="h1")
    assert failed is not None and failed.event == "migrate_failed" and failed.dst_host == "h2"


def test_rate_limits_are_events_only_where_the_world_asks() -> None:
    o = Outcome(3.0, SetGuestRateLimit("vm1", 5e8), Result.SUCCEEDED)
    assert outcome_event(o) is None  # the simulator's timeline carries them
    ev = outcome_event(o, rate_limits=True, time_s=1.0)
    assert ev is not None and ev.detail == "limit 500.0 Mbit/s" and ev.time_s == 1.0
    refused = outcome_event(Outcome(3.0, SetGuestRateLimit("vm1", None), Result.FAILED, "no agent"))
    assert refused is not None and refused.event == "rate_limit_failed"


def test_decisions_read_the_same_in_every_world() -> None:
    ev = decision_event(
        "sova", 30.0004, "h1", vm=None, target="h2", reason="hot", utilisation=(0.5, 0.25, 0.9)
    )
    assert (ev.event, ev.vm, ev.dst_host) == ("hotspot", "", "h2")
    assert ev.detail == "cpu=0.50 mem=0.25 net=0.90; hot"


def test_rows_cross_the_wire_unchanged() -> None:
    row = timeline_row(
        policy="",
        time_s=10.0,
        host="",
        vm="vm1",
        nic="vf",
        tx_mbps=1 / 3,
        rx_mbps=0.0,
        cpu_usage=0.1,
        io_degree=2.0,
        net_factor=0.5,
        net_degree=7.0,
        io_factor=0.2,
    )
    assert timeline_from_dict(row_dict(row)) == row
    ev = outcome_event(Outcome(1.0, AttachVF("vm1"), Result.FAILED, "busy"))
    assert ev is not None and event_from_dict(row_dict(ev)) == ev
    done = complete_row(row, policy="sova", host="h1", offered_mbps=3.0, response_ms=None)
    assert (done.policy, done.host, done.offered_mbps) == ("sova", "h1", 3.0)


def test_the_csv_headers_are_the_published_ones() -> None:
    # The file format every world writes and every reader parses; order is part of it.
    assert TIMELINE_COLUMNS == [
        "policy", "time_s", "host", "vm", "nic", "vf_rate_mbps", "tx_mbps", "rx_mbps",
        "cpu_usage", "io_degree", "net_factor", "net_degree", "io_factor", "offered_mbps",
        "response_ms", "limit_mbps",
    ]  # fmt: skip
    assert EVENT_COLUMNS == ["policy", "time_s", "event", "vm", "src_host", "dst_host", "detail"]


def test_measured_rates_from_two_counter_readings() -> None:
    from sova.model import VMCounters
    from sova.record import measured_rates

    a = VMCounters(
        "v", 2, cpu_time_ns=0, steal_ns=0, rx_bytes=0, tx_bytes=0, rx_packets=0, tx_packets=0
    )
    # 2 s: 25 MB sent = 100 Mbit/s, 5 MB received = 20 Mbit/s, 2 s of CPU on 2 vCPUs = 0.5
    b = VMCounters("v", 2, 2_000_000_000, 0, 5_000_000, 25_000_000, 0, 0)
    assert measured_rates(a, b, 2.0) == (100.0, 20.0, 0.5)
    assert measured_rates(None, b, 2.0) == (0.0, 0.0, 0.0)
    assert measured_rates(b, a, 2.0) == (0.0, 0.0, 0.0)  # counters reset: no negative traffic


# --------------------------------------------------------------------------- the timeline


def _rows_strategy() -> Any:
    from hypothesis import strategies as st

    from sova.record import TimelineRow

    num = st.floats(allow_nan=True, allow_infinity=True) | st.floats(-1e4, 1e4)
    opt = st.none() | num
    text = st.sampled_from(["h1", "vm,2", 'q"uote', "", "vf", "virtio", "ü"])
    row = st.builds(
        TimelineRow,
        policy=text,
        time_s=num,
        host=text,
        vm=text,
        nic=text,
        vf_rate_mbps=opt,
        tx_mbps=num,
        rx_mbps=num,
        cpu_usage=num,
        io_degree=num,
        net_factor=num,
        net_degree=num,
        io_factor=num,
        offered_mbps=opt,
        response_ms=opt,
        limit_mbps=opt,
    )
    return st.lists(row, max_size=40)


def _same(a: Any, b: Any) -> bool:
    """Rows equal value for value, a NaN equal to a NaN (and None only to None)."""
    import math

    def cell(x: Any, y: Any) -> bool:
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x):
            return math.isnan(y)
        return bool(x == y) and type(x) is type(y)

    return all(cell(getattr(a, c), getattr(b, c)) for c in TIMELINE_COLUMNS)


@settings(max_examples=200, deadline=None)
@given(rows=_rows_strategy(), chunk=st.integers(1, 7), spill=st.booleans())
def test_the_timeline_as_columns_gives_back_its_rows_and_their_csv_bytes(
    tmp_path_factory: Any, rows: list[Any], chunk: int, spill: bool
) -> None:
    """Rows in, the same rows out (None apart from NaN, across chunk boundaries, from a
    temporary file past the spill size, through pickling), and the column writer's CSV
    byte for byte the row writer's."""
    import pickle

    from sova.record import SPILL_BYTES, Timeline
    from sova.sim.output import timeline_blocks
    from sova.writer import cells, write_csv, write_csv_columns

    tl = Timeline(rows[: len(rows) // 2], chunk_rows=chunk, spill_bytes=0 if spill else SPILL_BYTES)
    for r in rows[len(rows) // 2 :]:
        tl.append(r)
    assert len(tl) == len(rows)
    copied = pickle.loads(pickle.dumps(tl))  # with rows not yet in a chunk
    for back in (list(copied), list(tl)):
        assert len(back) == len(rows) and all(_same(a, b) for a, b in zip(back, rows, strict=True))
    if rows:
        assert _same(tl[-1], rows[-1]) and _same(tl[0], rows[0])
        assert all(_same(a, b) for a, b in zip(tl[1:3], rows[1:3], strict=True))

    class Run:
        timeline = tl

    class Point:
        sweep_value = {"rate": 1.5, "n": 2}

    d = tmp_path_factory.mktemp("csv")
    for sweep in (False, True):
        lead = ["sweep_value"] if sweep else []
        want = [([Point.sweep_value] if sweep else []) + cells(r, TIMELINE_COLUMNS) for r in rows]
        write_csv(d / "rows.csv", lead + TIMELINE_COLUMNS, want)
        blocks = timeline_blocks([(Point, [Run])], sweep)  # type: ignore[list-item]
        write_csv_columns(d / "cols.csv", lead + TIMELINE_COLUMNS, blocks)
        assert (d / "cols.csv").read_bytes() == (d / "rows.csv").read_bytes()


@settings(max_examples=200, deadline=None)
@given(
    rows=_rows_strategy(),
    cuts=st.lists(st.integers(0, 40), max_size=6),
    chunk=st.integers(1, 9),
    spill=st.booleans(),
    shared=st.booleans(),
)
def test_rows_given_as_columns_are_the_rows_given_as_values(
    rows: list[Any], cuts: list[int], chunk: int, spill: bool, shared: bool
) -> None:
    """A world records some periods' rows as columns (extend_columns) and others as values:
    mixed in any order, across chunk and spill boundaries, the timeline holds the same rows
    in the same order, and codes its texts in the same order, as one given all as values.
    Each text column comes as a vocabulary of its own (reversed: indices differ from
    codes), or (``shared``) as one vocabulary of the whole run passed again with every
    block, as a world passes its host and VM names (the timeline keeps its codes)."""
    import numpy as np

    from sova.record import NONE, SPILL_BYTES, TEXT_COLUMNS, Timeline

    spill_bytes = 0 if spill else SPILL_BYTES
    want = Timeline(rows, chunk_rows=chunk, spill_bytes=spill_bytes)
    got = Timeline(chunk_rows=chunk, spill_bytes=spill_bytes)
    bounds = sorted({0, len(rows), *(min(c, len(rows)) for c in cuts)})
    # (with names no row has: a long vocabulary, of which only the used ones get codes)
    run_vocab = {
        name: sorted({getattr(r, name) for r in rows} | {f"x{i}" for i in range(9)}, reverse=True)
        for name in TEXT_COLUMNS
    }
    for k, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
        part = rows[a:b]
        if k % 2:
            got.extend(part)
            continue
        numbers, texts = {}, {}
        for name in TIMELINE_COLUMNS:
            values = [getattr(r, name) for r in part]
            if name in TEXT_COLUMNS:
                vocab = run_vocab[name] if shared else sorted(set(values), reverse=True)
                texts[name] = (vocab, np.array([vocab.index(v) for v in values], dtype=np.int64))
            else:
                numbers[name] = np.array([NONE if v is None else v for v in values], dtype=float)
        got.extend_columns(len(part), numbers, texts)
    assert len(got) == len(rows)
    back = list(got)
    assert all(_same(x, y) for x, y in zip(back, rows, strict=True))
    for name in TEXT_COLUMNS:
        assert got.texts(name) == want.texts(name)


def test_per_period_host_series_are_the_mean_of_each_periods_ticks() -> None:
    """HostSeries keeps a period's mean, not its ticks, past TICK_HOSTS hosts: the same
    numbers as averaging the kept ticks (k = 3 ticks a period, 7 ticks: 2 periods and a
    partial one of 1 tick)."""
    import numpy as np

    from sova.sim.world import TICK_HOSTS, HostSeries

    rng = np.random.default_rng(3)
    ticks = rng.uniform(0, 1, (7, TICK_HOSTS + 5))
    many, few = HostSeries(TICK_HOSTS + 5, 3), HostSeries(TICK_HOSTS, 3)
    for row in ticks:
        many.add(row)
        few.add(row[:TICK_HOSTS])
    assert many.ticks is None and few.ticks is not None
    want = np.vstack([ticks[:6].reshape(2, 3, -1).mean(axis=1), ticks[6:].mean(axis=0)])
    assert np.array_equal(many.periods(), want)
    assert np.array_equal(few.ticks, ticks[:, :TICK_HOSTS])
    assert many.busiest() == float(ticks.mean(axis=0).max())
    assert few.mean() == float(np.mean(ticks[:, :TICK_HOSTS]))
    assert abs(float(many.mean() or 0) - float(ticks.mean())) < 1e-12
    assert [list(r) for r in many.last] == [list(r) for r in ticks[-3:]]


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(
        st.floats(allow_nan=True, allow_infinity=True)
        | st.floats(-1e12, 1e12)
        | st.floats(-2.0, 2.0)
        | st.integers(-(10**6), 10**6).map(lambda k: k / 32)  # exact halves at 4 decimals
        | st.integers(-(10**9), 10**9).map(lambda k: k / 1e4 + 0.00005)  # near halves
        | st.none(),
        max_size=60,
    )
)
def test_float_cells_are_fmt_of_every_value(values: list[float | None]) -> None:
    """The column formatter writes what fmt writes, cell for cell: halves (1/32 is
    0.03125, "0.0312" when rounded half to even), values near a half, tiny negatives
    ("-0"), huge, NaN, infinite and empty cells."""
    import numpy as np

    from sova.record import NONE
    from sova.writer import float_cells, fmt

    a = np.array([NONE if v is None else v for v in values], dtype=float)
    m = float_cells(a)
    got = [bytes(row[row != 0]).decode() for row in m]
    assert got == [fmt(v) for v in values]


def test_a_spilled_timeline_reads_right_while_another_process_moves_the_file_position() -> None:
    """The report is drawn in a forked process while this one writes timeline.csv, both
    reading the spilled chunks through the one open temporary file (one file position
    for both). A read must not depend on that position: here the other process's move is
    made at the worst moment, right after every seek this process makes (seek-then-read
    read the wrong bytes for every chunk)."""
    import os

    import numpy as np

    from sova.record import Timeline

    n = 200
    tl = Timeline(chunk_rows=n, spill_bytes=0)  # 20 chunks, all in the file
    for at in range(0, 20 * n, n):
        tl.extend_columns(
            n,
            {c: np.arange(at, at + n, dtype=float) + k for k, c in enumerate(TIMELINE_COLUMNS)},
            {c: (["a", "b"], np.arange(n) % 2) for c in ("policy", "host", "vm", "nic")},
        )
    assert len(tl._chunks) == 20
    want = {c: tl.column(c) for c in TIMELINE_COLUMNS}
    real = tl._file
    assert real is not None

    class Shared:
        """The open file as two processes share it: the other one seeks too."""

        def seek(self, offset: int, whence: int = 0) -> int:
            at = real.seek(offset, whence)
            os.lseek(real.fileno(), 0, os.SEEK_SET)  # the other process's move
            return at

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

    tl._file = Shared()  # type: ignore[assignment]
    for c in TIMELINE_COLUMNS:
        assert np.array_equal(tl.column(c), want[c]), c


@settings(max_examples=100, deadline=None)
@given(
    rows=_rows_strategy(),
    chunk=st.integers(1, 7),
    spill=st.booleans(),
    pick=st.lists(st.sampled_from(TIMELINE_COLUMNS), unique=True, max_size=5),
)
def test_a_walk_of_some_columns_reads_those_columns_values(
    rows: list[Any], chunk: int, spill: bool, pick: list[str]
) -> None:
    """``chunks(columns)`` (a chunk read back from the file holds only those columns, each
    read at its own offset) gives every asked column's values as the whole walk does."""
    from sova.record import SPILL_BYTES, Timeline

    tl = Timeline(rows, chunk_rows=chunk, spill_bytes=0 if spill else SPILL_BYTES)
    whole = list(tl.chunks())
    some = list(tl.chunks(pick))
    assert [c.n for c in some] == [c.n for c in whole]
    for a, b in zip(some, whole, strict=True):
        assert set(pick) <= set(a.columns)
        for name in pick:
            np.testing.assert_array_equal(a.columns[name], b.columns[name])
