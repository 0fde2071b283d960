"""Water-filling's readable forms, the oracle the compiled core is held to.

``waterfill`` is the per-link form, one flow at a time as the definition reads; the rest is
the numpy array form the simulator ran before the core (rust/sova-core/src/waterfill.rs)
replaced it, kept step for step: the core computes the same floats in the same order, so
tests/test_waterfill.py asks for equality bit for bit with it, and within a stated
tolerance with the per-link form (whose sums run in another order). The benchmark
benchmarks/waterfill_core.py times the core against it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

_U = 2.0**-53  # unit roundoff of float64

# one link's fill: capacity, demands, weights -> allocations
OneLink = Callable[[float, list[float], list[float] | None], FloatArray]


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


@dataclass(frozen=True)
class Links:
    """Flows laid out by the link they cross: row ``g`` holds link ``g``'s flows in index
    order, then empty cells (flow index ``n``, one past the last flow).

    Built once while the flows' links stay the same (a simulated world rebuilds it when a
    VM moves), so each fill sorts only within rows instead of all flows at once.
    """

    n: int
    flows: int  # flows laid out (n unless a subset)
    cell: npt.NDArray[np.int64]  # (links, width): the flow in each cell, n if empty
    count: npt.NDArray[np.int64]  # flows per link
    real: npt.NDArray[np.bool_]  # (links, width): the cell holds a flow
    left: FloatArray  # (links, width): flows from this cell to the row's end (1 if empty)
    # each flow's link in index order when every flow is laid out (None for a subset):
    # per-link sums by one bincount instead of a gather of the layout
    group: npt.NDArray[np.int64] | None = None

    @classmethod
    def of(cls, group: npt.NDArray[np.int64], n_links: int) -> Links:
        g = np.asarray(group, dtype=np.int64)
        order = np.argsort(g, kind="stable")
        return cls._from(g.size, g[order], order, n_links, g.copy())

    @classmethod
    def _from(
        cls,
        n: int,
        g: npt.NDArray[np.int64],
        flows: npt.NDArray[np.int64],
        n_links: int,
        group: npt.NDArray[np.int64] | None = None,
    ) -> Links:
        """``flows`` (index order within each link) crossing links ``g`` (sorted)."""
        count = np.bincount(g, minlength=n_links)
        width = int(count.max()) if g.size else 0
        col = np.arange(g.size) - (np.cumsum(count) - count)[g]
        cell = np.full((n_links, width), n, dtype=np.int64)
        cell[g, col] = flows
        cols = np.arange(width)
        real = cols[None, :] < count[:, None]
        left = np.where(real, (count[:, None] - cols[None, :]).astype(np.float64), 1.0)
        return cls(n, g.size, cell, count, real, left, group)

    def subset(self, member: npt.NDArray[np.bool_]) -> Links:
        """The same links with only the flows where ``member`` is true (same indices)."""
        keep = np.append(member, False)[self.cell]
        rows = np.broadcast_to(np.arange(self.cell.shape[0])[:, None], keep.shape)
        return Links._from(self.n, rows[keep], self.cell[keep], self.cell.shape[0])


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
    if d.size == 0:
        return d.copy()
    cap = np.asarray(capacity, dtype=np.float64)
    return links_waterfill(cap, Links.of(group, cap.size), d, weights)


def links_waterfill(
    capacity: FloatArray,
    links: Links,
    demands: FloatArray,
    weights: FloatArray | None = None,
    member: npt.NDArray[np.bool_] | None = None,
    whole: bool | None = None,
) -> FloatArray:
    """:func:`grouped_waterfill` of the flows laid out in ``links`` (others get 0), or of
    only those where ``member`` is true. ``whole``: whether every weight is a whole
    number, if the caller knows (weights that change rarely); checked here otherwise.

    Sums run over the flows in the order the one-array form always used (every link's
    flows sorted by saturation level, links in index order, one running sum across them):
    an empty cell adds 0.0, which leaves every partial sum bit for bit the same. When
    every link has clear room for all its flows, each flow gets its demand without a sort
    (:func:`_all_fit`).
    """
    n = links.n
    d_ext = np.zeros(n + 1)
    d_ext[:n] = demands if member is None else np.where(member, demands, 0.0)
    if whole is None:
        whole = weights is None or np.array_equal(weights, np.trunc(weights))
    if whole and _all_fit(capacity, links, d_ext):
        if links.flows == n:
            return d_ext[:n]
        out = np.zeros(n + 1)
        out[links.cell] = d_ext[links.cell]
        return out[:n]
    if member is not None:
        links = links.subset(member)
    if weights is None:
        sat_ext = d_ext.copy()
    else:
        w_ext = np.zeros(n + 1)
        w_ext[:n] = weights
        sat_ext = np.empty(n + 1)
        np.divide(d_ext[:n], w_ext[:n], out=sat_ext[:n])
    sat_ext[n] = np.nan  # empty cells sort after every flow, NaN demands included
    cell = links.cell
    width = cell.shape[1]
    out = np.zeros(n + 1)
    if width == 0:
        return out[:n]
    s = np.take_along_axis(cell, np.argsort(sat_ext[cell], axis=1, kind="stable"), axis=1)
    ds = d_ext[s]
    ex_d = np.cumsum(ds).reshape(ds.shape)
    ex_d -= ds
    before_d = ex_d - ex_d[:, :1]
    if weights is None:
        remaining_w = links.left  # sums of ones: exact in any order
    elif whole:
        # whole numbers sum exactly in any order: the same floats from one row's sums
        ws = w_ext[s]
        before_w = np.cumsum(ws, axis=1)
        before_w -= ws
        remaining_w = np.where(links.real, ws.sum(axis=1)[:, None] - before_w, 1.0)
    else:
        ws = w_ext[s]
        ex_w = np.cumsum(ws).reshape(ws.shape)
        ex_w -= ws
        before_w = ex_w - ex_w[:, :1]
        full = links.count > 0
        total_w = np.zeros(cell.shape[0])
        starts = (np.cumsum(links.count) - links.count)[full]
        total_w[full] = np.add.reduceat(ws[links.real], starts)
        remaining_w = np.where(links.real, total_w[:, None] - before_w, 1.0)
    level = (capacity[:, None] - before_d) / remaining_w
    unsat = sat_ext[s] > level
    # first unsaturated cell of each link (width when every flow is satisfied)
    first = np.where(unsat.any(axis=1), unsat.argmax(axis=1), width)
    stop = level[np.arange(cell.shape[0]), np.minimum(first, width - 1)][:, None]
    fill = stop if weights is None else stop * ws
    out[s] = np.where(np.arange(width)[None, :] < first[:, None], ds, np.minimum(ds, fill))
    return out[:n]


def _all_fit(capacity: FloatArray, links: Links, d_ext: FloatArray) -> bool:
    """Every link's flows fit with a margin the fill's rounding cannot cross, so the
    fill would give every flow its demand exactly.

    Sorted by level, flow ``k``'s level is at most (Σ demands from ``k`` on) / (Σ weights
    from ``k`` on), and the fill's level there is (C − Σ earlier demands) / the same
    weights: at least the flow's own level plus (C − Σ demands) / weights. The fill's
    running sums go across all links, so their rounding is below (2n + 4)·u·S (n flows, S
    the sum of all demands); whole-number weights sum exactly. A slack above 8(n + 2)·u·(S
    + max C) plus 1e-9·C leaves every flow satisfied in floating point as in exact
    arithmetic. Only for whole-number weights (fractional ones' sums round too).
    """
    if links.group is not None:
        # (each link's flows summed in index order: rounding of the same bound as the
        # layout's row sums, which the slack below covers for any order)
        total = np.bincount(links.group, d_ext[: links.n], minlength=capacity.size)
    else:
        total = d_ext[links.cell].sum(axis=1)
    s = total.sum()
    bound = 8.0 * (links.n + 2) * _U * (s + capacity.max()) + 1e-9 * capacity
    return bool(((capacity - total > bound) | (links.count == 0)).all())


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
