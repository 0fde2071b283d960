"""A tiny deterministic discrete-event core: a clock, an event heap, ``run(until=...)``.

Why not SimPy itself: Sova's simulated worlds need only timed callbacks, and the same
seed must give byte-identical output files. Ties at equal times are broken by insertion
order, never by object identity or hash order, so runs are reproducible across Python
versions and processes.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(order=True)
class _Event:
    time: float
    seq: int
    fn: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)


class Environment:
    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._heap: list[_Event] = []
        self._seq = itertools.count()

    def schedule(self, delay: float, fn: Callable[[], None]) -> _Event:
        if delay < 0:
            raise ValueError(f"cannot schedule into the past (delay {delay})")
        ev = _Event(self.now + delay, next(self._seq), fn)
        heapq.heappush(self._heap, ev)
        return ev

    def every(self, period: float, fn: Callable[[], None], start: float | None = None) -> None:
        """Call ``fn`` at ``start`` (default: now + period) and then every ``period``."""
        if period <= 0:
            raise ValueError(f"period must be > 0 (got {period})")

        def tick() -> None:
            fn()
            self.schedule(period, tick)

        self.schedule((start - self.now) if start is not None else period, tick)

    def run(self, until: float) -> None:
        """Process every event with time <= ``until``; the clock ends at ``until``."""
        while self._heap and self._heap[0].time <= until + 1e-9:
            ev = heapq.heappop(self._heap)
            if ev.cancelled:
                continue
            self.now = ev.time
            ev.fn()
        self.now = max(self.now, until)

    @staticmethod
    def cancel(ev: _Event) -> None:
        ev.cancelled = True
