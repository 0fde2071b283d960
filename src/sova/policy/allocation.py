"""The Sova allocator's arithmetic (docs/design.md#sova-allocator), one implementation.

The compiled core's (rust/sova-core/src/allocate.rs, docs/design.md "The compiled core"):
:func:`sova_allocate` shares every host's link among its flows at once, for the agents'
and the simulator's bandwidth step (``sova.agent.bandwidth.allocate``) and, with one host,
for the registered allocator object (:class:`sova.policy.bandwidth.SovaAllocator`);
:func:`clamped_fill` is one link's weighted max-min fill, which the other allocators of
``sova.policy.bandwidth`` use too. Every sum is ``math.fsum``'s correctly rounded one, so
the rates are the floats of the readable per-host form kept in tests/bandwidth_oracle.py.

:func:`bandwidth_period` is the bandwidth controller's whole period with this allocator
(rust/sova-core/src/bandwidth.rs): demands, the allocation and the caps of every flow of
every host in one call, for the simulator's fleet and for an agent's host alike (a fleet
of one); :func:`bandwidth_demand` and :func:`bandwidth_limits` are its two ends for an
allocator the core does not have (DAQS, the baselines, plug-ins: called host by host).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sova.policy import _core
from sova.policy.kernels import Groups

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Readings adding up to this share of a host's capacity make a full link.
FULL_LINK: float = _core.FULL_LINK
# A guaranteed VM's reservation is released after this many quiet periods in a row.
HOLD_PERIODS: int = _core.HOLD_PERIODS


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


@dataclass(frozen=True)
class VmColumns:
    """What the bandwidth controller knows of each VM, one entry per VM."""

    bps: FloatArray  # egress bit/s measured this period
    packet_bytes: FloatArray  # mean egress packet size
    current: FloatArray  # the cap in force (nan: none)
    minimum: FloatArray  # SLA minimum
    maximum: FloatArray  # SLA maximum (inf: none)
    max_pps: FloatArray  # SLA packet rate (nan: none)
    weight: FloatArray
    fast: BoolArray  # on a VF now


@dataclass(frozen=True)
class Held:
    """Each guaranteed VM's reservation, one entry per VM, advanced in place by a period
    (docs/design.md#guarantees; ``sova.agent.bandwidth.Reservations`` says the states)."""

    quiet: IntArray
    level: FloatArray
    fast: BoolArray


_Columns = tuple[
    FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, BoolArray
]


def _columns(vms: VmColumns) -> _Columns:
    """The columns in the core's argument order, float64 and contiguous."""
    return (
        _f64(vms.bps), _f64(vms.packet_bytes), _f64(vms.current), _f64(vms.minimum),
        _f64(vms.maximum), _f64(vms.max_pps), _f64(vms.weight),
        np.ascontiguousarray(vms.fast, dtype=bool),
    )  # fmt: skip


def _held(held: Held | None) -> tuple[IntArray, FloatArray, BoolArray] | None:
    return None if held is None else (held.quiet, held.level, held.fast)


def bandwidth_period(
    groups: Groups,
    capacity: FloatArray,
    flows: IntArray,
    vms: VmColumns,
    probe: float,
    spread_spare: bool,
    lift: bool,
    held: Held | None = None,
    threads: int = 1,
) -> tuple[FloatArray, FloatArray, IntArray]:
    """One period of the bandwidth controller with the Sova allocator, every host at once.

    Flow ``k`` is VM ``flows[k]``, on host ``groups.row[k]``; ``capacity`` per host.
    ``lift``: lift the caps on a calm link (docs/design.md#open-link); ``held``: reserve the
    congested guarantees (advanced in place). Returns each flow's cap (nan: none) and packet
    cap (nan: none), and the positions of the flows whose cap moved by more than 1 %.
    ``threads``: how many share the hosts' allocations (the same caps for any number).
    """
    return _core.bandwidth_period(
        _f64(capacity), groups.order, groups.start, flows, *_columns(vms),
        float(probe), spread_spare, lift, _held(held), int(threads),
    )  # fmt: skip


def bandwidth_demand(
    groups: Groups,
    capacity: FloatArray,
    flows: IntArray,
    vms: VmColumns,
    probe: float,
    spread_spare: bool,
    lift: bool,
    held: Held | None = None,
) -> tuple[FloatArray, BoolArray]:
    """:func:`bandwidth_period`'s demands for another allocator: each flow's demand and
    whether its cap is lifted."""
    return _core.bandwidth_demand(
        _f64(capacity), groups.order, groups.start, flows, *_columns(vms),
        float(probe), spread_spare, lift, _held(held),
    )  # fmt: skip


def bandwidth_limits(
    groups: Groups,
    capacity: FloatArray,
    flows: IntArray,
    current: FloatArray,
    alloc: tuple[FloatArray, FloatArray],
    lifted: BoolArray,
    probe: float,
    spread_spare: bool,
) -> tuple[FloatArray, IntArray]:
    """:func:`bandwidth_period`'s caps from another allocator's ``(rate, pps_cap)`` per
    flow: each flow's cap and the positions of those that moved."""
    rate, pps = alloc
    return _core.bandwidth_limits(
        _f64(capacity), groups.order, groups.start, flows, _f64(current), _f64(rate),
        _f64(pps), lifted, float(probe), spread_spare,
    )  # fmt: skip
