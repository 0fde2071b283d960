"""A host agent as one member of a simulated world's fleet (sim/fleet_settle.py).

A world of thousands of hosts settles most of them each period as arrays instead of
calling each agent (docs/design.md, the settled hosts): the agent's records of a period
are applied from the fleet's arrays when one is next read or written (:class:`Settleable`),
and the agent tells the fleet when it starts or stops acting alone (:meth:`FleetMember._mark`),
so the world reads one array instead of every agent's state. A daemon's agent has no fleet
and pays one attribute read. Kept apart from agent/loop.py, which is the agent's own loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar, overload

from sova.agent.executor import Executor
from sova.model import Inventory
from sova.policy.operation import Migration
from sova.policy.sensing import LoadShares

T = TypeVar("T")


# what a host's settled period leaves its agent (SettledPeriods.take): measured, vm_loads,
# last_load, actual, desired, ranking
SettledPeriod = tuple[
    bool,
    Mapping[str, LoadShares] | None,
    LoadShares | None,
    Inventory,
    dict[str, float | None],
    tuple[str, ...],
]


class SettledPeriods(Protocol):
    """A world's record of the period it settled a host's agent in without calling
    :meth:`HostAgent.settle` (sim/fleet_settle.py): ``at[host]`` the last such period
    (increasing; -1: none), and :meth:`take` of a host settled in the latest one: what
    that call's arguments would have left, ``(measured, vm_loads, last_load, actual,
    desired, ranking)`` (``vm_loads`` None: no loads measured that period; ``last_load``
    None: none measured yet)."""

    at: Any  # an integer array by host index
    # by host index: whether its agent acts alone this period (FleetMember.acts_alone),
    # kept by the agents as that changes (FleetMember._mark)
    alone: Any

    def take(self, host: int) -> SettledPeriod: ...


class Settleable(Generic[T]):
    """An agent's record that a period settled outside the agent may have changed
    (:class:`SettledPeriods`): any read or write of it applies such a period first
    (:meth:`FleetMember._sync`), so a simulated world of thousands of hosts settles them
    as arrays and an agent's records are built only for the hosts something reads. A
    daemon's agent (no fleet) pays one attribute read."""

    __slots__ = ("slot",)

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_kept" + name

    @overload
    def __get__(self, obj: None, owner: type) -> Settleable[T]: ...
    @overload
    def __get__(self, obj: FleetMember, owner: type) -> T: ...
    def __get__(self, obj: FleetMember | None, owner: type) -> T | Settleable[T]:
        if obj is None:
            return self
        if obj._fleet is not None:
            obj._sync()
        value: T = obj.__dict__[self.slot]
        return value

    def __set__(self, obj: FleetMember, value: T) -> None:
        if obj._fleet is not None:
            obj._sync()
        obj.__dict__[self.slot] = value


class FleetMember:
    """The records a settled period leaves an agent, and its membership in a fleet."""

    # the records one period leaves for the next (see Settleable)
    snapshot: Settleable[Inventory | None] = Settleable()
    last_load: Settleable[LoadShares | None] = Settleable()
    last_vm_loads: Settleable[Mapping[str, LoadShares]] = Settleable()
    _measured: Settleable[bool] = Settleable()
    _last_desired: Settleable[dict[str, float | None]] = Settleable()
    _last_ranking: Settleable[tuple[str, ...]] = Settleable()
    _ops_this_period: Settleable[int] = Settleable()
    # the world that settles this host as arrays, if any (join_fleet), the host's index
    # there and the last of its settled periods this agent's records hold
    _fleet: SettledPeriods | None = None
    _fleet_at = -1
    _synced = -1

    # what acts_alone reads (HostAgent's own state)
    executor: Executor
    _signal: Migration | None
    vf_freeze_host: bool
    vf_freeze_vms: frozenset[str]

    def join_fleet(self, fleet: SettledPeriods, host: int) -> None:
        """Let ``fleet`` settle this agent's periods as arrays (its host is ``host``
        there): a period it records in ``fleet.at`` is what :meth:`settle` with its
        :meth:`~SettledPeriods.take` would have done, applied when a record is next read."""
        self._fleet, self._fleet_at, self._synced = fleet, host, -1
        self.executor.on_flight = self._mark
        self._mark()

    @property
    def acts_alone(self) -> bool:
        """Something the world's arrays do not decide for: an operation in flight, the
        manager's signal or a VF fence."""
        return bool(
            self.executor.in_flight
            or self._signal is not None
            or self.vf_freeze_host
            or self.vf_freeze_vms
        )

    def _mark(self) -> None:
        """Tell the fleet (if any) whether this agent acts alone, where that may have
        changed: the world reads one array, not every agent's state each period."""
        fleet = self._fleet
        if fleet is not None:
            fleet.alone[self._fleet_at] = self.acts_alone

    def _sync(self) -> None:
        """Apply the last period the fleet settled this host in, if not applied yet: the
        records :meth:`settle` leaves (its ``unrecorded`` holders aside: a world calls
        :meth:`settle` itself for a host that has any; and the signal it clears: a host is
        settled only without one, and one the manager sent since must stay)."""
        fleet = self._fleet
        assert fleet is not None
        at = int(fleet.at[self._fleet_at])
        if at <= self._synced:
            return
        self._synced = at
        measured, vms, load, actual, desired, ranking = fleet.take(self._fleet_at)
        kept = self.__dict__
        kept["_keptsnapshot"] = actual
        if vms is not None:  # (_take_loads: a period with loads measured)
            kept["_keptlast_vm_loads"] = vms
        if load is not None:
            kept["_keptlast_load"] = load
        kept["_kept_measured"] = measured
        kept["_kept_last_desired"] = desired
        kept["_kept_last_ranking"] = ranking
        kept["_kept_ops_this_period"] = 0
