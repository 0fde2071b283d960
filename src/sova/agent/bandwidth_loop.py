"""The host agent's bandwidth loop (:meth:`HostAgent.bandwidth_step`), on its own shorter
period (DAQS runs at 200 ms): measured rates -> the configured allocator -> guest rate
limits, through the agent's executor.

A mixin of :class:`sova.agent.loop.HostAgent`, apart from its control period because it
shares only the executor, the host's last inventory and the limits in force with it; the
arithmetic is :mod:`sova.agent.bandwidth`'s.
"""

from __future__ import annotations

import math

import numpy as np

from sova.agent import bandwidth as bw
from sova.agent.config import ControllerConfig
from sova.agent.executor import Executor
from sova.driver_protocol import Driver
from sova.model import Action, HostSample, Inventory, NicKind, SetGuestRateLimit
from sova.policy import metering
from sova.policy.bandwidth import BandwidthAllocator
from sova.policy.kernels import Groups


class BandwidthLoop:
    """The agent's fields this loop reads and writes (set by ``HostAgent.__init__``)."""

    driver: Driver
    config: ControllerConfig
    executor: Executor
    allocator: BandwidthAllocator | None
    spread_spare: bool
    snapshot: Inventory | None
    limits: dict[str, float | None]  # the guest limits in force (the agent's outcomes)
    # Guaranteed VMs' reservations (bandwidth.Reservations.entry; absent: none).
    reservations: dict[str, tuple[int, float, bool]]
    _bw_last: HostSample | None  # this loop's previous reading

    def bandwidth_step(self) -> list[Action]:
        """One period of the bandwidth controller: measured rates -> allocator -> limits
        (the kernels of :mod:`sova.agent.bandwidth`, on this one host)."""
        if self.allocator is None:
            return []
        self.executor.poll()
        sample = self.driver.sample()
        prev, self._bw_last = self._bw_last, sample
        if prev is None or sample.time_s - prev.time_s <= 0:
            return []
        names = sorted(vm for vm in sample.vms if vm in prev.vms)
        cur = [sample.vms[vm] for vm in names]
        old = [prev.vms[vm] for vm in names]
        m = metering.measure(
            np.array([float(c.tx_bytes) for c in old]),
            np.array([float(c.tx_packets) for c in old]),
            np.array([float(c.tx_bytes) for c in cur]),
            np.array([float(c.tx_packets) for c in cur]),
            sample.time_s - prev.time_s,
        )
        if not m.valid.any():
            return []
        actual = self.snapshot = self.driver.inventory()
        keep = m.valid & np.array([vm in actual.vms for vm in names], dtype=bool)
        flows = [vm for vm, ok in zip(names, keep.tolist(), strict=True) if ok]
        if not flows:
            return []
        n = len(flows)
        groups = Groups.of(np.zeros(n, dtype=np.int64), 1)
        capacity = np.array([actual.host.nic.capacity_bps])
        current = np.array([_nan(self.limits.get(vm)) for vm in flows])
        vms = [actual.vms[vm].vm for vm in flows]
        sova = bw.all_sova([self.allocator])
        fast = np.array([actual.vms[vm].nic is NicKind.VF for vm in flows], dtype=bool)
        cols = bw.SLAArrays.of([v.sla for v in vms]).columns(
            m.bps[keep], m.packet_bytes[keep], current, fast
        )
        # an allocator sharing out measured demand needs a congested guarantee's true demand
        # (docs/design.md#guarantees); the published baselines read raw rates
        held = None
        if self.spread_spare and sova and (self.reservations or (cols.minimum > 0).any()):
            held = bw.Reservations.of([self.reservations.get(vm) for vm in flows])
        d = bw.decide(
            [self.allocator], groups, capacity, np.arange(n, dtype=np.int64), cols,
            vms.__getitem__, sova=sova, probe=self.config.probe,
            spread_spare=self.spread_spare, held=held,
        )  # fmt: skip
        if held is not None:
            self._keep(flows, held)
        new, pps = d.new, d.pps
        actions: list[Action] = [
            SetGuestRateLimit(flows[k], _none(new[k]), _none(pps[k]))
            for k in d.changed.tolist()
        ]
        for act in actions:
            self.executor.apply(act, actual)
        return actions

    def _keep(self, flows: list[str], held: bw.Reservations) -> None:
        """The period's reservations into the agent's record."""
        for k, vm in enumerate(flows):
            entry = held.entry(k)
            if entry is None:
                self.reservations.pop(vm, None)
            else:
                self.reservations[vm] = entry


def _nan(x: float | None) -> float:
    return math.nan if x is None else x


def _none(x: float) -> float | None:
    return None if math.isnan(x) else float(x)
