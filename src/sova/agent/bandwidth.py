"""The bandwidth loop's decision: one host (HostAgent, a fleet of one) or all (World).

One period of the bandwidth controller (docs/design.md#bandwidth): per-VM egress rates
measured between two readings -> demands (a VM held at its cap is probed upward, a
congested guarantee reserved its minimum) -> the configured allocator -> caps (the capacity
nobody was allocated spread over the caps when the allocator declares it, a probing floor,
no cap at line rate or on an open link) -> a limit action only for a VM whose cap moved by
more than 1 %. :func:`decide` is that period: with the Sova allocator one call of the
compiled core for every host (``sova.policy.allocation.bandwidth_period``); with another
allocator the core's demands and caps around the allocator's own per-host calls.
:meth:`HostAgent.bandwidth_step` calls it for its one host, the simulator
(``sova.sim.fleet_bandwidth``) for every host at once. A missing limit or packet cap is
``nan``. The readable per-host form it is held to is in tests/test_kernels.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sova.model import SLA, VM
from sova.policy.allocation import (
    FULL_LINK,
    HOLD_PERIODS,
    Held,
    VmColumns,
    bandwidth_demand,
    bandwidth_limits,
    bandwidth_period,
    sova_allocate,
)
from sova.policy.bandwidth import BandwidthAllocator, FlowDemand, SovaAllocator
from sova.policy.kernels import BoolArray, FloatArray, Groups, IntArray

__all__ = ["FULL_LINK", "HOLD_PERIODS", "Held", "VmColumns"]


# A guaranteed VM under its minimum whose reading may be the link's congestion rather than
# its demand (docs/design.md#guarantees) is reserved its minimum until it reads under it,
# not held by its cap, on a link with headroom (under FULL_LINK of it), HOLD_PERIODS periods
# in a row: both the core's, re-exported here for the agents' callers.
_FREE = -1  # Reservations.quiet of a VM without a reservation (the default)


@dataclass(frozen=True)
class Reservations(Held):
    """Each guaranteed VM's reservation state, one entry per VM (docs/design.md#guarantees).

    ``quiet`` is ``-1`` (no reservation: its reading is its demand), ``0 .. HOLD_PERIODS-1``
    (reserved: its demand is at least its minimum; the number of quiet periods so far) or
    ``HOLD_PERIODS`` (released: it showed it wants ``level``, what it read with room to send).
    ``level`` is the highest reading of the current quiet run (reserved) or the level it was
    released at; 0.0 when free. ``fast``: the VM was on a VF when its state was last decided.
    A period (:func:`decide`) advances them in place.
    """

    @classmethod
    def free(cls, n: int) -> Reservations:
        return cls(np.full(n, _FREE, dtype=np.int64), np.zeros(n), np.zeros(n, dtype=bool))

    @classmethod
    def of(cls, states: Sequence[tuple[int, float, bool] | None]) -> Reservations:
        """From a record's entries (``None``: free)."""
        return cls(
            np.array([_FREE if s is None else s[0] for s in states], dtype=np.int64),
            np.array([0.0 if s is None else s[1] for s in states], dtype=np.float64),
            np.array([False if s is None else s[2] for s in states], dtype=bool),
        )

    def entry(self, k: int) -> tuple[int, float, bool] | None:
        """Flow ``k``'s state for a record (``None``: free, nothing to keep)."""
        q = int(self.quiet[k])
        return None if q == _FREE else (q, float(self.level[k]), bool(self.fast[k]))


@dataclass(frozen=True)
class SLAArrays:
    """The SLA fields the Sova allocator reads, one entry per VM (or flow)."""

    minimum: FloatArray
    maximum: FloatArray  # inf: no maximum
    max_pps: FloatArray  # nan: no packet cap
    weight: FloatArray

    @classmethod
    def of(cls, slas: Sequence[SLA]) -> SLAArrays:
        return cls(
            np.array([s.bandwidth.minimum for s in slas], dtype=np.float64),
            np.array(
                [np.inf if s.bandwidth.maximum is None else s.bandwidth.maximum for s in slas],
                dtype=np.float64,
            ),
            np.array([np.nan if s.max_pps is None else s.max_pps for s in slas], dtype=np.float64),
            np.array([s.weight for s in slas], dtype=np.float64),
        )

    def columns(
        self, bps: FloatArray, packet_bytes: FloatArray, current: FloatArray, fast: BoolArray
    ) -> VmColumns:
        """A period's per-VM columns: these SLAs with what was measured and is in force."""
        return VmColumns(
            bps, packet_bytes, current, self.minimum, self.maximum, self.max_pps, self.weight,
            np.ascontiguousarray(fast, dtype=bool),
        )  # fmt: skip


