"""The agent's drivers by name (``settings.driver``): the third plug-in point beside VF
policies and allocators (:mod:`sova.agent.registry`).

A driver plug-in is a factory ``(settings, *, speed, policy) -> Wiring``
(:class:`sova.manager.daemons.agent.wiring.Wiring`: the driver and the clock the agent runs on).
The built-ins are named by reference and imported only when chosen (libvirt-python is not
installed everywhere; the demo's drivers live with the demo, in the composition layer); an installed package adds one with an entry point in the group
``sova.drivers``. The settings validate ``driver`` against this registry's names, so a
misspelt driver is an error naming the field and the value before anything is opened.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sova.agent.registry import Registry, RegistryError

DriverFactory = Callable[..., Any]


def _factory(name: str, obj: Any) -> DriverFactory:
    if not callable(obj):
        raise RegistryError(f"driver {name!r}: {obj!r} is not a factory (settings -> Wiring)")
    factory: DriverFactory = obj
    return factory


DRIVERS: Registry[DriverFactory] = Registry(
    "driver",
    "sova.drivers",
    _factory,
    lazy={
        "libvirt": "sova.manager.daemons.agent.wiring:libvirt_wiring",
        "mock": "sova.manager.daemons.agent.wiring:mock_wiring",
        # The demo's hosts compose the agent with the simulator: sova.demo wires them, and
        # the production daemon imports the simulator only when one of them is chosen.
        "sim": "sova.demo:sim_agent_wiring",
        "remote": "sova.demo:remote_wiring",
    },
)
