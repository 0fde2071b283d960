"""The simulator's driver: the same :class:`~sova.driver.base.Driver` protocol as a real host.

The agent cannot tell it from libvirt: it reads cumulative counters, submits actions that
complete later on the simulated clock, and polls them.
"""

from __future__ import annotations

from sova.driver.base import Capabilities, OpState, OpStatus
from sova.model import Action, HostSample, Inventory
from sova.sim.host import SimHost


class SimDriver:
    def __init__(self, host: SimHost) -> None:
        self.host = host

    def now(self) -> float:
        return self.host.env.now

    def capabilities(self) -> Capabilities:
        nic = self.host.host.nic
        return Capabilities(
            host=self.host.host.name,
            vf_total=nic.vf_pool,
            vf_pool=nic.vf_pool,
            nic=nic.caps,
            can_migrate=False,
            guest_agent=True,
        )

    def inventory(self) -> Inventory:
        return self.host.inventory()

    def sample(self) -> HostSample:
        return self.host.sample()

    def submit(self, action: Action) -> str:
        return self.host.submit(action)

    def poll(self, op_id: str) -> OpStatus:
        try:
            op = self.host.poll(op_id)
        except KeyError:
            return OpStatus(op_id, OpState.FAILED, f"unknown operation {op_id!r}")
        return OpStatus(op_id, OpState(op.state), op.detail)
