"""Alg. 2 over thousands of hosts within a report period: the detector vectorised over hosts.

:func:`sova.policy.hotspot.coordinate` is the readable specification; it judges every host
with the scalar AR(1)/k-of-n detector, ~80 µs a host in CPython, so a round over 10,000
hosts took 0.5-1.4 s of CPU in the manager's process and stalled its HTTP loop (the GIL).
:func:`coordinate_windows` (and :func:`fast_coordinate`, its form over host reports) returns
*exactly* what ``coordinate`` returns (property tests compare them signal by signal, reasons
included):

1. every host's verdict is computed at once by the compiled core
   (:func:`sova.policy.verdicts.verdict_arrays`), the same function ``coordinate``'s
   detector calls for one host, so forecasts are bit-equal;
2. the hot hosts' verdicts are built from those arrays, every observed host is ranked
   once from its latest row, and :func:`sova.policy.hotspot.plan_hot` (what
   ``coordinate`` runs after its verdicts) chooses the movers and screens every hot host
   for a cold spot in one call of the core (``sova.policy.cold_spots.screen_round``): a
   round costs about hosts, however many are hot and however few find a target.

The manager keeps its windows in :class:`WindowArrays` (a host x window ring of floats; the
core's windows are views of it, :class:`ArrayWindow`, whose ``Utilisation`` objects are built
only when read), so a round reads them without rebuilding an array from objects, a batch of
reports lands in one array assignment, and a host that is not hot gets its "not hot" reason only when someone reads its
signal (:class:`Signals`): a simulated round reads a handful of the thousands.
"""

from __future__ import annotations

from collections.abc import (
    Callable,
    Collection,
    Iterator,
    Mapping,
    MutableMapping,
    Sequence,
    Sized,
)
from itertools import chain, compress, repeat
from operator import is_
from typing import Any

import numpy as np

from sova.policy.cold_spots import RankedHosts
from sova.policy.hotspot import (
    PAPERS_MOVE,
    RESOURCES,
    HostCapacity,
    HostReport,
    HotnessMetric,
    HotspotDetector,
    HotspotVerdict,
    MigrationSignal,
    MoveCost,
    Utilisation,
    coordinate,
    plan_hot,
)
from sova.policy.verdicts import verdict_arrays

# Below this many hosts the scalar round over reports is cheap enough and numpy's set-up
# (building the windows from objects) dominates.
FAST_MIN_HOSTS = 256

# (names, over-counts (m, 3), forecasts (m, 3), observations in their window)
_Quiet = tuple[list[str], np.ndarray, np.ndarray, int]


def _reason(over: np.ndarray, n_obs: int, forecast: np.ndarray, alpha: float) -> str:
    parts = [
        f"{r} {int(over[i])}/{n_obs} over {alpha:g}, forecast {float(forecast[i]):.3f}"
        for i, r in enumerate(RESOURCES)
    ]
    return "not hot: " + "; ".join(parts)


