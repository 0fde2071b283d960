"""Weighted max-min fair sharing (water-filling) of one capacity among demands.

Used both as a *policy* (the Sova allocator's left-over sharing) and as a *mechanism*
(how a NIC or a software switch arbitrates among backlogged flows), so it lives here,
pure and dependency-light, and both sides call the same code.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def waterfill(
    capacity: float,
    demands: Sequence[float] | FloatArray,
    weights: Sequence[float] | FloatArray | None = None,
) -> FloatArray:
    """Give each demand ``min(demand, level·weight)`` with the level as high as capacity allows.

    Returns the allocations in input order. Total = min(capacity, Σ demand).
    """
    d = np.asarray(demands, dtype=np.float64)
    if d.size == 0:
        return d.copy()
    if capacity < 0 or not np.isfinite(capacity):
        raise ValueError(f"capacity must be a finite value >= 0, got {capacity}")
    if np.any(d < 0) or not np.all(np.isfinite(d)):
        raise ValueError("demands must be finite and >= 0")
    w = np.ones_like(d) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != d.shape or np.any(w <= 0):
        raise ValueError("weights must be > 0, one per demand")
    if d.sum() <= capacity:
        return d.copy()
    # Sort by the level at which each flow saturates; fill until capacity runs out.
    sat = d / w
    order = np.argsort(sat, kind="stable")
    alloc = np.zeros_like(d)
    remaining = capacity
    w_left = w.sum()
    for i in order:
        level = remaining / w_left
        if sat[i] <= level:
            alloc[i] = d[i]
        else:
            alloc[i] = level * w[i]
        remaining -= alloc[i]
        w_left -= w[i]
    return alloc
