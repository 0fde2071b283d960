"""Hierarchical VF rate tiers (docs/design.md#tiers; DSR-IOV §4.5, eq. 7).

DSR-IOV caps the VFs of the priority queue (PQ) with a step-up ladder
``VF_n = VF_0 + (n - 1)·δ`` for n = 1..N under ``Σ VF_n <= B``. The paper prints the sum
as ``Σ_{i=0}^{0}``, which is a typo. The constraint is over the N tiers that are handed out.
Note that VF_1 = VF_0: the lowest tier *is* VF_0.

What the paper leaves out and what we do:

* **Choosing VF_0 and δ.** The paper sets both by hand ("δ should be set according to the
  network difference between the VMs"). :func:`fit_tiers` derives them from the observed
  demand distribution instead (rule in its docstring).
* **Zero is not a rate.** ``ip link set … max_tx_rate 0`` means *unlimited*, so a tier of 0
  would silently uncap a VF. Tiers must be > 0, and fitted tiers are at least 1 Mbit/s, the
  granularity of ``max_tx_rate``.
* **Tier assignment.** The highest demand gets the highest tier. Ties are broken by name so
  that reruns agree. With fewer PQ VMs than tiers the top tiers are used, because the
  network-intensive VMs should not be held back by unused low tiers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final

from sova.model import MBIT

# Σ VF_n is computed in floating point. Allow one part in 1e9 (10 bit/s on 10 GbE) so that a
# ladder that sums to exactly B is not refused for a rounding error.
_SUM_SLACK: Final = 1e-9


def _finite_nonneg(name: str, value: float) -> None:
    if not math.isfinite(value) or value < 0.0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")


def tier_rates(vf0_bps: float, delta_bps: float, n: int, capacity_bps: float) -> tuple[float, ...]:
    """The ladder ``(VF_1, …, VF_N)``, ascending, with ``VF_n = VF_0 + (n - 1)·δ``.

    Raises ValueError, naming the parameter, when a value is negative or non-finite, when
    ``vf0_bps`` is 0 (``max_tx_rate 0`` would mean unlimited) or when the sum exceeds
    ``capacity_bps``.
    """
    _finite_nonneg("vf0_bps", vf0_bps)
    _finite_nonneg("delta_bps", delta_bps)
    _finite_nonneg("capacity_bps", capacity_bps)
    if vf0_bps == 0.0:
        raise ValueError("vf0_bps must be > 0: a max_tx_rate of 0 means unlimited")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    rates = tuple(vf0_bps + i * delta_bps for i in range(n))
    total = math.fsum(rates)
    if total > capacity_bps * (1.0 + _SUM_SLACK):
        raise ValueError(
            f"capacity_bps: tiers sum to {total:.6g} bit/s, more than the {capacity_bps:.6g}"
            f" bit/s available (n={n}, vf0_bps={vf0_bps:.6g}, delta_bps={delta_bps:.6g})"
        )
    return rates


def assign_tiers(demands: Mapping[str, float], tiers: Sequence[float]) -> dict[str, float]:
    """Give each PQ VM a tier: highest measured demand → highest tier, ties by name.

    ``tiers`` may be in any order. With fewer VMs than tiers the highest tiers are used. With
    more VMs than tiers it raises, because a VM in the PQ without a tier would keep an uncapped VF.
    """
    for name, demand in demands.items():
        _finite_nonneg(f"demand of {name!r}", demand)
    for i, rate in enumerate(tiers):
        _finite_nonneg(f"tiers[{i}]", rate)
    if len(demands) > len(tiers):
        raise ValueError(f"demands: {len(demands)} VMs but only {len(tiers)} tiers")
    by_demand = sorted(demands, key=lambda vm: (-demands[vm], vm))
    return dict(zip(by_demand, sorted(tiers, reverse=True), strict=False))


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default), on already sorted values."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (pos - lo) * (sorted_values[hi] - sorted_values[lo])


def fit_tiers(
    observed_demands: Sequence[float],
    n: int,
    capacity_bps: float,
    headroom: float = 0.2,
) -> tuple[float, float]:
    """Choose ``(VF_0, δ)`` from observed per-VM demands (bit/s) instead of by hand.

    Rule:

    1. Split the demand distribution into N equally likely bands. Tier i serves band i, whose
       median is the ``(i - 0.5)/N`` quantile. The ladder is linear, so it is pinned by its
       ends: ``VF_1 = q(0.5/N)·(1 + headroom)`` and ``VF_N = q(1 - 0.5/N)·(1 + headroom)``,
       then ``δ = (VF_N - VF_1)/(N - 1)``. The headroom keeps a VM at its typical demand from
       sitting on its cap. The caps also feed back into the next fit: a VM held at its cap
       reports the cap as its demand, the headroom lets the ladder climb one step per refit,
       and it does not jump on a single spike.
    2. If the ladder does not fit (``N·(VF_1 + VF_N)/2 > B``), both ends are scaled down by
       the same factor so that it sums to B and keeps its shape. A ladder that fits is *not*
       scaled up to B. The rest of the PF's line rate stays with the virtio/GQ traffic that
       shares it, and over-generous caps are what DSR-IOV warns "leave a surplus".
    3. ``VF_1`` is at least ``min(1 Mbit/s, B/N)``, because ``max_tx_rate`` counts whole
       Mbit/s and 0 means unlimited. If scaling pushed it below, it is raised and ``VF_N``
       lowered to keep the sum at B.
    4. No usable data (empty, or every demand 0) gives the equal split ``(B/N, 0)``. Nothing
       distinguishes the VMs yet, so none is favoured.
    """
    for i, demand in enumerate(observed_demands):
        _finite_nonneg(f"observed_demands[{i}]", demand)
    _finite_nonneg("capacity_bps", capacity_bps)
    _finite_nonneg("headroom", headroom)
    if capacity_bps == 0.0:
        raise ValueError("capacity_bps must be > 0")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")

    equal_share = capacity_bps / n
    values = sorted(observed_demands)
    if not values or values[-1] == 0.0:
        return equal_share, 0.0

    floor = min(MBIT, equal_share)
    scale = 1.0 + headroom
    if n == 1:
        return min(max(_quantile(values, 0.5) * scale, floor), capacity_bps), 0.0

    low = _quantile(values, 0.5 / n) * scale
    high = _quantile(values, 1.0 - 0.5 / n) * scale
    total = n * (low + high) / 2.0
    if total > capacity_bps:
        shrink = capacity_bps / total
        low, high = low * shrink, high * shrink
    if low < floor:
        # Raising VF_1 alone could break Σ <= B, so hand the difference back from the top.
        # floor <= B/N keeps high >= floor, so the ladder stays non-decreasing.
        high = min(high, 2.0 * equal_share - floor)
        low = floor
    return low, max(0.0, (high - low) / (n - 1))