def all_sova(allocators: Sequence[BandwidthAllocator]) -> bool:
    """Every allocator is the Sova allocator itself (not a subclass): the kernel decides."""
    return all(type(a) is SovaAllocator for a in allocators)


def allocate(
    allocators: Sequence[BandwidthAllocator],
    groups: Groups,
    capacity: FloatArray,
    demand: FloatArray,
    packet_bytes: FloatArray,
    vm: Callable[[int], VM],
    sla: SLAArrays | None = None,
    sova: bool | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Each flow's (rate_bps, pps_cap or nan) from its host's allocator (one per host).

    The Sova allocator runs as the all-hosts kernel (:func:`sova.policy.allocation.sova_allocate`);
    any other allocator (stateful feedback loops such as DAQS, the published baselines,
    plug-ins) is called host by host, with the flows in the order the specification sees
    them (their order in ``groups``). ``vm(k)`` is flow ``k``'s VM. ``sova``: what
    :func:`all_sova` says of ``allocators``, for a caller with the same allocators every
    period (None: look).
    """
    n = len(demand)
    if all_sova(allocators) if sova is None else sova:
        s = sla if sla is not None else SLAArrays.of([vm(k).sla for k in range(n)])
        rate = sova_allocate(
            groups, capacity, demand, s.minimum, s.maximum, s.max_pps, packet_bytes, s.weight
        )
        return rate, s.max_pps
    rate, pps = np.empty(n), np.full(n, np.nan)
    order = np.lexsort((groups.slot, groups.row)).tolist()
    start = 0
    for h, c in enumerate(groups.count.tolist()):
        idx, start = order[start : start + c], start + c
        if not idx:
            continue
        vms = [vm(k) for k in idx]
        alloc = allocators[h].allocate(
            float(capacity[h]),
            [
                FlowDemand(v.name, float(demand[k]), v.sla, float(packet_bytes[k]), v.created_seq)
                for k, v in zip(idx, vms, strict=True)
            ],
        )
        for k, v in zip(idx, vms, strict=True):
            a = alloc[v.name]
            rate[k] = a.rate_bps
            pps[k] = np.nan if a.pps_cap is None else a.pps_cap
    return rate, pps


@dataclass(frozen=True)
class Decided:
    """A period's caps, one entry per flow, and which moved."""

    new: FloatArray  # the cap to enforce (nan: none)
    pps: FloatArray  # the packet cap (nan: none)
    changed: IntArray  # positions of the flows whose cap moved by more than 1 %, in order


def decide(
    allocators: Sequence[BandwidthAllocator],
    groups: Groups,
    capacity: FloatArray,
    flows: IntArray,
    vms: VmColumns,
    vm: Callable[[int], VM],
    *,
    sova: bool,
    probe: float,
    spread_spare: bool,
    held: Held | None = None,
    threads: int = 1,
) -> Decided:
    """One period for the flows ``flows`` (flow ``k`` is VM ``flows[k]`` of ``vms``'s
    columns, on host ``groups.row[k]``). ``sova``: what :func:`all_sova` says of
    ``allocators``; only the Sova allocator's caps are lifted on an open link.
    ``held``: the reservations to keep for congested guarantees (advanced in place; None:
    none kept). ``vm(k)``: flow ``k``'s VM, for another allocator's specification.
    ``threads``: how many share the Sova allocator's hosts (the same caps for any number)."""
    lift = spread_spare and sova
    if sova:
        new, pps, changed = bandwidth_period(
            groups, capacity, flows, vms, probe, spread_spare, lift, held, threads
        )
        return Decided(new, pps, changed)
    demand, lifted = bandwidth_demand(
        groups, capacity, flows, vms, probe, spread_spare, lift, held
    )
    alloc = allocate(allocators, groups, capacity, demand, vms.packet_bytes[flows], vm, sova=False)
    new, changed = bandwidth_limits(
        groups, capacity, flows, vms.current, alloc, lifted, probe, spread_spare
    )
    return Decided(new, alloc[1], changed)
