"""The readable per-host form of the Sova allocator, kept as the oracle the core is held to.

This was ``sova.policy.bandwidth.clamped_fill`` and ``SovaAllocator.allocate`` before the
allocator moved into the compiled core (rust/sova-core/src/allocate.rs, docs/design.md "The
compiled core"). tests/test_kernels.py holds the core (the fleet's ``sova_allocate`` and the
registered ``SovaAllocator``) equal to these, float for float, on random heterogeneous
clusters and at the capacity's rounding ties.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sova.policy.bandwidth import BITS_PER_BYTE, Allocation, FlowDemand, _check_input


def pps_limit_bps(d: FlowDemand) -> float:
    """The SLA packet rate expressed as a bit rate at this flow's packet size."""
    if d.sla.max_pps is None:
        return math.inf
    return d.sla.max_pps * d.packet_bytes * BITS_PER_BYTE


def clamped_fill(
    target: float, lo: Sequence[float], hi: Sequence[float], weights: Sequence[float]
) -> list[float]:
    """Weighted max-min fill: ``x_i = clamp(lam * w_i, lo_i, hi_i)`` with ``sum(x) = target``.

    Floors count toward the fair share (a VM whose floor is above its fair share keeps the
    floor and takes nothing more), which is the "guarantee or max-min share, whichever is
    larger" rule. ``target`` is clamped into ``[sum(lo), sum(hi)]``. Exact: ``lam`` is
    found by linear interpolation between the breakpoints of the piecewise-linear fill
    curve, not by bisection, so the answer does not depend on a tolerance.
    """
    n = len(lo)
    if not (len(hi) == n and len(weights) == n):
        raise ValueError("lo, hi and weights must have the same length")
    if any(not w > 0 for w in weights):
        raise ValueError(f"weights must be > 0, got {list(weights)}")
    if n == 0:
        return []
    if target >= math.fsum(hi):
        return list(hi)
    if target <= math.fsum(lo):
        return list(lo)

    def filled(lam: float) -> float:
        return math.fsum(
            min(h, max(lo_i, lam * w)) for lo_i, h, w in zip(lo, hi, weights, strict=True)
        )

    # The fill curve only bends where some VM hits its floor or its ceiling.
    points = sorted(
        {x / w for x, w in zip(lo, weights, strict=True)}
        | {x / w for x, w in zip(hi, weights, strict=True)}
    )
    prev_lam, prev_f = 0.0, filled(0.0)
    lam_star = points[-1]
    for lam in points:
        f = filled(lam)
        if f >= target:
            lam_star = (
                lam
                if f == prev_f
                else prev_lam + (target - prev_f) * (lam - prev_lam) / (f - prev_f)
            )
            break
        prev_lam, prev_f = lam, f
    return [min(h, max(lo_i, lam_star * w)) for lo_i, h, w in zip(lo, hi, weights, strict=True)]


class SovaAllocator:
    """The work-conserving optimum (docs/design.md#sova-allocator).

    For each VM: ceiling ``hi = min(demand, SLA max, max_pps * packet_bytes * 8)`` and
    floor ``lo = min(guarantee, hi)`` (an idle VM reserves nothing: this is what makes it
    work-conserving where DBA-VM is not). Then ``x_i = clamp(lam * weight_i, lo_i, hi_i)``
    with ``sum(x) = min(capacity, sum(hi))``: the link is full unless every VM is at its
    ceiling, and the remainder is weighted max-min fair.

    Over-committed guarantees (``sum(lo) > capacity``; admission control should prevent
    it, but a NIC can renegotiate to a lower speed) are scaled down proportionally, so
    every guaranteed VM loses the same fraction of its contract and best-effort VMs get
    nothing until the guarantees are met again.

    The returned ``rate_bps`` is the allocation itself; any headroom to probe for more
    demand is the caller's business, so that this stays the exact reference optimum.
    """

    def allocate(self, capacity_bps: float, demands: Sequence[FlowDemand]) -> dict[str, Allocation]:
        _check_input(capacity_bps, demands)
        hi = [
            min(
                d.demand_bps,
                math.inf if d.sla.bandwidth.maximum is None else d.sla.bandwidth.maximum,
                pps_limit_bps(d),
            )
            for d in demands
        ]
        lo = [min(d.sla.bandwidth.minimum, h) for d, h in zip(demands, hi, strict=True)]
        floor_total = math.fsum(lo)
        if floor_total > capacity_bps:
            scale = capacity_bps / floor_total
            rates = [x * scale for x in lo]
        else:
            rates = clamped_fill(capacity_bps, lo, hi, [d.sla.weight for d in demands])
        return {
            d.vm: Allocation(rate_bps=r, pps_cap=d.sla.max_pps)
            for d, r in zip(demands, rates, strict=True)
        }
