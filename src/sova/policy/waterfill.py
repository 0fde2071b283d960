"""Weighted max-min fair sharing (water-filling) of many links' capacities among flows.

Used both as a *policy* (the Sova allocator's left-over sharing) and as a *mechanism*
(how a NIC or a software switch arbitrates among backlogged flows), so it lives here and
both sides call the same code. The arithmetic is the compiled core's
(rust/sova-core/src/waterfill.rs, docs/design.md "The compiled core"); these functions
shape the arrays and call it once for every link. The readable per-link form and the
numpy form it replaced are tests/waterfill_oracle.py, which the core is held to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sova.policy import _core

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def _f64(a: npt.ArrayLike) -> FloatArray:
    return np.ascontiguousarray(a, dtype=np.float64)


@dataclass(frozen=True)
class Links:
    """Flows laid out by the link they cross: link ``h``'s flows, in index order, are
    ``order[start[h]:start[h + 1]]``; ``n`` flows in all, of which the layout may hold a
    subset (the others get 0).

    Built once while the flows' links stay the same (a simulated world rebuilds it when a
    VM moves), so a fill only sorts within links.
    """

    n: int
    order: IntArray
    start: IntArray

    @classmethod
    def of(cls, group: npt.ArrayLike, n_links: int) -> Links:
        """Flow ``i`` crosses link ``group[i]`` (``0 <= group[i] < n_links``)."""
        g = np.asarray(group, dtype=np.int64)
        if g.size and (g.min() < 0 or g.max() >= n_links):
            bad = int(g[(g < 0) | (g >= n_links)][0])
            raise ValueError(f"group: link {bad} outside 0..{n_links}")
        order = np.argsort(g, kind="stable").astype(np.int64)
        return cls._from(g.size, order, g[order], n_links)

    @classmethod
    def _from(cls, n: int, flows: IntArray, links: IntArray, n_links: int) -> Links:
        start = np.zeros(n_links + 1, dtype=np.int64)
        np.cumsum(np.bincount(links, minlength=n_links), out=start[1:])
        return cls(n, np.ascontiguousarray(flows, dtype=np.int64), start)

    def subset(self, member: npt.NDArray[np.bool_]) -> Links:
        """The same links with only the flows where ``member`` is true (same indices)."""
        keep = np.asarray(member, dtype=bool)[self.order]
        links = np.repeat(np.arange(self.start.size - 1), np.diff(self.start))
        return Links._from(self.n, self.order[keep], links[keep], self.start.size - 1)


def grouped_waterfill(
    capacity: FloatArray,
    group: npt.NDArray[np.int64],
    demands: FloatArray,
    weights: FloatArray | None = None,
) -> FloatArray:
    """Water-fill many independent links at once: ``group[i]`` is the link (index into
    ``capacity``) flow ``i`` crosses, and each flow gets ``min(demand, level·weight)`` with
    its link's level as high as the link's capacity allows.
    """
    cap = _f64(capacity)
    return links_waterfill(cap, Links.of(group, cap.size), demands, weights)


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
    number, if the caller knows (weights that change rarely); checked in the core
    otherwise.
    """
    return _core.links_waterfill(
        _f64(capacity),
        links.order,
        links.start,
        _f64(demands),
        None if weights is None else _f64(weights),
        None if member is None else np.ascontiguousarray(member, dtype=np.bool_),
        whole,
    )


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
    return _core.floored_waterfill(
        _f64(capacity),
        np.ascontiguousarray(group, dtype=np.int64),
        _f64(demands),
        _f64(weights),
        _f64(floors),
    )
