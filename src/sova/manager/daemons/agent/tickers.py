"""The agent daemon's clocks: each hands the loop its turns (the time and the phases due).

All take their phases from the one schedule (:mod:`sova.agent.schedule`): on a real host
driven by the wall clock, in ``--driver sim`` by a world simulated in this process, and in
the demo by the world server, which hands out one phase at a time in lockstep.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from sova.agent.schedule import Phase, PhaseSchedule
from sova.clock import Environment, RealtimeEnvironment
from sova.driver.base import Driver, DriverError

log = logging.getLogger("sova.agent")


class Ticker(Protocol):
    """Hands the loop its turns: the driver time and the phases due then."""

    def next(self) -> tuple[float, list[Phase]] | None: ...


class WallTicker:
    """Real time: the agent's phase schedule on the wall clock, a tick per poll interval.

    Every phase runs once at start; after that the control and bandwidth periods fall on
    whole ticks (a period is rounded to the poll interval), and a loop that stalled runs
    each missed phase once instead of bursting.
    """

    def __init__(
        self,
        driver: Driver,
        period_s: float,
        bandwidth_period_s: float | None,
        poll_interval_s: float,
        stop: threading.Event,
    ) -> None:
        self.driver = driver
        tick = min(poll_interval_s, period_s, bandwidth_period_s or math.inf)
        schedule = PhaseSchedule(tick, period_s, bandwidth_period_s)
        self._turns = schedule.turns(RealtimeEnvironment(stop=stop), at_start=True)

    def next(self) -> tuple[float, list[Phase]] | None:
        turn = next(self._turns, None)
        if turn is None:
            return None
        return self.driver.now(), turn[1]


class Turns(Protocol):
    """A world that hands out turns (the demo's, :class:`sova.sim.world_server.WorldHost`)."""

    def sync(self, at: float, phase: int, wait_s: float = ...) -> tuple[float, int, bool]: ...


@dataclass
class LockstepTicker:
    """Turns handed out by a world server (``sova demo``): one phase per call."""

    driver: Turns
    stop: threading.Event
    wait_s: float = 2.0  # short: a stop request is noticed between long-polls
    _at: float = -1.0
    _phase: Phase = Phase.POLL

    def next(self) -> tuple[float, list[Phase]] | None:
        while not self.stop.is_set():
            try:
                t, phase, done = self.driver.sync(self._at, self._phase, self.wait_s)
            except DriverError as exc:
                log.warning("world unreachable: %s", exc)
                if self.stop.wait(1.0):
                    return None
                continue
            if done:
                return None
            if phase < 0:
                continue
            self._at, self._phase = t, Phase(phase)
            return t, [self._phase]
        return None


@dataclass
class LocalSimTicker:
    """A world simulated in this process (``--driver sim``), advanced ``speed`` x real time
    (as fast as it goes without ``speed``)."""

    world: Any
    tick_s: float
    period_s: float
    bandwidth_period_s: float | None
    until_s: float
    speed: float | None
    stop: threading.Event
    _k: int = 0

    def __post_init__(self) -> None:
        self.schedule = PhaseSchedule(self.tick_s, self.period_s, self.bandwidth_period_s)
        self.pace: Environment = (
            RealtimeEnvironment(factor=1.0 / self.speed, stop=self.stop)
            if self.speed
            else Environment()
        )

    def next(self) -> tuple[float, list[Phase]] | None:
        if self.stop.is_set() or self.world.now >= self.until_s - 1e-9:
            return None
        self.world.advance()
        self._k += 1
        if not self.pace.run(until=self._k * self.tick_s):
            return None
        return float(self.world.now), self.schedule.phases(self._k)
