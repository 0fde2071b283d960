"""The bandwidth loop's decision as array kernels: one host (HostAgent) or all (World).

One period of the bandwidth controller (docs/design.md#bandwidth): per-VM egress rates
measured between two readings -> demands (a VM held at its cap is probed upward) -> the
configured allocator -> caps (the capacity nobody was allocated spread over the caps when
the allocator declares it, a probing floor, no cap at line rate) -> a limit action only for
a VM whose cap moved by more than 1 %. :meth:`HostAgent.bandwidth_step` runs these on its one
host; ``World`` runs them on every host of a simulated cluster at once. Arrays hold one entry
per flow (VM); a missing limit or packet cap is ``nan``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sova.model import SLA, VM
from sova.policy.allocation import sova_allocate
from sova.policy.bandwidth import BandwidthAllocator, FlowDemand, SovaAllocator
from sova.policy.kernels import BoolArray, FloatArray, Groups, IntArray


def probe_demand(
    bps: FloatArray, limit: FloatArray, capacity: FloatArray, probe: float
) -> FloatArray:
    """A VM sending at (nearly) its cap may want more than the cap lets through: ask for
    ``probe`` more than the cap, never more than the link."""
    near = ~np.isnan(limit) & (bps >= (1.0 - probe) * limit)
    # (nan where there is no limit: not near, not taken)
    demand = np.where(near, np.maximum(bps, limit) * (1.0 + probe), bps)
    out: FloatArray = np.minimum(demand, capacity)
    return out


def open_link(
    groups: Groups,
    capacity: FloatArray,
    bps: FloatArray,
    minimum: FloatArray,
    maximum: FloatArray,
) -> BoolArray:
    """The flows whose cap is lifted this period (docs/design.md#open-link): on a host with
    no guarantee whose measured traffic is at most :data:`FULL_LINK` of its capacity, every
    flow without an SLA maximum. A cap there only holds back a burst or a demand step (the
    NIC shares a full link max-min by itself); the next period caps again from the true
    demand if the link filled. ``capacity`` is per host, the rest per flow (``maximum``:
    inf for none)."""
    row = groups.row
    guarded = np.bincount(row, minimum > 0, minlength=groups.n_hosts) > 0
    calm = ~guarded & (groups.fsum(bps) <= FULL_LINK * capacity)
    out: BoolArray = calm[row] & np.isinf(maximum)
    return out


# A guaranteed VM under its minimum whose reading may be the link's congestion rather than
# its demand (docs/design.md#guarantees): its reservation stands until it reads under its
# minimum, not held by its cap, on a link with headroom, this many periods in a row.
HOLD_PERIODS = 5
# Readings adding up to this share of a host's capacity make a full link.
FULL_LINK = 0.95
_FREE = -1  # Reservations.quiet of a VM without a reservation (the default)


@dataclass(frozen=True)
class Reservations:
    """Each guaranteed VM's reservation state, one entry per flow (docs/design.md#guarantees).

    ``quiet`` is ``-1`` (no reservation: its reading is its demand), ``0 .. HOLD_PERIODS-1``
    (reserved: its demand is at least its minimum; the number of quiet periods so far) or
    ``HOLD_PERIODS`` (released: it showed it wants ``level``, what it read with room to send).
    ``level`` is the highest reading of the current quiet run (reserved) or the level it was
    released at; 0.0 when free. ``fast``: the VM was on a VF when its state was last decided.
    """

    quiet: IntArray
    level: FloatArray
    fast: BoolArray

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


def reserve_guarantees(
    groups: Groups,
    capacity: FloatArray,
    bps: FloatArray,
    limit: FloatArray,
    demand: FloatArray,
    minimum: FloatArray,
    fast: BoolArray,
    probe: float,
    state: Reservations,
) -> tuple[FloatArray, Reservations]:
    """Demands with each congested guarantee restored to its minimum, and the next state.

    A guaranteed VM reading under its minimum while the link is full (readings adding up to
    ``FULL_LINK`` of the capacity) or while it is held at its cap may be sending what the
    congestion leaves it: it is reserved at once (demand at least its minimum). It is
    released after ``HOLD_PERIODS`` periods in a row under its minimum, below its cap, on a
    link with headroom (its reading was then its demand), and stays released — no
    reservation on a full link — until it reads more than ``1 + probe/2`` times the most it
    read then (counted as at least ``probe · minimum``): one probing step up, with half a
    step's margin for a steady VM's noise. A VM that gained or lost its VF (``fast``: on a
    VF now) starts again from no reservation: what it read on its old path says nothing
    about the new one. ``capacity`` is per host, the rest per flow.
    """
    under = (minimum > 0) & (bps < minimum)
    if not under.any():
        return demand, Reservations.free(len(demand))
    cap = capacity[groups.row]
    full = (groups.fsum(bps) >= FULL_LINK * capacity)[groups.row]
    held = ~np.isnan(limit) & (bps >= (1.0 - probe) * limit)
    busy = full | held
    moved = state.fast != fast
    q = np.where(moved, _FREE, state.quiet)
    level = np.where(moved, 0.0, state.level)
    released = q >= HOLD_PERIODS
    rising = released & (bps > (1.0 + probe / 2) * np.maximum(level, probe * minimum))
    reserved = (q >= 0) & ~released
    start = (q == _FREE) & busy | reserved & busy | rising
    quiet = reserved & ~busy
    q_next = np.where(start, 0, np.where(quiet, q + 1, q))
    level_next = np.where(start, 0.0, np.where(quiet, np.maximum(level, bps), level))
    q_next = np.where(under, q_next, _FREE)
    level_next = np.where(under, level_next, 0.0)
    hold = (q_next >= 0) & (q_next < HOLD_PERIODS)
    out: FloatArray = np.where(hold, np.minimum(np.maximum(demand, minimum), cap), demand)
    kept = q_next != _FREE
    return out, Reservations(q_next.astype(np.int64), level_next, kept & fast)


def limits(
    groups: Groups,
    capacity: FloatArray,
    rate: FloatArray,
    pps_cap: FloatArray,
    current: FloatArray,
    probe: float,
    spread_spare: bool,
    lifted: BoolArray | None = None,
) -> tuple[FloatArray, BoolArray]:
    """The caps to enforce (``nan``: no cap) and which differ from ``current`` by > 1 %.

    ``capacity`` is per host, the rest per flow; ``lifted``: flows whose cap is lifted
    (:func:`open_link`), unless they have a packet cap.
    """
    row = groups.row
    cap = capacity[row]
    n = groups.count[row].astype(np.float64)
    if spread_spare:
        # Work conservation (AllocatorPlugin.spread_spare): an allocation is a VM's fair
        # share of what was measured, and a cap at exactly that would hold a bursty VM at
        # its mean rate while the link idles; capacity nobody got is spread over the caps.
        spare = capacity - groups.fsum(rate)
        rate = rate + (np.maximum(0.0, spare)[row] / n)
    if probe > 0:
        # An idle VM allocated ~0 would be capped at ~0 and could never show that it
        # wants to send (a VM below its cap is not probed): keep a probing floor.
        rate = np.maximum(rate, probe * cap / n)
    at_line = rate >= cap * (1 - 1e-9)
    if lifted is not None:
        at_line |= lifted
    rate = np.where(at_line & np.isnan(pps_cap), np.nan, rate)
    both = ~np.isnan(rate) & ~np.isnan(current)
    same = np.isnan(rate) & np.isnan(current)
    diff = np.abs(current - rate)  # nan where either is: not ``both``, not taken
    same |= both & (diff <= 0.01 * np.fmax(current, rate))
    return rate, ~same


@dataclass(frozen=True)
class SLAArrays:
    """The SLA fields the Sova allocator reads, one entry per flow."""

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

    def take(self, idx: IntArray) -> SLAArrays:
        return SLAArrays(self.minimum[idx], self.maximum[idx], self.max_pps[idx], self.weight[idx])


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
