"""Hotness's readable forms, the oracle the compiled core is held to.

``skewness``/``volume``/``hotness`` are the per-host forms as ``coordinate``, the mover
choice and Watcher's plug-in ran them before the core (rust/sova-core/src/hotness.rs,
behind ``sova.policy.hotness``) replaced them; ``hotness_array`` is the numpy form the
manager's round (``manager/decisions/fastplan.py``) ranked cold spots with, kept step for
step. tests/test_hotness_core.py asks the core for the same floats as both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sova.policy.hotness import VOLUME_CLAMP, HotnessMetric, Utilisation


def skewness(r: Sequence[float]) -> float:
    """``sqrt(sum((r_i / mean(r) - 1)^2))``, 0 for an all-zero vector."""
    if not r:
        raise ValueError("skewness needs at least one utilisation")
    for i, value in enumerate(r):
        if not math.isfinite(value) or value < 0.0:
            raise ValueError(f"r[{i}] must be finite and >= 0, got {value!r}")
    mean = sum(r) / len(r)
    if mean == 0.0:
        return 0.0
    # d * d rather than d ** 2: C pow() may differ from a plain product in the last bit
    return math.sqrt(sum((d := value / mean - 1.0) * d for value in r))


def volume(cpu: float, mem: float, net: float) -> float:
    """``1 / ((1-cpu)(1-mem)(1-net))``, each utilisation clamped to ``VOLUME_CLAMP``."""
    product = 1.0
    for value in (cpu, mem, net):
        product *= 1.0 - min(value, VOLUME_CLAMP)
    return 1.0 / product


def hotness(u: Utilisation, metric: HotnessMetric | str = HotnessMetric.VOLUME) -> float:
    if HotnessMetric(metric) is HotnessMetric.SKEWNESS:
        return skewness(u.as_tuple())
    return volume(u.cpu, u.mem, u.net)


def hotness_array(last: np.ndarray, metric: HotnessMetric | str) -> np.ndarray:
    """The manager's former numpy form: the same operations in the same order as above."""
    c, m, n = last[:, 0], last[:, 1], last[:, 2]
    if HotnessMetric(metric) is HotnessMetric.SKEWNESS:
        mean = (c + m + n) / 3
        safe = np.where(mean == 0.0, 1.0, mean)
        d0, d1, d2 = c / safe - 1.0, m / safe - 1.0, n / safe - 1.0
        out: np.ndarray = np.where(mean == 0.0, 0.0, np.sqrt(d0 * d0 + d1 * d1 + d2 * d2))
        return out
    product = 1.0 - np.minimum(c, VOLUME_CLAMP)
    product = product * (1.0 - np.minimum(m, VOLUME_CLAMP))
    product = product * (1.0 - np.minimum(n, VOLUME_CLAMP))
    vol: np.ndarray = 1.0 / product
    return vol
