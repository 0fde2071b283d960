"""The driver protocol's test double, and the protocol re-exported for the drivers.

The protocol itself (:class:`Driver`, :class:`Capabilities`, :class:`OpStatus`,
:class:`DriverError`) lives in :mod:`sova.driver_protocol`, below the agent that is
written against it; the drivers implement it from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sova.driver_protocol import Capabilities, Driver, DriverError, OpState, OpStatus
from sova.model import Action, HostSample, Inventory

__all__ = [
    "Capabilities",
    "Driver",
    "DriverError",
    "DriverRequest",
    "MockDriver",
    "OpState",
    "OpStatus",
]


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
