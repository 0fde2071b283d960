"""Is the manager still planning? The planner's health as readiness sees it (issue 20).

A manager whose rounds fail, or stopped, still answers ``/healthz`` and still takes
reports; without this nothing an operator watches would turn red. Intervals are measured
on the monotonic clock (a wall-clock step neither hides a stall nor invents one); the
wall time of the last completed round is kept for display and the metrics only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class PlannerHealth:
    """The outcome of the last rounds; ``verdict`` says whether the planner is healthy.

    ``period_s`` is the planning period when rounds run on a timer, 0 when they are
    triggered by reports (then a quiet cluster plans nothing, and only failures count).
    """

    period_s: float
    overdue_periods: float = 2.0
    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    started_mono: float = field(init=False)
    last_ok_mono: float | None = None
    last_ok_wall: float | None = None
    last_duration_s: float = 0.0
    failures: int = 0  # consecutive
    last_error: str = ""

    def __post_init__(self) -> None:
        self.started_mono = self.monotonic()

    def completed(self, duration_s: float) -> None:
        self.last_ok_mono, self.last_ok_wall = self.monotonic(), self.wall()
        self.last_duration_s = duration_s
        self.failures, self.last_error = 0, ""

    def failed(self, exc: BaseException) -> None:
        self.failures += 1
        # One line: a database error carries its SQL and parameters on the next lines.
        self.last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[
            :300
        ]

    def overdue_s(self) -> float:
        """Seconds past when a round should have completed (0 if none is due)."""
        if self.period_s <= 0:
            return 0.0
        since = self.last_ok_mono if self.last_ok_mono is not None else self.started_mono
        # A round may legitimately take a while: its own last duration is allowed on top.
        allowed = self.overdue_periods * self.period_s + self.last_duration_s
        return max(0.0, self.monotonic() - since - allowed)

    def verdict(self) -> tuple[bool, str]:
        if self.failures:
            return False, (f"planning failed {self.failures} round(s) in a row: {self.last_error}")
        late = self.overdue_s()
        if late > 0:
            ago = self.monotonic() - (self.last_ok_mono or self.started_mono)
            what = "no round completed" if self.last_ok_mono is None else "last round completed"
            return False, (
                f"planning stopped: {what} {ago:.0f} s ago "
                f"(period {self.period_s:g} s, allowed {self.overdue_periods:g} periods)"
            )
        return True, "ok"
