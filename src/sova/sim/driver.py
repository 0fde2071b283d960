"""The simulator's driver: the same :class:`~sova.driver.base.Driver` protocol as a real host.

The agent cannot tell it from libvirt: it reads cumulative counters, submits actions that
complete later on the simulated clock, and polls them.
"""

from __future__ import annotations

from sova.driver.base import Capabilities, OpState, OpStatus
from sova.model import Action, HostSample, Inventory
from sova.sim.engine import Engine


class SimDriver:
    def __init__(self, engine: Engine, host: str) -> None:
        self.engine = engine
        self.host = host
        self._nic = engine.hosts[engine.host_index[host]].nic

    def now(self) -> float:
        return self.engine.env.now

    def capabilities(self) -> Capabilities:
        return Capabilities(
            host=self.host,
            vf_total=self._nic.vf_pool,
            vf_pool=self._nic.vf_pool,
            nic=self._nic.caps,
            can_migrate=len(self.engine.hosts) > 1,
            guest_agent=True,
        )

    def inventory(self) -> Inventory:
        return self.engine.inventory(self.host)

    def sample(self) -> HostSample:
        return self.engine.sample(self.host)

    def submit(self, action: Action) -> str:
        return self.engine.submit(self.host, action)

    def poll(self, op_id: str) -> OpStatus:
        op = self.engine.ops.get(op_id)
        if op is None:
            return OpStatus(op_id, OpState.FAILED, f"unknown operation {op_id!r}")
        return OpStatus(op_id, OpState(op.state), op.detail)
