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


def grouped_waterfill(
    capacity: FloatArray,
    group: npt.NDArray[np.int64],
    demands: FloatArray,
    weights: FloatArray | None = None,
) -> FloatArray:
    """:func:`waterfill` for many independent links at once, without a Python loop.

    ``group[i]`` is the link (index into ``capacity``) flow ``i`` crosses. Within each
    link, flows are sorted by their saturation level ``demand/weight``; the level at
    position ``k`` if every earlier flow is satisfied is ``(C − Σ earlier demands) / Σ
    remaining weights``; the first flow whose saturation level exceeds that is where the
    water stops, and it and every later flow of the link get ``level · weight``.
    """
    d = np.asarray(demands, dtype=np.float64)
    n = d.size
    if n == 0:
        return d.copy()
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    g = np.asarray(group, dtype=np.int64)
    cap = np.asarray(capacity, dtype=np.float64)
    sat = d / w
    order = np.lexsort((sat, g))
    gs, ds, ws, ss = g[order], d[order], w[order], sat[order]
    starts = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
    lengths = np.diff(np.r_[starts, n])
    cum_d = np.cumsum(ds)
    cum_w = np.cumsum(ws)
    before_d = cum_d - ds - np.repeat((cum_d - ds)[starts], lengths)
    total_w = np.repeat(np.add.reduceat(ws, starts), lengths)
    before_w = cum_w - ws - np.repeat((cum_w - ws)[starts], lengths)
    remaining_w = total_w - before_w
    level = (cap[gs] - before_d) / remaining_w
    unsat = ss > level
    pos = np.arange(n)
    # First unsaturated position of each link (n when every flow of the link is satisfied).
    first = np.minimum.reduceat(np.where(unsat, pos, n), starts)
    first_of = np.repeat(first, lengths)
    stop_level = np.where(first_of < n, level[np.minimum(first_of, n - 1)], np.inf)
    alloc_sorted = np.where(pos < first_of, ds, np.minimum(ds, stop_level * ws))
    out = np.empty(n)
    out[order] = alloc_sorted
    return out


def floored_waterfill(
    capacity: FloatArray,
    group: npt.NDArray[np.int64],
    demands: FloatArray,
    weights: FloatArray,
    floors: FloatArray,
) -> FloatArray:
    """:func:`grouped_waterfill` where flow ``i`` gets at least ``floors[i]`` (≤ its demand).

    A flow gets its floor or its fair share, whichever is larger: flows the plain fill
    leaves below their floor are pinned at it, their floors come off the link, and the
    others are filled again. Floors that over-commit a link shrink together.
    """
    d = np.asarray(demands, dtype=np.float64)
    lo = np.minimum(np.asarray(floors, dtype=np.float64), d)
    g = np.asarray(group, dtype=np.int64)
    cap = np.asarray(capacity, dtype=np.float64)
    committed = np.bincount(g, lo, minlength=cap.size)
    over = committed > cap
    if over.any():
        lo = lo * np.where(over, cap / np.maximum(committed, 1e-300), 1.0)[g]
    pinned = np.zeros(d.size, dtype=bool)
    alloc = np.zeros(d.size)
    for _ in range(d.size + 1):
        free = ~pinned
        residual = np.maximum(0.0, cap - np.bincount(g[pinned], lo[pinned], minlength=cap.size))
        alloc = np.where(pinned, lo, 0.0)
        idx = np.flatnonzero(free)
        if idx.size:
            alloc[idx] = grouped_waterfill(residual, g[idx], d[idx], weights[idx])
        low = free & (alloc < lo - 1e-9)
        if not low.any():
            break
        pinned |= low
    return alloc
