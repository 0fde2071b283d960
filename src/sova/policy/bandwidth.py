"""Bandwidth allocators of the policy core: who may send how much on one physical link.

Every allocator reads the same per-VM SLA (:class:`sova.model.SLA`, docs/design.md#sla) and the same
measured demand, and answers a cap per VM. They differ in what they approximate:

* :class:`SovaAllocator` (ours) computes the exact optimum the others approximate: the
  work-conserving allocation where every backlogged VM gets ``min(demand, guarantee)``,
  nobody exceeds demand, SLA max or SLA packet rate, the link is filled when demand
  allows, and the rest is shared by weighted max-min (water-filling). It is stateless and
  exact, so each period's answer is the fixed point the feedback controllers crawl to.
* :class:`DbaVmAllocator` is DBA-VM (Amamou et al., ISCC 2012). A strict-priority,
  reservation-style allocator: a guaranteed VM is granted its whole minimum even when it
  sends less (the paper raises ``B_i`` to ``B_i^min`` whenever the measured rate is
  below it), so it is not work-conserving. Its packet-rate step is what lets it honour
  pps SLAs with small packets, which a bit-rate shaper cannot. The paper prints the
  "nothing changes" test as ``B^max < B_i < B^min`` and the grant test as
  ``(B_i - B^min) < B^ex``; both are reversed and we implement docs/design.md#dba-vm's reading
  (``min <= B_i <= max``; grant when the pool covers ``min - B_i``).
* :class:`DaqsController` is DAQS (Kang et al.): a feedback loop on measured rates that
  moves one aggregate cap R for all best-effort VMs in 0.3 Gbit/s steps every 200 ms. It
  approximates a work-conserving minimum guarantee without any per-VF ``min_tx_rate``
  (which many NICs lack), at the price of settling slowly and of thresholds tuned for a
  40 GbE link. The paper text gives no controller details; they are ported from the
  authors' published code (``models/multi_tenants/minimum_guarantee.py`` in
  github.com/Brian-Hwang/DAQS), see the class docstring for what we changed and why.
* :class:`EqualShareAllocator` is the native NIC (demand-limited max-min fair, no SLA) and
  :class:`StaticAllocator` is ``ip link set ... max_tx_rate`` with caps chosen in
  advance: the two baselines every experiment compares against.

Units are SI: bit/s and packets/s. ``Allocation.rate_bps`` is always a *ceiling* to
enforce; for the exact allocators (Sova, equal share, DBA-VM) it is also the intended
throughput. "No cap" is expressed as a cap at the link rate, so that every value stays a
finite float a driver can apply. The module does no I/O.

Why one module over 500 lines: every allocator answers the same ``allocate`` call over
the same ``FlowDemand``/``Allocation`` types; keeping them side by side is what lets a
reader compare DBA-VM, DAQS and Sova line by line (docs/design.md#bandwidth).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from sova.model import GBIT, SLA
from sova.policy.allocation import clamped_fill as clamped_fill
from sova.policy.allocation import sova_allocate
from sova.policy.kernels import Groups

__all__ = [
    "Allocation",
    "BandwidthAllocator",
    "DaqsController",
    "DbaVmAllocator",
    "EqualShareAllocator",
    "FlowDemand",
    "SovaAllocator",
    "StaticAllocator",
    "clamped_fill",
]

BITS_PER_BYTE = 8.0


# --------------------------------------------------------------------------- types


@dataclass(frozen=True)
class FlowDemand:
    """One VM's traffic on one physical interface during the last period.

    ``demand_bps`` is the measured offered load. For a VM that was held at its cap the
    caller has already probed upward (a capped VM's measured rate understates its demand).
    """

    vm: str
    demand_bps: float
    sla: SLA
    packet_bytes: float = 1500.0  # mean packet size: converts bit rate <-> packet rate
    created_seq: int = 0  # creation order, DBA-VM's tie-break inside a priority class

    def __post_init__(self) -> None:
        _check_non_negative("demand_bps", self.demand_bps, self.vm)
        if not (math.isfinite(self.packet_bytes) and self.packet_bytes > 0):
            raise ValueError(f"packet_bytes must be > 0 (VM {self.vm!r}), got {self.packet_bytes}")
        weight = self.sla.weight
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"sla.weight must be > 0 (VM {self.vm!r}), got {weight}")
        if self.sla.max_pps is not None:
            _check_non_negative("sla.max_pps", self.sla.max_pps, self.vm)


@dataclass(frozen=True)
class Allocation:
    rate_bps: float  # bit-rate cap to enforce on this VM
    pps_cap: float | None = None  # packet-rate cap (packets/s); None = no packet cap

    def effective_bps(self, packet_bytes: float) -> float:
        """Bit rate the VM can really reach with packets of ``packet_bytes``.

        With small packets the packet cap, not the bit cap, is binding (DBA-VM §V: 64-byte
        packets at 20 kpps are ~10 Mbit/s however large the bit-rate share is).
        """
        if self.pps_cap is None:
            return self.rate_bps
        return min(self.rate_bps, self.pps_cap * packet_bytes * BITS_PER_BYTE)


class BandwidthAllocator(Protocol):
    name: str

    def allocate(
        self, capacity_bps: float, demands: Sequence[FlowDemand]
    ) -> dict[str, Allocation]: ...


# --------------------------------------------------------------------------- helpers


def _check_non_negative(field_name: str, value: float, vm: str | None = None) -> None:
    where = "" if vm is None else f" (VM {vm!r})"
    if not math.isfinite(value):
        raise ValueError(f"{field_name} must be finite{where}, got {value}")
    if value < 0:
        raise ValueError(f"{field_name} must be >= 0{where}, got {value}")


def _check_input(capacity_bps: float, demands: Sequence[FlowDemand]) -> None:
    _check_non_negative("capacity_bps", capacity_bps)
    seen: set[str] = set()
    for d in demands:
        if d.vm in seen:
            # The result is keyed by VM: a second flow would silently overwrite the first.
            raise ValueError(f"vm {d.vm!r} appears twice in demands")
        seen.add(d.vm)


def _uncapped(capacity_bps: float) -> Allocation:
    return Allocation(rate_bps=capacity_bps)


# --------------------------------------------------------------------------- baselines


class EqualShareAllocator:
    """The native NIC: demand-limited max-min fair sharing, blind to SLAs.

    This is what DBA-VM §III measures as "native" (three VMs offering 1 Gbit/s each on
    1 GbE get ~330 Mbit/s each, so a 700 Mbit/s SLA is missed).
    """

    name: str = "equal-share"

    def allocate(self, capacity_bps: float, demands: Sequence[FlowDemand]) -> dict[str, Allocation]:
        _check_input(capacity_bps, demands)
        hi = [d.demand_bps for d in demands]
        rates = clamped_fill(capacity_bps, [0.0] * len(hi), hi, [1.0] * len(hi))
        return {d.vm: Allocation(rate_bps=r) for d, r in zip(demands, rates, strict=True)}


class StaticAllocator:
    """``ip link set PF vf N max_tx_rate X`` with caps fixed in advance (DAQS's "ip link").

    VMs without a configured cap get ``default_bps``; ``None`` leaves them uncapped (a cap
    at line rate). Caps above the line rate mean nothing to the NIC and are clamped.
    The NIC arbitrates between the caps (equal share) — that is the simulator's job,
    not this allocator's: it only says what is configured.
    """

    name: str = "ip-link-static"

    def __init__(self, caps_bps: Mapping[str, float], default_bps: float | None = None) -> None:
        for vm, cap in caps_bps.items():
            _check_non_negative("caps_bps", cap, vm)
        if default_bps is not None:
            _check_non_negative("default_bps", default_bps)
        self.caps_bps = dict(caps_bps)
        self.default_bps = default_bps

    def allocate(self, capacity_bps: float, demands: Sequence[FlowDemand]) -> dict[str, Allocation]:
        _check_input(capacity_bps, demands)
        out: dict[str, Allocation] = {}
        for d in demands:
            cap = self.caps_bps.get(d.vm, self.default_bps)
            out[d.vm] = Allocation(rate_bps=capacity_bps if cap is None else min(cap, capacity_bps))
        return out


# --------------------------------------------------------------------------- Sova


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
    The arithmetic is the compiled core's (:func:`sova.policy.allocation.sova_allocate`,
    one host here, every host in the agents' and the simulator's bandwidth step).
    """

    name: str = "sova"

    def allocate(self, capacity_bps: float, demands: Sequence[FlowDemand]) -> dict[str, Allocation]:
        _check_input(capacity_bps, demands)
        one = Groups.of(np.zeros(len(demands), dtype=np.int64), 1)
        rates = sova_allocate(
            one,
            np.array([capacity_bps], dtype=np.float64),
            np.array([d.demand_bps for d in demands], dtype=np.float64),
            np.array([d.sla.bandwidth.minimum for d in demands], dtype=np.float64),
            np.array(
                [math.inf if (m := d.sla.bandwidth.maximum) is None else m for d in demands],
                dtype=np.float64,
            ),
            np.array(
                [math.nan if (p := d.sla.max_pps) is None else p for d in demands],
                dtype=np.float64,
            ),
            np.array([d.packet_bytes for d in demands], dtype=np.float64),
            np.array([d.sla.weight for d in demands], dtype=np.float64),
        )
        return {
            d.vm: Allocation(rate_bps=r, pps_cap=d.sla.max_pps)
            for d, r in zip(demands, rates.tolist(), strict=True)
        }


# --------------------------------------------------------------------------- DBA-VM


class DbaVmAllocator:
    """DBA-VM, the two-step allocator of Amamou et al. (docs/design.md#dba-vm), per physical interface.

    Initial ``B_i``: the paper starts from the rate the interface is transmitting at.
    An allocator fed offered load has no such rate, so we start from what the native
    system would give it — the demand-limited equal share (DBA-VM §III: equal thirds of
    the link). The free pool ``B_p^ex`` starts as the capacity that share leaves unused.

    Step 1 walks interfaces from the highest class, in creation order inside a class:

    * ``min <= B_i <= max``: unchanged;
    * ``B_i > max``: cap at max, return the excess to the pool;
    * ``B_i < min``: raise to min from the pool; if the pool is short, cut other
      interfaces of the lowest class first (newest first inside a class, since creation
      order is the paper's precedence), each down to no less than its own min, then the
      next class up — never a class above the current one — and only as much as is
      missing (the paper cuts whole classes to min; cutting just the shortfall gives the
      same guarantee with fewer rate changes). If even that is not enough, grant what
      there is.

    Reservation: a VM sending less than its min is still raised to its min, as in the
    paper; the reserved but unused capacity is what makes DBA-VM not work-conserving.

    Left-over: the pool is then handed out by strict priority, highest class first; inside
    a class it is water-filled equally, each interface up to ``min(max, demand)`` (the
    paper says only "based on their priorities"; giving a VM more than it offers would
    be pure reservation).

    Step 2: the interface's packet cap is ``max_pps * B_i / BT_VM`` with ``BT_VM`` the
    VM's total over its interfaces; with one interface per VM that is ``max_pps``. Packets
    above it are dropped at the source (the netfront), which is why the pps cap is a
    separate field and not folded into ``rate_bps``.
    """

    name: str = "dba-vm"

    def allocate(self, capacity_bps: float, demands: Sequence[FlowDemand]) -> dict[str, Allocation]:
        return self.allocate_host({"": (capacity_bps, demands)})[""]

    def allocate_host(
        self, interfaces: Mapping[str, tuple[float, Sequence[FlowDemand]]]
    ) -> dict[str, dict[str, Allocation]]:
        """Both steps for all physical interfaces of a host, keyed interface -> VM.

        Step 1 runs independently per physical interface; step 2 needs the VM's total
        over all of them. Each ``FlowDemand``'s SLA min/max are that interface's share
        (the paper's ``B_i^min``/``B_i^max`` are per virtual interface); ``max_pps`` is
        the VM's and must agree across its flows.
        """
        rates: dict[str, dict[str, float]] = {}
        vm_total: dict[str, float] = {}
        vm_flows: dict[str, int] = {}
        vm_pps: dict[str, float | None] = {}
        for iface, (capacity_bps, demands) in interfaces.items():
            _check_input(capacity_bps, demands)
            rates[iface] = self._step1(capacity_bps, demands)
            for d in demands:
                if d.vm in vm_pps and vm_pps[d.vm] != d.sla.max_pps:
                    raise ValueError(
                        f"sla.max_pps of VM {d.vm!r} differs between interfaces: "
                        f"{vm_pps[d.vm]} vs {d.sla.max_pps}"
                    )
                vm_pps[d.vm] = d.sla.max_pps
                vm_total[d.vm] = vm_total.get(d.vm, 0.0) + rates[iface][d.vm]
                vm_flows[d.vm] = vm_flows.get(d.vm, 0) + 1

        out: dict[str, dict[str, Allocation]] = {}
        for iface, per_vm in rates.items():
            out[iface] = {}
            for vm, b in per_vm.items():
                max_pps = vm_pps[vm]
                pps_cap: float | None
                if max_pps is None:
                    pps_cap = None
                elif vm_total[vm] > 0:
                    pps_cap = max_pps * (b / vm_total[vm])
                else:
                    # B_i / BT_VM is 0/0 for a silent VM: split its packet budget evenly.
                    pps_cap = max_pps / vm_flows[vm]
                out[iface][vm] = Allocation(rate_bps=b, pps_cap=pps_cap)
        return out

    @staticmethod
    def _step1(capacity_bps: float, demands: Sequence[FlowDemand]) -> dict[str, float]:
        order = sorted(demands, key=lambda d: (-d.sla.priority, d.created_seq))
        n = len(order)
        share = clamped_fill(capacity_bps, [0.0] * n, [d.demand_bps for d in order], [1.0] * n)
        b = {d.vm: s for d, s in zip(order, share, strict=True)}
        pool = max(0.0, capacity_bps - math.fsum(share))
        bmin = {d.vm: d.sla.bandwidth.minimum for d in order}
        bmax = {
            d.vm: math.inf if d.sla.bandwidth.maximum is None else d.sla.bandwidth.maximum
            for d in order
        }
        # Cut order: lowest class first, newest first inside a class.
        cut_order = sorted(order, key=lambda d: (d.sla.priority, -d.created_seq))

        for cur in order:
            vm = cur.vm
            if b[vm] > bmax[vm]:
                pool += b[vm] - bmax[vm]
                b[vm] = bmax[vm]
            elif b[vm] < bmin[vm]:
                need = bmin[vm] - b[vm]
                if pool < need:
                    for victim in cut_order:
                        if victim.sla.priority > cur.sla.priority:
                            break  # higher classes are never cut for a lower one
                        if victim.vm == vm or pool >= need:
                            continue
                        cut = min(max(0.0, b[victim.vm] - bmin[victim.vm]), need - pool)
                        b[victim.vm] -= cut
                        pool += cut
                grant = min(need, pool)
                b[vm] += grant
                pool -= grant

        # Left-over by strict priority; equal water-fill inside a class.
        for prio in sorted({d.sla.priority for d in order}, reverse=True):
            if pool <= 0:
                break
            members = [d for d in order if d.sla.priority == prio]
            room = [max(0.0, min(bmax[d.vm], d.demand_bps) - b[d.vm]) for d in members]
            give = clamped_fill(
                min(pool, math.fsum(room)), [0.0] * len(room), room, [1.0] * len(room)
            )
            for d, g in zip(members, give, strict=True):
                b[d.vm] += g
            pool -= math.fsum(give)
        return b


# --------------------------------------------------------------------------- DAQS


class DaqsController:
    """The DAQS controller (Kang et al.), a faithful port of the authors' published loop.

    State: one aggregate cap ``R`` over all best-effort VMs (VMs with no SLA minimum), or
    ``None`` = no caps (the published code's ``regulated_speed = -1``), its initial value.
    Each 200 ms period, fed the measured rates (``demand_bps``), with ``G`` the guarantee
    VMs' total, ``target`` the sum of their SLA minimums and ``total`` everyone's total:

    1. ``G < 1 Gbit/s``: remove all caps (``R = None``) — no guarantee VM is active.
    2. ``G < target``: if ``R`` is ``None``, start at ``R = link rate``; else if
       ``total >= 0.838 * link`` lower ``R`` by 0.3 Gbit/s (floor 1 Gbit/s), else if
       ``0.904 * link > total + 0.3 Gbit/s`` raise it by 0.3 (ceiling: the link rate).
    3. ``G > 1.45 * target + 1.15 Gbit/s`` and best-effort traffic > 1 Gbit/s: raise by 0.3.
    4. Otherwise hold.

    ``R`` is split equally among the best-effort VMs sending more than 1 Gbit/s. The
    others are not touched: they keep the cap they last got (none if they never sent
    more than 1 Gbit/s), exactly as the published code, which only reconfigures the
    heavy senders. Guarantee VMs are never capped.

    Changes from the published code, each to follow docs/design.md#daqs or to avoid a bug:

    * Units. The code measures Gibit/s (bytes * 8 / 2^30) against a decimal link speed
      from ethtool; its thresholds ``1 - (2^30/1e9 - 1) * 2.2 = 0.8378`` and
      ``1 - (2^30/1e9 - 1) * 1.3 = 0.9041`` come from that mix. We use SI bit/s and the
      documented 0.838 and 0.904.
    * On ``G < 1 Gbit/s`` the code deletes the qdisc of heavy best-effort VMs only, so a
      light one keeps a stale cap; the design says remove all caps, and so do we.
    * Rule 3 while uncapped: the code adds 0.3 to the sentinel -1, so after four such
      periods ``R`` becomes +0.2 Gbit/s and silently throttles everyone. Raising "no cap"
      here leaves it uncapped.

    An uncapped VM is returned with a cap at the link rate.
    """

    name: str = "daqs"

    def __init__(
        self,
        *,
        period_s: float = 0.2,
        step_bps: float = 0.3 * GBIT,
        active_bps: float = 1.0 * GBIT,
        floor_bps: float = 1.0 * GBIT,
        congested_util: float = 0.838,
        spare_util: float = 0.904,
        marginal_rate: float = 1.45,
        marginal_offset_bps: float = 1.15 * GBIT,
    ) -> None:
        self.period_s = period_s  # how often the caller should step it (not used here)
        self.step_bps = step_bps
        self.active_bps = active_bps
        self.floor_bps = floor_bps
        self.congested_util = congested_util
        self.spare_util = spare_util
        self.marginal_rate = marginal_rate
        self.marginal_offset_bps = marginal_offset_bps
        self._r: float | None = None
        self._caps: dict[str, float] = {}

    @property
    def R(self) -> float | None:  # upper case: docs/design.md#daqs's name for the aggregate cap
        """Aggregate best-effort cap in bit/s; ``None`` = best-effort VMs uncapped."""
        return self._r

    @property
    def caps(self) -> Mapping[str, float]:
        """Per-VM caps currently applied (VMs absent here are uncapped)."""
        return dict(self._caps)

    def reset(self) -> None:
        self._r = None
        self._caps.clear()

    def allocate(self, capacity_bps: float, demands: Sequence[FlowDemand]) -> dict[str, Allocation]:
        """One controller period; ``demands`` are the rates measured over it."""
        return self.step(capacity_bps, demands)

    def step(self, capacity_bps: float, demands: Sequence[FlowDemand]) -> dict[str, Allocation]:
        _check_input(capacity_bps, demands)
        guaranteed = [d for d in demands if d.sla.guaranteed]
        best_effort = [d for d in demands if not d.sla.guaranteed]
        g = math.fsum(d.demand_bps for d in guaranteed)
        target = math.fsum(d.sla.bandwidth.minimum for d in guaranteed)
        total = math.fsum(d.demand_bps for d in demands)
        be_total = total - g

        self._r = self._next_r(self._r, capacity_bps, g, target, total, be_total)

        if self._r is None:
            self._caps.clear()
        else:
            heavy = [d.vm for d in best_effort if d.demand_bps > self.active_bps]
            if heavy:
                each = self._r / len(heavy)
                for vm in heavy:
                    self._caps[vm] = each

        out: dict[str, Allocation] = {}
        for d in demands:
            cap = None if d.sla.guaranteed else self._caps.get(d.vm)
            out[d.vm] = _uncapped(capacity_bps) if cap is None else Allocation(rate_bps=cap)
        return out

    def _next_r(
        self,
        r: float | None,
        link: float,
        g: float,
        target: float,
        total: float,
        be_total: float,
    ) -> float | None:
        if g < self.active_bps:
            return None
        if g < target:
            if r is None:
                return link
            if total >= self.congested_util * link:
                return max(self.floor_bps, r - self.step_bps)
            if self.spare_util * link > total + self.step_bps:
                return min(link, r + self.step_bps)
            return r
        if (
            g > self.marginal_rate * target + self.marginal_offset_bps
            and be_total > self.active_bps
        ):
            return None if r is None else min(link, r + self.step_bps)
        return r