class Signals(MutableMapping[str, MigrationSignal]):
    """A round's signals by host, in name order, as ``coordinate`` returns them; a host that
    is not hot gets its signal (and its "not hot" reason, ~15 µs of string formatting) when
    it is first read. :meth:`notable` lists the others without building any."""

    def __init__(self, explicit: dict[str, MigrationSignal], quiet: list[_Quiet], alpha: float):
        self._explicit = explicit
        self._quiet = quiet
        self._alpha = alpha
        self._index: dict[str, tuple[int, int]] | None = None
        self._built: dict[str, MigrationSignal] = {}

    def _where(self) -> dict[str, tuple[int, int]]:
        if self._index is None:
            self._index = {
                name: (g, j)
                for g, (names, _, _, _) in enumerate(self._quiet)
                for j, name in enumerate(names)
                if name not in self._explicit
            }
        return self._index

    def notable(self) -> list[tuple[str, MigrationSignal]]:
        """The signals that are not a plain "not hot" verdict (hot hosts, and any set
        since), by name: the only ones that can flag, carry hot resources or a target."""
        return sorted(self._explicit.items())

    def __getitem__(self, host: str) -> MigrationSignal:
        sig = self._explicit.get(host)
        if sig is not None:
            return sig
        sig = self._built.get(host)
        if sig is None:
            g, j = self._where()[host]
            _, over, forecast, n_obs = self._quiet[g]
            sig = MigrationSignal(False, None, _reason(over[j], n_obs, forecast[j], self._alpha))
            self._built[host] = sig
        return sig

    def __setitem__(self, host: str, sig: MigrationSignal) -> None:
        self._where().pop(host, None)
        self._built.pop(host, None)
        self._explicit[host] = sig

    def __delitem__(self, host: str) -> None:
        if host in self._explicit:
            del self._explicit[host]
        else:
            del self._where()[host]
            self._built.pop(host, None)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(chain(self._explicit, self._where())))

    def __len__(self) -> int:
        return len(self._explicit) + len(self._where())

    def __contains__(self, host: object) -> bool:
        return host in self._explicit or host in self._where()

    def __repr__(self) -> str:
        return f"Signals({dict(self.items())!r})"


def notable(signals: Mapping[str, MigrationSignal]) -> list[tuple[str, MigrationSignal]]:
    """The signals of ``signals`` that are not a plain "not hot" verdict, by host name (all
    of them for a mapping that is not :class:`Signals`: the plain verdicts are harmless)."""
    if isinstance(signals, Signals):
        return signals.notable()
    return sorted(signals.items())


class ArrayWindow(Sequence[Utilisation]):
    """One host's detector window as the core keeps it: a view of its row of
    :class:`WindowArrays`, oldest first, with a deque's ``append``/``clear``/``maxlen``. A
    batch of reports (:meth:`ManagerCore.ingest_arrays`) writes the rows in one array
    assignment, so no ``Utilisation`` is built per host and report; a reader (a decision's
    quote, the daemon's state, a test) gets them built from the floats, equal to the ones
    reported. A view whose host was forgotten or given another window reads empty."""

    __slots__ = ("arrays", "host")

    def __init__(self, arrays: WindowArrays, host: str) -> None:
        self.arrays = arrays
        self.host = host

    @property
    def maxlen(self) -> int:
        return self.arrays.n

    def _rows(self) -> list[list[float]]:
        return self.arrays.read(self.host, self)

    def __len__(self) -> int:
        return self.arrays.length(self.host, self)

    def __iter__(self) -> Iterator[Utilisation]:
        return iter([Utilisation(*r) for r in self._rows()])

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [Utilisation(*r) for r in self._rows()[i]]
        return Utilisation(*self._rows()[i])

    def append(self, u: Utilisation) -> None:
        self.arrays.append(self.host, self, u)

    def clear(self) -> None:
        if self.arrays.owner.get(self.host) is self:
            self.arrays.clear(self.host)

    def __repr__(self) -> str:
        return f"ArrayWindow({list(self)!r})"


