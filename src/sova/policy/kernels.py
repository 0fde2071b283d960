"""The policy's arithmetic as array kernels over every host of a cluster at once.

The readable per-host functions (:class:`~sova.policy.bandwidth.SovaAllocator`,
:func:`~sova.policy.bandwidth.clamped_fill`) are the specification; these kernels are what
the agent runs, for one host (``HostAgent``) or for all hosts of a simulated world at once
(``World``), and ``tests/test_kernels.py`` holds them *equal* to the specification on random
heterogeneous clusters: same floats, not close ones, because a simulated run must stay
byte-identical whichever form decided it.

Flows are grouped by host in a padded matrix (one row per host, one slot per flow, empty
slots 0): :class:`Groups` builds it once per round from a host index per flow.

Exactness. The specification sums with :func:`math.fsum` (correctly rounded). A row sum
here is computed with error-free transformations (Knuth's TwoSum: ``s + e == a + b``
exactly) and accepted when a bound proves it is the correctly rounded sum; rows the bound
cannot certify (sums within a few ulps of a rounding tie, rare) are summed by ``fsum``
itself. The water-filling of a congested host is exact only with the specification's own
breakpoint walk, so congested hosts call :func:`~sova.policy.bandwidth.clamped_fill`; the
uncongested hosts (every flow at its ceiling, the common case) never leave numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sova.policy.bandwidth import clamped_fill
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

    @classmethod
    def of(cls, host: IntArray, n_hosts: int) -> Groups:
        host = np.asarray(host, dtype=np.int64)
        count = np.bincount(host, minlength=n_hosts).astype(np.int64)
        order = np.argsort(host, kind="stable")
        starts = np.concatenate(([0], np.cumsum(count)[:-1]))
        slot = np.empty(len(host), dtype=np.int64)
        slot[order] = np.arange(len(host), dtype=np.int64) - starts[host[order]]
        width = int(count.max()) if len(count) and len(host) else 0
        return cls(n_hosts, width, host, slot, count)

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


def sova_allocate(
    groups: Groups,
    capacity: FloatArray,
    demand: FloatArray,
    minimum: FloatArray,
    maximum: FloatArray,
    max_pps: FloatArray,
    packet_bytes: FloatArray,
    weight: FloatArray,
) -> FloatArray:
    """:class:`~sova.policy.bandwidth.SovaAllocator` for every host at once.

    One entry per flow: its host (``groups``), measured demand, SLA minimum, SLA maximum
    (``inf`` for none), SLA packet rate (``nan`` for none), mean packet size and weight;
    ``capacity`` per host. Returns each flow's ``rate_bps`` (its ``pps_cap`` is the SLA's).
    """
    _check(demand, packet_bytes, weight, max_pps)
    pps_limit = np.where(np.isnan(max_pps), np.inf, max_pps * packet_bytes * 8.0)
    hi = np.minimum(np.minimum(demand, maximum), pps_limit)
    lo = np.minimum(minimum, hi)
    floor_total = _sided_sums(groups, lo, capacity, exact_above=True)
    hi_total = _sided_sums(groups, hi, capacity, exact_above=False)
    over = floor_total > capacity  # guarantees over-committed: scaled down
    scale = np.divide(capacity, floor_total, out=np.ones_like(capacity), where=over)
    rates = np.where(over[groups.row], lo * scale[groups.row], hi)
    # clamped_fill: target >= sum(hi) -> hi (above); target <= sum(lo) -> lo; else the walk
    floor_bound = ~over & (capacity <= floor_total) & (capacity < hi_total)
    rates = np.where(floor_bound[groups.row], lo, rates)
    fill = ~over & (capacity < hi_total) & (capacity > floor_total)
    if fill.any():
        for h in np.flatnonzero(fill).tolist():
            idx = np.flatnonzero(groups.row == h)
            idx = idx[np.argsort(groups.slot[idx])]
            rates[idx] = clamped_fill(
                float(capacity[h]), lo[idx].tolist(), hi[idx].tolist(), weight[idx].tolist()
            )
    return rates


def _sided_sums(
    groups: Groups, values: FloatArray, capacity: FloatArray, exact_above: bool
) -> FloatArray:
    """Each host's sum of ``values``, good for comparing with its ``capacity``: ``fsum``
    exactly where a plain sum cannot prove which side of the capacity ``fsum`` falls on
    (and above it too when ``exact_above``: the value is used there), the plain sum
    elsewhere, where it is strictly on the same side as ``fsum``.

    A sum in any order of n terms is within ``(n-1)·u·Σ|x|`` of the exact sum; where the
    plain sum is further than twice that plus an ulp of the capacity from the capacity,
    the exact sum is beyond the capacity's neighbouring float, so its correct rounding is
    strictly on that side as well (the factor 2 covers the rounding of this test itself).
    Most hosts are far from their capacity, and the plain sum never leaves numpy.
    """
    row, n = groups.row, groups.n_hosts
    plain: FloatArray = np.bincount(row, values, minlength=n).astype(np.float64, copy=False)
    bound = 2.0 * groups.count * _U * np.bincount(row, np.abs(values), minlength=n)
    exact = ~(np.abs(plain - capacity) > 2.0 * (bound + np.spacing(np.abs(capacity))))
    if exact_above:
        exact |= plain > capacity
    if not exact.any():
        return plain
    # the rows to sum exactly, in a matrix of their own (a host's flows in slot order)
    at = np.cumsum(exact) - 1
    sel = exact[row]
    m = np.zeros((int(at[-1]) + 1, groups.width))
    m[at[row[sel]], groups.slot[sel]] = values[sel]
    plain[exact] = row_fsum(m)
    return plain


def _check(
    demand: FloatArray, packet_bytes: FloatArray, weight: FloatArray, max_pps: FloatArray
) -> None:
    """The specification's input checks (``FlowDemand``), over arrays: one line naming
    the field and the first bad value."""
    for name, arr, bad in (
        ("demand_bps", demand, ~np.isfinite(demand) | (demand < 0)),
        ("packet_bytes", packet_bytes, ~(np.isfinite(packet_bytes) & (packet_bytes > 0))),
        ("sla.weight", weight, ~(np.isfinite(weight) & (weight > 0))),
        ("sla.max_pps", max_pps, np.isinf(max_pps) | (max_pps < 0)),
    ):
        if bad.any():
            raise ValueError(f"{name} must be finite and > 0 (>= 0 for rates), got {arr[bad][0]}")
