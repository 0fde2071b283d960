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
whole world with a plain function (see :class:`MockDriver`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

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


# --------------------------------------------------------------------------- mock


@dataclass(frozen=True)
class DriverRequest:
    method: str  # "now" | "capabilities" | "inventory" | "sample" | "submit" | "poll"
    args: tuple[Any, ...] = ()


@dataclass
class MockDriver:
    """A driver whose every call is answered by one plain function.

    Tests inject behaviour instead of patching::

        def world(req: DriverRequest):
            if req.method == "submit":
                return "op-1"
            ...

        agent = HostAgent(MockDriver(world), ...)

    Every request is recorded in :attr:`calls` so a test can assert what was asked.
    """

    handler: Callable[[DriverRequest], Any]
    calls: list[DriverRequest] = field(default_factory=list)

    def _call(self, method: str, *args: Any) -> Any:
        req = DriverRequest(method, args)
        self.calls.append(req)
        return self.handler(req)

    def now(self) -> float:
        return float(self._call("now"))

    def capabilities(self) -> Capabilities:
        result: Capabilities = self._call("capabilities")
        return result

    def inventory(self) -> Inventory:
        result: Inventory = self._call("inventory")
        return result

    def sample(self) -> HostSample:
        result: HostSample = self._call("sample")
        return result

    def submit(self, action: Action) -> str:
        return str(self._call("submit", action))

    def poll(self, op_id: str) -> OpStatus:
        result: OpStatus = self._call("poll", op_id)
        return result

    def submitted(self) -> list[Action]:
        return [c.args[0] for c in self.calls if c.method == "submit"]