class WindowArrays:
    """The manager's detector windows as one (hosts, n, 3) float64 ring buffer: each host's
    last ``n`` utilisations, oldest at ``head`` once full. The core's windows are views of
    it (:class:`ArrayWindow`); a window object put into ``history`` from outside (a deque of
    ``Utilisation``: a restore, a test) is mirrored here, and copied again when replaced
    (:meth:`windows`)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.row: dict[str, int] = {}
        self.owner: dict[str, Sized] = {}  # host -> the window object its row mirrors
        self.count = np.zeros(0, dtype=np.intp)
        self.head = np.zeros(0, dtype=np.intp)
        self.used = 0  # rows handed out (free ones are reused first)
        self.free: list[int] = []
        self.values = np.zeros((0, n, 3), dtype=np.float64)
        # (row, slot) -> its newest value, written into ``values`` when a round reads them:
        # one array assignment per round instead of one per report.
        self.pending: dict[tuple[int, int], Utilisation] = {}

    def _flush(self) -> None:
        pending = self.pending
        if pending:
            at = np.array(list(pending), dtype=np.intp)
            self.values[at[:, 0], at[:, 1]] = [(u.cpu, u.mem, u.net) for u in pending.values()]
            pending.clear()

    def _alloc(self, host: str) -> int:
        r = self.row.get(host)
        if r is not None:
            return r
        if self.free:
            r = self.free.pop()
        else:
            r = self.used
            self.used += 1
            if r >= len(self.values):
                size = max(64, 2 * len(self.values))
                grown = np.zeros((size, self.n, 3), dtype=np.float64)
                grown[: len(self.values)] = self.values
                self.values = grown
                self.count = np.concatenate((self.count, np.zeros(size - len(self.count), np.intp)))
                self.head = np.concatenate((self.head, np.zeros(size - len(self.head), np.intp)))
        self.row[host] = r
        return r

    def window(self, host: str) -> ArrayWindow:
        """A new, empty window for ``host``, kept here (the core's ``history`` holds it)."""
        r = self._alloc(host)
        self.count[r] = self.head[r] = 0
        w = self.owner[host] = ArrayWindow(self, host)
        return w

    def length(self, host: str, window: Sized) -> int:
        r = self.row.get(host)
        return 0 if r is None or self.owner.get(host) is not window else int(self.count[r])

    def observed(self, history: Mapping[str, Sized]) -> list[str]:
        """The hosts of ``history`` whose window is not empty, in its order (a view's length
        read from the counts, not per host through its methods)."""
        count, row, owner = self.count, self.row, self.owner
        names, windows = list(history), list(history.values())
        n = len(names)
        # (every host's checks through C-level maps: a simulated world's manager reads
        # every host's window each period, and all are views of these arrays)
        own = np.fromiter(map(is_, map(owner.get, names), windows), dtype=bool, count=n)
        own &= np.fromiter(map(is_, map(type, windows), repeat(ArrayWindow)), dtype=bool, count=n)
        if own.all():
            rows = np.fromiter(map(row.__getitem__, names), dtype=np.intp, count=n)
            return list(compress(names, (count[rows] > 0).tolist()))
        counts = count.tolist()
        return [
            h
            for h, w, mine in zip(names, windows, own.tolist(), strict=True)
            if (counts[row[h]] if mine else len(w))
        ]

    def read(self, host: str, window: Sized) -> list[list[float]]:
        """``host``'s window (oldest first) as rows of floats, if ``window`` is its owner."""
        r = self.row.get(host)
        if r is None or self.owner.get(host) is not window:
            return []
        self._flush()
        c, h = int(self.count[r]), int(self.head[r])
        rows: list[list[float]] = self.values[r, (h + np.arange(c)) % self.n].tolist()
        return rows

    def peek(self, host: str, window: Sized) -> list[list[float]]:
        """:meth:`read` without writing the pending values into the arrays: for a reader
        on the event loop while a round may be reading the arrays in a worker thread."""
        r = self.row.get(host)
        if r is None or self.owner.get(host) is not window:
            return []
        c, h = int(self.count[r]), int(self.head[r])
        slots = ((h + np.arange(c)) % self.n).tolist()
        rows: list[list[float]] = self.values[r, slots].tolist()
        pending = dict(self.pending)  # one copy: a round's flush may clear it meanwhile
        for i, slot in enumerate(slots):
            u = pending.get((r, slot))
            if u is not None:
                rows[i] = [u.cpu, u.mem, u.net]
        return rows

    def sync(self, host: str, window: Sequence[Utilisation]) -> None:
        """Copy ``window`` (oldest first) into ``host``'s row."""
        self._flush()  # an older pending value must not land on the copy
        last = list(window)[-self.n :]
        r = self._alloc(host)
        if last:
            self.values[r, : len(last)] = [u.as_tuple() for u in last]
        self.count[r], self.head[r] = len(last), 0
        self.owner[host] = window

    def append(self, host: str, window: Sequence[Utilisation], u: Utilisation) -> None:
        """``u`` was appended to ``window``, ``host``'s window (or is, for its view)."""
        r = self.row.get(host)
        if r is None or self.owner[host] is not window:
            self.sync(host, window)  # a deque already holds u; a view gets it below
            if not isinstance(window, ArrayWindow):
                return
            r = self.row[host]
        c = int(self.count[r])
        if c < self.n:
            pos = c
            self.count[r] = c + 1
        else:
            pos = int(self.head[r])
            self.head[r] = pos + 1 if pos + 1 < self.n else 0
        self.pending[r, pos] = u

    def extend(self, rows: np.ndarray, values: np.ndarray) -> None:
        """One report per row of ``rows`` (distinct rows of views), ``values`` (m, 3)
        already validated: what :meth:`append` of each does, in one assignment."""
        self._flush()  # a pending value of an earlier slot must not land after these
        n = self.n
        c, h = self.count[rows], self.head[rows]
        full = c >= n
        pos = np.where(full, h, c)
        self.values[rows, pos] = values
        self.count[rows] = np.where(full, c, c + 1)
        self.head[rows] = np.where(full, (h + 1) % n, h)

    def clear(self, host: str) -> None:
        r = self.row.get(host)
        if r is not None:
            self.count[r] = self.head[r] = 0

    def drop(self, host: str) -> None:
        r = self.row.pop(host, None)
        if r is not None:
            self.owner.pop(host, None)
            self.count[r] = self.head[r] = 0
            self.free.append(r)

    def windows(
        self, names: Sequence[str], history: Mapping[str, Sequence[Utilisation]]
    ) -> tuple[list[tuple[int, np.ndarray, np.ndarray]], np.ndarray]:
        """The windows of ``names`` (each in ``history``): groups ``(observations, positions
        in names, windows (m, observations, 3))`` and every host's latest row (hosts, 3)."""
        owner = self.owner
        self._flush()
        windows = list(map(history.__getitem__, names))
        if not all(map(is_, map(owner.get, names), windows)):  # (C-level, every host)
            for h, w in zip(names, windows, strict=True):
                if owner.get(h) is not w:
                    self.sync(h, w)
        rows = np.fromiter(map(self.row.__getitem__, names), dtype=np.intp, count=len(names))
        count = self.count[rows]
        head = self.head[rows]
        last = self.values[rows, (head + count - 1) % self.n]
        groups = []
        for n_obs in np.unique(count).tolist():
            sel = np.flatnonzero(count == n_obs)
            pos = (head[sel, None] + np.arange(n_obs)) % self.n
            groups.append((n_obs, sel, self.values[rows[sel, None], pos]))
        return groups, last


def coordinate_windows(
    names: Sequence[str],
    groups: Sequence[tuple[int, np.ndarray, np.ndarray]],
    last: np.ndarray,
    report: Callable[[str], HostReport],
    detector: HotspotDetector,
    *,
    metric: HotnessMetric | str = HotnessMetric.VOLUME,
    ceiling: float | None = None,
    leased: Collection[str] = frozenset(),
    barred: Mapping[str, Collection[str]] | None = None,
    fenced: Mapping[str, str] | None = None,
    cost: MoveCost = PAPERS_MOVE,
    prefer: Mapping[str, tuple[str, str]] | None = None,
    capacity: Callable[[str], HostCapacity | None] | None = None,
) -> Signals:
    """Exactly ``coordinate({h: report(h) for h in names}, detector, ...)``, from the hosts'
    windows as arrays (``groups``: ``(observations, positions in names, windows (m,
    observations, 3))``, every host in one; ``last``: each host's latest utilisation).
    ``report`` is called for the hot hosts only (their VMs), ``capacity`` (default: the
    report's) for every host."""
    explicit: dict[str, MigrationSignal] = {}
    quiet: list[_Quiet] = []
    hot: dict[str, HotspotVerdict] = {}
    observed = np.zeros(len(names), dtype=bool)
    for n_obs, sel, windows in groups:
        if n_obs == 0:
            for j in sel.tolist():
                explicit[names[j]] = MigrationSignal(False, None, "no observations")
            continue
        observed[sel] = True
        v = verdict_arrays(windows, detector.alpha, detector.k)
        over, forecast, hot_res = v.over, v.forecast, v.hot
        is_hot = np.asarray(hot_res.any(axis=1), dtype=bool)
        rows = np.flatnonzero(is_hot).tolist()
        judged = detector.verdicts(v, rows, n_obs)
        hot.update(zip([names[j] for j in sel[rows].tolist()], judged, strict=True))
        calm = ~is_hot
        quiet.append(([names[j] for j in sel[calm].tolist()], over[calm], forecast[calm], n_obs))
    caps = _capacities(names, capacity or (lambda h: report(h).capacity))
    if not hot:
        return Signals(explicit, quiet, detector.alpha)
    at = np.flatnonzero(observed)
    ranked = RankedHosts([names[j] for j in at.tolist()], last[at], metric, detector.alpha, caps)
    explicit |= plan_hot(
        hot,
        ranked,
        lambda h: report(h).vms,
        metric=metric,
        ceiling=ceiling,
        leased=leased,
        barred=barred,
        fenced=fenced,
        cost=cost,
        prefer=prefer,
    )
    return Signals(explicit, quiet, detector.alpha)


def _capacities(
    names: Sequence[str], capacity: Callable[[str], HostCapacity | None]
) -> dict[str, HostCapacity] | None:
    """As ``coordinate`` reads them: every host's, or None when no host has one."""
    given = {h: c for h in names if (c := capacity(h)) is not None}
    if given and len(given) != len(names):
        missing = sorted(set(names) - set(given))
        raise ValueError(f"capacity given for some hosts but not for {missing}")
    return given or None


def fast_coordinate(
    reports: Mapping[str, HostReport],
    detector: HotspotDetector,
    *,
    metric: HotnessMetric | str = HotnessMetric.VOLUME,
    ceiling: float | None = None,
    leased: Collection[str] = frozenset(),
    barred: Mapping[str, Collection[str]] | None = None,
    fenced: Mapping[str, str] | None = None,
    cost: MoveCost = PAPERS_MOVE,
    prefer: Mapping[str, tuple[str, str]] | None = None,
) -> Mapping[str, MigrationSignal]:
    """Exactly ``coordinate(reports, detector, ...)``, in a fraction of its time."""
    if len(reports) < FAST_MIN_HOSTS:
        return coordinate(
            reports,
            detector,
            metric=metric,
            ceiling=ceiling,
            leased=leased,
            barred=barred,
            fenced=fenced,
            cost=cost,
            prefer=prefer,
        )
    names = list(reports)
    n = detector.n
    by_len: dict[int, list[int]] = {}
    for j, rep in enumerate(reports.values()):
        by_len.setdefault(min(len(rep.history), n), []).append(j)
    groups = []
    last = np.zeros((len(names), 3), dtype=np.float64)
    for n_obs, at in by_len.items():
        sel = np.asarray(at, dtype=np.intp)
        if n_obs == 0:
            groups.append((0, sel, np.zeros((len(at), 0, 3))))
            continue
        # one flat list of floats: a nested list per host and observation costs twice
        flat = [
            x for j in at for u in reports[names[j]].history[-n:] for x in (u.cpu, u.mem, u.net)
        ]
        windows = np.array(flat, dtype=np.float64).reshape(len(at), n_obs, 3)
        last[sel] = windows[:, -1]
        groups.append((n_obs, sel, windows))
    return coordinate_windows(
        names,
        groups,
        last,
        reports.__getitem__,
        detector,
        metric=metric,
        ceiling=ceiling,
        leased=leased,
        barred=barred,
        fenced=fenced,
        cost=cost,
        prefer=prefer,
    )
