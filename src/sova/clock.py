"""Time for every world: a simulated clock and a real-time clock with one interface.

:class:`Environment` is a tiny deterministic discrete-event core (a clock, an event heap,
``run(until=...)``): the simulator's operations complete on it. :class:`RealtimeEnvironment`
has the same interface but keeps its clock in step with the wall clock (``factor`` real
seconds per unit), sleeping until each event is due: the agent daemon and the namespace
testbed run on it. The agent's phase schedule (:mod:`sova.agent.schedule`) is driven by
either, as SimPy's ``Environment`` and ``RealtimeEnvironment`` drive one process.

Why not SimPy itself: Sova needs only timed callbacks, and the same seed must give
byte-identical output files. Ties at equal times are broken by insertion order, never by
object identity or hash order, so runs are reproducible across Python versions and
processes.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(order=True)
class _Event:
    time: float
    seq: int
    fn: Callable[[], None] = field(compare=False)


class Environment:
    """Simulated time: events run in time order, as fast as the CPU allows."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._heap: list[_Event] = []
        self._seq = itertools.count()

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        if delay < 0:
            raise ValueError(f"cannot schedule into the past (delay {delay})")
        heapq.heappush(self._heap, _Event(self.now + delay, next(self._seq), fn))

    def run(self, until: float) -> bool:
        """Process every event with time <= ``until``; the clock ends at ``until``.

        Returns False if the clock was stopped before ``until`` (never, here)."""
        while self._heap and self._heap[0].time <= until + 1e-9:
            ev = heapq.heappop(self._heap)
            if not self._wait_until(ev.time):
                return False
            self.now = ev.time
            ev.fn()
        if not self._wait_until(until):
            return False
        self.now = max(self.now, until)
        return True

    def behind(self) -> float:
        """How far the clock lags what it should show (always 0 for simulated time)."""
        return 0.0

    def _wait_until(self, t: float) -> bool:
        return True


class RealtimeEnvironment(Environment):
    """The same clock, in step with the wall clock (``factor`` real seconds per unit).

    A stop event ends every wait at once (``run`` then returns False). A loop that falls
    behind is not made to catch up by sleeping less later: events run late, in order, and
    :meth:`behind` tells the caller how late, so it can skip what is stale.
    """

    def __init__(
        self,
        start: float = 0.0,
        *,
        factor: float = 1.0,
        stop: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if factor <= 0:
            raise ValueError(f"factor must be > 0 (got {factor})")
        super().__init__(start)
        self.factor = factor
        self.stop = stop or threading.Event()
        self._clock = clock
        self._origin = clock() - start * factor

    def wall(self) -> float:
        """The wall clock in this environment's units."""
        return (self._clock() - self._origin) / self.factor

    def behind(self) -> float:
        return max(0.0, self.wall() - self.now)

    def _wait_until(self, t: float) -> bool:
        delay = (t - self.wall()) * self.factor
        if delay > 0:
            return not self.stop.wait(delay)
        return not self.stop.is_set()
