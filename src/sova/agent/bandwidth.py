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
from sova.policy.bandwidth import BandwidthAllocator, FlowDemand, SovaAllocator
from sova.policy.kernels import BoolArray, FloatArray, Groups, IntArray, sova_allocate


@dataclass(frozen=True)
class Measured:
    valid: BoolArray  # a rate was measured (a previous reading, no counter went back)
    bps: FloatArray  # egress bit/s
    packet_bytes: FloatArray  # mean egress packet size


def measure(
    prev_tx: FloatArray, prev_pk: FloatArray, tx: FloatArray, pk: FloatArray, dt: float
) -> Measured:
    """:class:`~sova.policy.sensing.RateMeter`'s rates from two readings of whole counters."""
    d_tx, d_pk = tx - prev_tx, pk - prev_pk
    valid = (d_tx >= 0) & (d_pk >= 0)
    bps = 8.0 * d_tx / dt
    pkt = np.divide(d_tx, d_pk, out=np.full_like(d_tx, 1500.0), where=d_pk > 0)
    return Measured(valid, bps, pkt)


def probe_demand(
    bps: FloatArray, limit: FloatArray, capacity: FloatArray, probe: float
) -> FloatArray:
    """A VM sending at (nearly) its cap may want more than the cap lets through: ask for
    ``probe`` more than the cap, never more than the link."""
    near = ~np.isnan(limit) & (bps >= (1.0 - probe) * limit)
    demand = np.where(near, np.maximum(bps, np.nan_to_num(limit)) * (1.0 + probe), bps)
    out: FloatArray = np.minimum(demand, capacity)
    return out


def limits(
    groups: Groups,
    capacity: FloatArray,
    rate: FloatArray,
    pps_cap: FloatArray,
    current: FloatArray,
    probe: float,
    spread_spare: bool,
) -> tuple[FloatArray, BoolArray]:
    """The caps to enforce (``nan``: no cap) and which differ from ``current`` by > 1 %.

    ``capacity`` is per host, the rest per flow.
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
    rate = np.where((rate >= cap * (1 - 1e-9)) & np.isnan(pps_cap), np.nan, rate)
    both = ~np.isnan(rate) & ~np.isnan(current)
    same = np.isnan(rate) & np.isnan(current)
    diff = np.abs(np.nan_to_num(current) - np.nan_to_num(rate))
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


def allocate(
    allocators: Sequence[BandwidthAllocator],
    groups: Groups,
    capacity: FloatArray,
    demand: FloatArray,
    packet_bytes: FloatArray,
    vm: Callable[[int], VM],
    sla: SLAArrays | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Each flow's (rate_bps, pps_cap or nan) from its host's allocator (one per host).

    The Sova allocator runs as the all-hosts kernel (:func:`sova.policy.kernels.sova_allocate`);
    any other allocator (stateful feedback loops such as DAQS, the published baselines,
    plug-ins) is called host by host, with the flows in the order the specification sees
    them (their order in ``groups``). ``vm(k)`` is flow ``k``'s VM.
    """
    n = len(demand)
    if all(type(a) is SovaAllocator for a in allocators):
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
