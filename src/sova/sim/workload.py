"""Workload generators for the simulated VMs.

A benchmark that "runs X % of the time" (the papers' netperf/lookbusy duty cycles) is an
on/off process: cycles of random length in ``[cycle_min, cycle_max]``, on for the first
``X·length`` of each, with a random phase. The on-time inside any interval is integrated
exactly, so a 10 s sample sees the true share of on-time of the cycles it overlaps: the
long-run mean is X, and samples vary with where the cycle boundaries fall — the kind of
sample-to-sample variation real counters show.
"""

from __future__ import annotations

import numpy as np


class DutyCycle:
    def __init__(
        self, duty: float, cycle_min: float, cycle_max: float, rng: np.random.Generator, t0: float
    ) -> None:
        if not 0.0 <= duty <= 1.0:
            raise ValueError(f"duty must be in [0, 1], got {duty}")
        self.duty = duty
        self._lo, self._hi = cycle_min, cycle_max
        self._rng = rng
        length = self._draw()
        # Random phase: the first cycle started somewhere before t0.
        self._start = t0 - float(rng.uniform(0.0, length))
        self._len = length

    def _draw(self) -> float:
        return float(self._rng.uniform(self._lo, self._hi))

    def on_fraction(self, t0: float, t1: float) -> float:
        """Share of [t0, t1) during which the benchmark runs. Calls must move forward."""
        if t1 <= t0:
            return 0.0
        if self.duty <= 0.0:
            return 0.0
        if self.duty >= 1.0:
            return 1.0
        on = 0.0
        t = t0
        while t < t1:
            while self._start + self._len <= t:
                self._start += self._len
                self._len = self._draw()
            on_end = self._start + self.duty * self._len
            cycle_end = self._start + self._len
            seg_end = min(t1, cycle_end)
            if t < on_end:
                on += min(seg_end, on_end) - t
            t = seg_end
        return on / (t1 - t0)
