"""Demand estimation and probing headroom for allocators fed by measured TCP rates.

The policy core's allocators (Sova, DBA-VM, equal share) answer "who gets how much" from
*demands*. On a real link a demand is never measured, only a rate, and a rate says
nothing about what a VM would send with more room. The agent's rule (a VM sending at
>= (1 - probe) of its cap wants (1 + probe) x more) works on a model; on real TCP five
things break it, and this wrapper handles each where the simulation never noticed:

1. **A cap at the allocation freezes an idle VM.** An idle VM is allocated 0; a cap of 0
   (or of a trickle) means it can never show that it wants more. Caps never go below
   ``floor`` x link, and capacity nobody is allocated is spread over the caps, so the
   link stays work-conserving when demand appears.
2. **A multiplicative probe is slow from a small cap.** 10 % per period from 2 % of the
   link takes 25 periods to reach a fair share. A VM held at its cap also asks for
   ``probe x link / active VMs`` more per period (additive increase), so a newcomer
   reaches its share in a few periods.
3. **A guaranteed VM squeezed by congestion looks like a VM that wants little.** Five
   competing streams hold a one-stream VM at 1/6 of the port; its measured rate is low
   because of the others, not because of its demand. An active guaranteed VM below its
   minimum is given its minimum at once, and keeps it until it has shown (4) that it
   does not use it; one period below it (a sender that stalled) is no evidence.
4. **Room a VM does not use looks like room it wants next period.** A VM offered room it
   leaves unused three times really wants less: the most it sent meanwhile is remembered for
   ``learn_periods`` (then tested again), so a content VM is neither re-probed every
   other period nor ratcheted down period by period by the port's noise. A guaranteed
   VM loses its reserved minimum this way only if it settled well below it.
5. **Caps that add up to the link saturate it.** The port is one FIFO; near its rate its
   queue slows every flow and a one-stream VM refills its share more slowly than a VM
   with several, so caps add up to ``1 - margin`` of the link, and to ``1 -
   guard_margin`` while some VM is held to (about) its guarantee; and a guaranteed VM
   that still delivers less than its minimum at a cap of exactly that minimum gets its
   cap raised by an integral controller on what it delivered.

Caps are the allocations themselves: the port shares per flow, so any cap above an
allocation would be taken by the VM with the most streams and eat a guarantee. Probing
therefore always goes through the allocator, never around it.

The wrapper changes no allocator: it adjusts demands before the inner allocator sees
them and caps after, like the agent does, and keeps the inner allocator's answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from sova.policy.bandwidth import Allocation, BandwidthAllocator, FlowDemand


class RealTrafficAllocator:
    def __init__(
        self,
        inner: BandwidthAllocator,
        *,
        probe: float,
        floor_fraction: float,
        limits: Mapping[str, float | None],
        learn_periods: int = 20,
        active_bps: float = 1e6,
        margin: float = 0.01,
        guard_margin: float = 0.06,
        rates: Callable[[], Mapping[str, float]] | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.probe = probe
        self.floor_fraction = floor_fraction
        self.limits = limits  # the agent's applied caps (a live view)
        self.learn_periods = learn_periods
        self.active_bps = active_bps
        self.margin = margin
        self.guard_margin = guard_margin
        self.rates = rates  # each VM's tx rate since the previous call, if available
        # vm -> (rate it settled at, the most it was offered meanwhile, periods left)
        self._satisfied: dict[str, tuple[float, float, int]] = {}
        self._granted: dict[str, float] = {}  # last allocation, before headroom
        self._boost: dict[str, float] = {}  # extra minimum so the guarantee is delivered
        # vm -> (times offered room it did not use, most offered, most sent meanwhile)
        self._room: dict[str, tuple[int, float, float]] = {}

    def _measured(
        self, d: FlowDemand, capacity: float, rates: Mapping[str, float] | None
    ) -> tuple[float, bool]:
        """(measured rate, held at its cap), from ``rates`` or by undoing the agent's probe.

        The agent hands over ``max(rate, cap) x (1 + probe)`` for a VM near its cap, which
        hides a VM that is held but delivers a little less than its cap; with a rate
        source the wrapper sees the rate itself.
        """
        cap = self.limits.get(d.vm)
        if rates is not None and d.vm in rates:
            r = rates[d.vm]
            return r, cap is not None and r >= (1 - self.probe) * cap
        if cap is None:
            return d.demand_bps, False
        inflated = cap * (1 + self.probe)
        if d.demand_bps >= inflated * (1 - 1e-9) or (
            d.demand_bps >= capacity * (1 - 1e-9) and inflated >= capacity
        ):
            return min(d.demand_bps / (1 + self.probe), cap), True
        return d.demand_bps, False

    def allocate(self, capacity_bps: float, demands: Sequence[FlowDemand]) -> dict[str, Allocation]:
        p, c = self.probe, capacity_bps
        rates = self.rates() if self.rates is not None else None
        measured = {d.vm: self._measured(d, c, rates) for d in demands}
        self._learn(measured)
        total = math.fsum(r for r, _ in measured.values())
        congested = total >= (1 - p) * c
        n_active = max(1, sum(1 for r, _ in measured.values() if r >= self.active_bps))
        estimated: list[FlowDemand] = []
        boosts: dict[str, float] = {}
        for d in demands:
            r, held = measured[d.vm]
            want = self._estimate(d, r, held, c, congested, n_active)
            g = d.sla.bandwidth.minimum
            boosts[d.vm] = self._delivered_guarantee(d.vm, g, r, held) - g
            estimated.append(replace(d, demand_bps=min(want, c)))

        # Allocate a little under the link. Caps that add up to its rate keep the port's
        # FIFO at the edge of saturation; its queue then slows every flow, and a one-stream
        # VM refills its share more slowly than a VM with several streams (measured: a
        # one-stream VM capped at 250 Mbit/s among three capped at 243 gets 240; with the
        # others at 235 it gets its 250). While a guarantee is what a VM is held to, the
        # port gets the larger margin.
        active_floors = math.fsum(
            d.sla.bandwidth.minimum for d in estimated if measured[d.vm][0] >= self.active_bps
        )
        usable = c * (1 - self.margin)
        alloc = self._boosted(usable, estimated, boosts, active_floors)
        binding = any(
            d.sla.bandwidth.minimum > 0
            and measured[d.vm][0] >= self.active_bps
            and 0.99 <= alloc[d.vm].rate_bps / d.sla.bandwidth.minimum < 1 + 2 * self.guard_margin
            for d in estimated
        )
        if binding and self.guard_margin > self.margin:
            # The slack comes out of what is not guaranteed: where the minimums fill the
            # link (DBA-VM's 150/700/150 on 1 GbE) there is none to take.
            usable = max(c * (1 - self.guard_margin), min(usable, active_floors))
            alloc = self._boosted(usable, estimated, boosts, active_floors)
        self._granted = {vm: a.rate_bps for vm, a in alloc.items()}
        # Capacity nobody was allocated (every demand is met) is spread as extra cap, so
        # the caps add up to the link and nobody's allocation is eaten into.
        leftover = max(0.0, usable - math.fsum(a.rate_bps for a in alloc.values()))
        extra = leftover / max(1, len(alloc))
        floor = self.floor_fraction * c
        return {
            vm: replace(a, rate_bps=min(c, max(a.rate_bps + extra, floor)))
            for vm, a in alloc.items()
        }

    def _estimate(
        self, d: FlowDemand, r: float, held: bool, c: float, congested: bool, n_active: int
    ) -> float:
        """The demand to allocate for ``d``, measured at ``r`` (``held``: by its cap):
        its level last seen with room, room to probe above its rate, or its minimum."""
        p = self.probe
        fair = c / n_active
        want = d.demand_bps
        g = d.sla.bandwidth.minimum
        active = r >= self.active_bps
        known = self._satisfied.get(d.vm)
        if known is not None and not congested and r < known[0] * (1 - 2 * p):
            del self._satisfied[d.vm]  # with room to spare it sends clearly less now
            known = None
        content = known is not None and r <= known[0] * (1 + p)
        if content and known is not None:
            # Its demand as last seen with room: neither re-probe it every period (it
            # sits at its cap, which looks "held") nor let the port's noise ratchet its
            # allocation down period by period.
            want = known[0]
        elif held:
            want = max(want, r + p * c / n_active)
        elif congested and active and r < max(g, fair):
            # Below its fair share on a full port and not held by its cap: squeezed by
            # the port's per-flow sharing, or content. Offer room and see.
            want = max(want, r * (1 + 2 * p))
        if g > 0 and active and r < g:
            # Entitled to its minimum: give it at once rather than probe up to it,
            # unless it had its whole minimum available and settled clearly below it
            # (a level learned a little under the minimum is noise, not demand). A
            # single period below it is no evidence: the sender may have stalled, or
            # the port may have squeezed it, and its guarantee must survive both.
            settled_below = content and known is not None and known[0] < (1 - 2 * p) * g <= known[1]
            if not settled_below:
                want = max(want, g)
        return want

    def _boosted(
        self,
        usable: float,
        estimated: list[FlowDemand],
        boosts: dict[str, float],
        active_floors: float,
    ) -> dict[str, Allocation]:
        """The inner allocator's answer on ``usable``, each VM's minimum raised by its
        integral controller's boost. The boosts come out of what is not guaranteed: they
        must never push another VM's guarantee down."""
        room = max(0.0, usable - active_floors)
        total_boost = math.fsum(boosts.values())
        scale = 1.0 if total_boost <= room else room / total_boost
        flows = []
        for d in estimated:
            extra = boosts[d.vm] * scale
            bw, want = d.sla.bandwidth, d.demand_bps
            if extra > 0:
                top = None if bw.maximum is None else max(bw.maximum, bw.minimum + extra)
                bw = replace(bw, minimum=bw.minimum + extra, maximum=top)
                want = max(want, bw.minimum)
            flows.append(replace(d, demand_bps=min(want, usable), sla=replace(d.sla, bandwidth=bw)))
        return self.inner.allocate(usable, flows)

    def _delivered_guarantee(self, vm: str, g: float, rate: float, held: bool) -> float:
        """The minimum to allocate so that ``g`` is what arrives, not just what is capped.

        A guaranteed VM held at a cap of exactly its minimum can still deliver a few
        per cent less (a one-stream TCP sender behind a busy port refills its cap slowly).
        An integral controller on the measured rate closes that gap: each period it is held
        below its minimum, half the shortfall is added (at most 15 % of the minimum); once
        it delivers more than its minimum the extra decays, and an idle VM has none.
        """
        if g <= 0:
            return g
        boost = self._boost.get(vm, 0.0)
        cap = self.limits.get(vm)
        at_minimum = cap is not None and cap >= 0.99 * g
        if rate < self.active_bps:
            # Idle: nothing to deliver. A remnant of the extra would make the allocation
            # reserve its whole minimum again (the extra raises the minimum and the demand
            # together), wasting the link the VM left: measured, 39 % of it for 10 s.
            boost = 0.0
        elif held and at_minimum and rate < g * (1 - 0.01):
            boost = min(0.15 * g, boost + 0.5 * (g - rate))
        elif rate > g * 1.01:
            boost *= 0.8
        self._boost[vm] = boost
        return g + boost

    def _learn(self, measured: Mapping[str, tuple[float, bool]]) -> None:
        """Remember VMs offered room three times that did not take it.

        Three periods (1.5 s at 0.5 s) rather than two: a sender that stalls for a second
        (iperf3 does, every 10 s, see docs/testbed.md) must not set the level it learns.
        """
        for vm in list(self._satisfied):
            level, granted, left = self._satisfied[vm]
            if left <= 1:
                del self._satisfied[vm]
            else:
                self._satisfied[vm] = (level, granted, left - 1)
        for vm, (rate, held) in measured.items():
            offered = self._granted.get(vm)
            if offered is None:
                continue
            count, most, peak = self._room.get(vm, (0, 0.0, 0.0))
            if not held and offered >= (1 + self.probe) * rate:
                # Room offered, left unused; its demand is the most it sent meanwhile (a
                # dip of the port during the test must not become its level).
                count, most, peak = count + 1, max(most, offered), max(peak, rate)
            elif held:
                count, most, peak = 0, 0.0, 0.0  # it pushes against its cap: wants more
            if count >= 3:
                self._satisfied[vm] = (peak, most, self.learn_periods)
                count, most, peak = 0, 0.0, 0.0
            self._room[vm] = (count, most, peak)
