"""A simulated world's settled hosts handed their period as arrays, not one call per agent.

Most hosts of a large world are *settled* most periods (sim/fleet_control.py): their
agent's step would plan nothing, and :meth:`~sova.agent.loop.HostAgent.settle` left its
records (the period's inventory, loads, desired holders and ranking) as that step would.
Calling it for each of 1,000 hosts every period, with a ``Loads`` of objects built for it
and a report of its VMs for the manager, was most of the control side of a run. Here the
world records the period once (:meth:`SettledHosts.publish`: the period's sensing, the
settled hosts' inventories, holders and rankings, a copy of each host's last load) and
marks its settled hosts in one array; each agent applies it when one of its records is
next read or written (``HostAgent._sync``: when it steps, polls, reports or a test reads
it), and the manager's intake takes those hosts' VM loads straight from the period
(:class:`SettledVMReports`), built only for the hosts it reads.

A host's record is its agent's own settle of that period exactly (tests/test_fleet_control.py
holds every agent's records after every period equal to its own steps'): a settled host
has no signal (it does not act alone, :attr:`SettledHosts.alone`) and nothing it migrates
away, and a host with holders missing a dwell start is still settled by the call, its
policy's note of them being the agent's own (``World._phase``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import NamedTuple, cast

import numpy as np

from sova.agent.fleet_member import SettledPeriod
from sova.agent.loop import HostAgent, VMLoadReports
from sova.policy.hotspot import VMLoad
from sova.policy.sensing import LoadShares
from sova.sim.fleet_control import Settled
from sova.sim.fleet_sensing import FleetSensed

_NOT_MIGRATING: frozenset[str] = frozenset()


class _Period(NamedTuple):
    """One settled period as its agents read it (nothing in it changes afterwards)."""

    names: Sequence[str]  # host names by index
    sensed: FleetSensed
    settled: Mapping[str, Settled]  # host name -> what its agent takes
    measured: list[bool]  # by host index
    last_load: np.ndarray  # (hosts, 3): each host's last measured load by then
    has_load: np.ndarray  # whether it has one


class SettledHosts:
    """The periods a world settled its hosts in (:class:`~sova.agent.fleet_member.SettledPeriods`)."""

    def __init__(self, host_names: Sequence[str], agents: Sequence[HostAgent]) -> None:
        self.names = host_names
        self.at = np.full(len(host_names), -1, dtype=np.int64)
        # each agent's HostAgent.acts_alone, kept by the agents (join_fleet sets it)
        self.alone = np.zeros(len(host_names), dtype=bool)
        self.period = -1
        self.last: _Period | None = None
        for hi, agent in enumerate(agents):
            agent.join_fleet(self, hi)

    def publish(
        self,
        hosts: list[int],
        sensed: FleetSensed,
        settled: Mapping[str, Settled],
        last_load: np.ndarray,
        has_load: np.ndarray,
    ) -> None:
        """The period the hosts ``hosts`` (indices; ``settled`` by name) were settled in.
        Their agents must have applied any earlier period first (the agents that step
        this period apply it as they step, before this)."""
        self.period += 1
        self.last = _Period(
            self.names, sensed, settled, sensed.measured_list(), last_load.copy(), has_load.copy()
        )
        self.at[hosts] = self.period

    def take(self, host: int) -> SettledPeriod:
        p = self.last
        assert p is not None and self.at[host] == self.period
        actual, desired, ranking, _ = p.settled[p.names[host]]
        vms = None if p.sensed.loads is None else p.sensed.vm_loads_at(host)
        load = LoadShares(*p.last_load[host].tolist()) if p.has_load[host] else None
        return p.measured[host], vms, load, actual, desired, ranking

    def report_vms(self, agents: Sequence[HostAgent]) -> list[Mapping[str, VMLoad] | None]:
        """Every agent's :meth:`~sova.agent.loop.HostAgent.report_vms`, in host order: the
        hosts settled in the last period from its arrays without touching their agents
        (equal to what theirs would give: their records are that period's, and they
        migrate nothing away)."""
        p = self.last
        if p is None or p.sensed.loads is None:  # (no loads yet: their own)
            return [a.report_vms() for a in agents]
        out: list[Mapping[str, VMLoad] | None]
        out = list(map(SettledVMReports, repeat(p, len(agents)), range(len(agents))))
        for hi in np.flatnonzero(self.at != self.period).tolist():
            out[hi] = agents[hi].report_vms()  # (not settled in it: its own)
        return out


class SettledVMReports(VMLoadReports):
    """A settled host's VM loads as its agent would report them (the ``VMLoadReports``
    of its period's loads and inventory, nothing migrating away), built when first read:
    its period's arrays are kept instead of a ``HostLoads`` and the agent's records."""

    __slots__ = ()

    def __init__(self, period: _Period, host: int) -> None:  # (no super: see LazyMapping)
        self._built = None
        self._args = (period, host)  # type: ignore[assignment]

    def _build(self) -> dict[str, VMLoad]:
        return self._own()._build()

    def _own(self) -> VMLoadReports:
        p, hi = cast(tuple[_Period, int], self._args)
        actual = p.settled[p.names[hi]][0]
        return VMLoadReports(p.sensed.vm_loads_at(hi), actual, _NOT_MIGRATING)

    def mover_columns(self) -> tuple[list[str], list[float], list[int]] | None:
        return None if self._built is not None else self._own().mover_columns()

    def vm_load(self, vm: str) -> VMLoad:
        return self[vm] if self._built is not None else self._own().vm_load(vm)
