"""The policy's arithmetic as array kernels over every host of a cluster at once.

What is left of them here is the layout the bandwidth step groups flows by and an exact
per-host sum; the allocator itself is the compiled core's (:mod:`sova.policy.allocation`).

Flows are grouped by host in a padded matrix (one row per host, one slot per flow, empty
slots 0): :class:`Groups` builds it once per round from a host index per flow.

Exactness. The specification sums with :func:`math.fsum` (correctly rounded). A row sum
here is computed with error-free transformations (Knuth's TwoSum: ``s + e == a + b``
exactly) and accepted when a bound proves it is the correctly rounded sum; rows the bound
cannot certify (sums within a few ulps of a rounding tie, rare) are summed by ``fsum``
itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sova.policy.loads import LoadArrays as LoadArrays
from sova.policy.loads import demand_load_arrays as demand_load_arrays
from sova.policy.loads import load_shares as load_shares

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_U = 2.0**-53  # unit roundoff of float64
_MANTISSA = (1 << 52) - 1  # a float64's fraction bits: all 0 on a power of two


@dataclass(frozen=True)
class Groups:
    """Flows grouped by host: ``row[i], slot[i]`` is flow ``i``'s cell in a host matrix."""

    n_hosts: int
    width: int
    row: IntArray
    slot: IntArray
    count: IntArray  # flows per host
    # host h's flows in slot order are order[start[h]:start[h + 1]] (the compiled core's layout)
    order: IntArray
    start: IntArray

    @classmethod
    def of(cls, host: IntArray, n_hosts: int) -> Groups:
        host = np.asarray(host, dtype=np.int64)
        count = np.bincount(host, minlength=n_hosts).astype(np.int64)
        order = np.argsort(host, kind="stable")
        starts = np.concatenate(([0], np.cumsum(count)[:-1]))
        slot = np.empty(len(host), dtype=np.int64)
        slot[order] = np.arange(len(host), dtype=np.int64) - starts[host[order]]
        width = int(count.max()) if len(count) and len(host) else 0
        start = np.concatenate(([0], np.cumsum(count))).astype(np.int64)
        return cls(n_hosts, width, host, slot, count, order.astype(np.int64), start)

    def matrix(self, values: FloatArray) -> FloatArray:
        m = np.zeros((self.n_hosts, self.width))
        m[self.row, self.slot] = values
        return m

    def fsum(self, values: FloatArray) -> FloatArray:
        """``math.fsum`` of each host's flows (0.0 for a host without flows)."""
        return row_fsum(self.matrix(values))


def _two_sum(a: FloatArray, b: FloatArray) -> tuple[FloatArray, FloatArray]:
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def row_fsum(m: FloatArray) -> FloatArray:
    """``math.fsum`` of every row of a finite matrix, vectorised (see the module docstring)."""
    rows, width = m.shape
    if width == 0:
        return np.zeros(rows)
    s = m[:, 0].copy()
    c = np.zeros(rows)
    c_abs = np.zeros(rows)
    for j in range(1, width):
        s, e = _two_sum(s, m[:, j])
        c += e
        c_abs += np.abs(e)
    # s + (exact sum of the e's) is the exact sum; c is that sum rounded at most width-2
    # times, so off by at most delta.
    r, t = _two_sum(s, c)
    delta = 2.0 * width * _U * c_abs
    # r is the correctly rounded sum when the rest (t, plus c's error) stays inside r's
    # rounding interval: half an ulp of r (np.spacing) each side, but only a quarter of
    # it below a power of two (the ulp under it is half the one above). The comparison is
    # exact enough: the limit is a power of two and rounding is monotonic.
    a = np.abs(r)
    pow2 = (a.view(np.int64) & _MANTISSA) == 0
    limit = np.spacing(a) * np.where(pow2, 0.25, 0.5)
    ok = (np.abs(t) + delta < limit) | ((delta == 0) & (t == 0))
    if not ok.all():
        for i in np.flatnonzero(~ok).tolist():
            r[i] = math.fsum(m[i].tolist())
    return r
