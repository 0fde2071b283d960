"""When an agent does what: the one schedule of its phases, driven by any clock.

Each tick an agent *polls* (collects finished operations and uses a freed VF at once);
every bandwidth period it runs its *bandwidth* controller; every control period it
*steps* (sense, decide, plan, apply). The simulator (``World.advance``), the demo's world
server, the agent daemon and the namespace testbed all take their turns from
:class:`PhaseSchedule`, so the order of the phases inside a tick and the tick on which a
period falls are the same everywhere.

Periods are counted in whole ticks, not accumulated in floating point: a 10 s period at
0.1 s ticks falls on every 100th tick, however long the run, which keeps simulated runs
byte-stable. On a real-time clock (:class:`sova.clock.RealtimeEnvironment`) a loop that
fell behind takes the latest tick that has passed and runs each phase missed since its
last turn once: it catches up without a burst.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sova.agent.loop import HostAgent, StepReport


class Phase(IntEnum):
    """An agent's phases, numbered in the order they run within one tick (the number is
    what the demo's world server and its agents exchange)."""

    POLL = 0
    BANDWIDTH = 1
    STEP = 2

    @property
    def label(self) -> str:
        """The name in metrics and logs (``loop`` label of the loop-duration histogram)."""
        return _LABELS[self]


_LABELS = {Phase.POLL: "poll", Phase.BANDWIDTH: "bandwidth", Phase.STEP: "control"}
POLL, BANDWIDTH, STEP = Phase.POLL, Phase.BANDWIDTH, Phase.STEP


class Clock(Protocol):
    """What the schedule needs of :class:`sova.clock.Environment` or its real-time twin."""

    @property
    def now(self) -> float: ...

    def run(self, until: float) -> bool: ...

    def behind(self) -> float: ...


def ticks(period_s: float, tick_s: float) -> int:
    """A period as a whole number of ticks (at least one)."""
    return max(1, int(round(period_s / tick_s)))


@dataclass(frozen=True)
class PhaseSchedule:
    tick_s: float
    period_s: float
    bandwidth_period_s: float | None = None  # None: no bandwidth phase

    @property
    def period_ticks(self) -> int:
        return ticks(self.period_s, self.tick_s)

    @property
    def bandwidth_ticks(self) -> int:
        return ticks(self.bandwidth_period_s, self.tick_s) if self.bandwidth_period_s else 0

    def phases(self, k: int, since: int | None = None) -> list[Phase]:
        """The phases due after tick ``k``, in order; ``since``: the last tick taken
        (default ``k - 1``), so that a skipped period still runs once."""
        last = k - 1 if since is None else since
        out = [POLL]
        bw = self.bandwidth_ticks
        if bw and k // bw > last // bw:
            out.append(BANDWIDTH)
        p = self.period_ticks
        if k // p > last // p:
            out.append(STEP)
        return out

    def turns(
        self, env: Clock, until: float = math.inf, *, at_start: bool = False
    ) -> Iterator[tuple[float, list[Phase]]]:
        """(time, phases) after each tick of ``env`` until ``until`` or the clock stops.

        ``at_start``: every phase once at time 0 too (a daemon acts on start; the
        simulator and the testbed first measure a period).
        """
        if at_start:
            yield env.now, [POLL, BANDWIDTH, STEP] if self.bandwidth_ticks else [POLL, STEP]
        k = 0
        while True:
            late = int(env.behind() // self.tick_s)  # whole ticks already past on the clock
            nxt = k + 1 + max(0, late - 1)
            t = nxt * self.tick_s
            if t > until + 1e-9 or not env.run(until=t):
                return
            yield env.now, self.phases(nxt, since=k)
            k = nxt


def act(agent: HostAgent, phase: Phase) -> StepReport | None:
    """Run one phase on ``agent``; a control step returns its report."""
    if phase == POLL:
        agent.poll()
    elif phase == BANDWIDTH:
        agent.bandwidth_step()
    elif phase == STEP:
        return agent.step()
    return None
