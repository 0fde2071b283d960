"""The orchestrator seam: one small interface for *performing* actions, two implementations.

The agent keeps talking to one :class:`~sova.driver.base.Driver`. With an orchestrator, that
driver is an :class:`OrchestratedDriver`: sensing (``now``, ``capabilities``, ``sample``) still
comes from the host driver, because only the host can count a VM's packets, while ``submit``
and ``poll`` go to an :class:`Actuator`, and ``inventory`` is the host's view reconciled with
the orchestrator's (the orchestrator owns which VM runs where and which holds a VF port).
Nothing in the policy core, the planner or the executor changes: they still see one driver
whose operations complete later, succeed or fail, and are bounded by the executor's deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sova.driver.base import Capabilities, Driver, DriverError, OpStatus
from sova.model import Action, HostSample, Inventory


class CloudConfigError(ValueError):
    """The cloud cannot be used as configured (missing SDK, unknown clouds.yaml entry)."""


@runtime_checkable
class Actuator(Protocol):
    """Performs actions the agent decided; every call bounded in time, none blocking on an op."""

    name: str

    def submit(self, action: Action) -> str:
        """Start ``action``; return an operation id at once."""
        ...

    def poll(self, op_id: str) -> OpStatus: ...

    def reconcile(self, sensed: Inventory) -> Inventory:
        """The host's sensed inventory corrected by what the orchestrator knows."""
        ...


@runtime_checkable
class FailoverHooks(Protocol):
    """The host side of a fast NIC the orchestrator plugs: the guest's failover (guest-bond)
    must make it carry the traffic after the plug and move the traffic off it before the
    unplug, each confirmed. Raise :class:`DriverError` when it is not confirmed."""

    def to_backup(self, vm: str) -> str: ...

    def to_fast(self, vm: str) -> str: ...


@dataclass
class OrchestratedDriver:
    """A :class:`Driver` that senses through ``host`` and acts through ``actuator``."""

    host: Driver
    actuator: Actuator

    def now(self) -> float:
        return self.host.now()

    def capabilities(self) -> Capabilities:
        return self.host.capabilities()

    def sample(self) -> HostSample:
        return self.host.sample()

    def inventory(self) -> Inventory:
        """The host's inventory reconciled with the orchestrator's; :class:`DriverError` when
        the orchestrator cannot be asked, whatever its client library raised (keystoneauth's
        ``DiscoveryFailure``, a refused connection, a 5xx), so that the agent skips the period
        with one log line instead of dying or deciding on a view it could not check."""
        sensed = self.host.inventory()
        try:
            return self.actuator.reconcile(sensed)
        except DriverError:
            raise
        except Exception as exc:
            raise DriverError(
                f"{self.actuator.name} inventory unavailable: {type(exc).__name__}: {exc}"
            ) from exc

    def submit(self, action: Action) -> str:
        return self.actuator.submit(action)

    def poll(self, op_id: str) -> OpStatus:
        return self.actuator.poll(op_id)
