"""The Sova allocator's arithmetic (docs/design.md#sova-allocator), one implementation.

The compiled core's (rust/sova-core/src/allocate.rs, docs/design.md "The compiled core"):
:func:`sova_allocate` shares every host's link among its flows at once, for the agents'
and the simulator's bandwidth step (``sova.agent.bandwidth.allocate``) and, with one host,
for the registered allocator object (:class:`sova.policy.bandwidth.SovaAllocator`);
:func:`clamped_fill` is one link's weighted max-min fill, which the other allocators of
``sova.policy.bandwidth`` use too. Every sum is ``math.fsum``'s correctly rounded one, so
the rates are the floats of the readable per-host form kept in tests/bandwidth_oracle.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from sova.policy import _core
from sova.policy.kernels import Groups

FloatArray = npt.NDArray[np.float64]


def _f64(a: npt.ArrayLike) -> FloatArray:
    return np.ascontiguousarray(a, dtype=np.float64)


def clamped_fill(
    target: float, lo: Sequence[float], hi: Sequence[float], weights: Sequence[float]
) -> list[float]:
    """Weighted max-min fill: ``x_i = clamp(lam * w_i, lo_i, hi_i)`` with ``sum(x) = target``.

    Floors count toward the fair share (a VM whose floor is above its fair share keeps the
    floor and takes nothing more), which is the "guarantee or max-min share, whichever is
    larger" rule. ``target`` is clamped into ``[sum(lo), sum(hi)]``. Exact: ``lam`` is
    found by linear interpolation between the breakpoints of the piecewise-linear fill
    curve, not by bisection, so the answer does not depend on a tolerance. A sum that
    ``math.fsum`` refuses (an intermediate overflow, ``inf + -inf``) is a ValueError
    naming it, as ``Groups.fsum`` raises one.
    """
    n = len(lo)
    if not (len(hi) == n and len(weights) == n):
        raise ValueError("lo, hi and weights must have the same length")
    if any(not w > 0 for w in weights):
        raise ValueError(f"weights must be > 0, got {list(weights)}")
    rates: list[float] = _core.clamped_fill(
        float(target), _f64(lo), _f64(hi), _f64(weights)
    ).tolist()
    return rates


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
    """The Sova allocator for every host at once.

    One entry per flow: its host (``groups``), measured demand, SLA minimum, SLA maximum
    (``inf`` for none), SLA packet rate (``nan`` for none), mean packet size and weight;
    ``capacity`` per host. Returns each flow's ``rate_bps`` (its ``pps_cap`` is the SLA's).
    """
    _check(demand, packet_bytes, weight, max_pps)
    return _core.sova_allocate(
        _f64(capacity),
        groups.order,
        groups.start,
        _f64(demand),
        _f64(minimum),
        _f64(maximum),
        _f64(max_pps),
        _f64(packet_bytes),
        _f64(weight),
    )


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
