"""The production driver for libvirt hosts, split by responsibility (see ``driver.py``)."""

from sova.driver.libvirt_driver.driver import (
    DomainEvent,
    LibvirtDriver,
    LibvirtDriverConfig,
    PFView,
    VMReport,
    ensure_event_loop,
    open_connection,
)

__all__ = [
    "DomainEvent",
    "LibvirtDriver",
    "LibvirtDriverConfig",
    "PFView",
    "VMReport",
    "ensure_event_loop",
    "open_connection",
]
