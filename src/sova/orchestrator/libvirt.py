"""The ``libvirt`` orchestrator: the host driver performs every action itself (today's behaviour).

For a cluster without an orchestrator the hypervisor is the only source of truth, so the
driver migrates with ``migrateToURI3`` and hot-plugs VFs through libvirt, and its inventory
needs no reconciling. :func:`sova.orchestrator.base.orchestrate` returns the driver itself
in this mode; this class exists so that code written against :class:`Actuator` (the
recommend-mode executor, tests) can use the host as one.
"""

from __future__ import annotations

from dataclasses import dataclass

from sova.driver.base import Driver, OpStatus
from sova.model import Action, Inventory


@dataclass
class DriverActuator:
    driver: Driver
    name: str = "libvirt"

    def submit(self, action: Action) -> str:
        return self.driver.submit(action)

    def poll(self, op_id: str) -> OpStatus:
        return self.driver.poll(op_id)

    def reconcile(self, sensed: Inventory) -> Inventory:
        return sensed
