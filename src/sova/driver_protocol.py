"""The one narrow interface between Sova's control logic and a world of hosts.

Three worlds implement it: the built-in simulator, the network-namespace testbed and
production hosts (libvirt + netlink + QEMU guest agent). The interface is shaped by the
hardest of them, the real host:

* sampling returns *cumulative* counters, never rates: rates are the sensing layer's job
  and it must survive counter resets;
* actions are *submitted* and complete later (VF hot-unplug can take seconds or fail with
  "guest is busy"); the caller polls and enforces its own deadline;
* the driver reports what the NIC really supports instead of the caller assuming it.

Like an httpx transport, the surface is small on purpose so that a test can replace the
whole world with a plain function (see :class:`sova.driver.base.MockDriver`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from sova.model import Action, HostSample, Inventory, NICCapabilities


class OpState(StrEnum):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class OpStatus:
    op_id: str
    state: OpState
    detail: str = ""

    @property
    def done(self) -> bool:
        return self.state is not OpState.PENDING


@dataclass(frozen=True)
class Capabilities:
    host: str
    vf_total: int  # VFs that exist on the PF
    vf_pool: int  # VFs Sova may hand out
    nic: NICCapabilities
    can_migrate: bool = True
    guest_agent: bool = False
    notes: tuple[str, ...] = ()  # human-readable reasons, e.g. "min_tx_rate refused: EOPNOTSUPP"


class DriverError(RuntimeError):
    """A driver call failed in a way the caller should log and retry later."""


@runtime_checkable
class Driver(Protocol):
    """What every world offers the agent. All calls must be bounded in time."""

    def now(self) -> float:
        """Seconds on the driver's clock (simulated or monotonic)."""
        ...

    def capabilities(self) -> Capabilities: ...

    def inventory(self) -> Inventory:
        """Actual state: which VM runs here, which holds a VF at what rate."""
        ...

    def sample(self) -> HostSample:
        """Cumulative counters of the host and every VM, stamped with :meth:`now`."""
        ...

    def submit(self, action: Action) -> str:
        """Start an action and return an operation id at once; never blocks on it."""
        ...

    def poll(self, op_id: str) -> OpStatus: ...
