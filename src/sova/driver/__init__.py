"""Drivers: the worlds Sova's control logic acts on, behind one protocol."""

from sova.driver.base import (
    Capabilities,
    Driver,
    DriverError,
    DriverRequest,
    MockDriver,
    OpState,
    OpStatus,
)

__all__ = [
    "Capabilities",
    "Driver",
    "DriverError",
    "DriverRequest",
    "MockDriver",
    "OpState",
    "OpStatus",
]
