"""Which driver and clock an agent process runs with, chosen by ``settings.driver`` from
the drivers' registry (:mod:`sova.manager.daemons.drivers`; out-of-tree drivers plug in there).

libvirt is imported only when chosen. ``sim`` (a scenario simulated in this process)
composes the agent with the simulator and is wired by :mod:`sova.demo`, never here: the
production daemon does not import the simulator.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sova.agent.config import ControllerConfig
from sova.driver.base import Driver
from sova.manager.daemons.agent.tickers import Ticker, WallTicker
from sova.manager.daemons.config import AgentSettings, ConfigError
from sova.manager.daemons.drivers import DRIVERS


class _ToyHost:
    """``--driver mock``: a static 4-VM host whose ops succeed at once (smoke tests)."""

    def __init__(self, name: str = "mock-host") -> None:
        from sova import model

        self.model = model
        nic = model.NIC("pf0", 10e9, 2)
        self.host = model.Host(name, 16, 64 * 2**30, nic)
        self.vms = {
            f"vm{i}": model.VMState(model.VM(f"vm{i}", 2, 2 * 2**30, created_seq=i))
            for i in range(1, 5)
        }
        self.t0 = time.monotonic()
        self.ops = 0

    def __call__(self, req: Any) -> Any:
        from sova.driver.base import Capabilities, OpState, OpStatus

        m = self.model
        now = time.monotonic() - self.t0
        if req.method == "now":
            return now
        if req.method == "capabilities":
            return Capabilities(self.host.name, 2, 2, m.NICCapabilities())
        if req.method == "inventory":
            return m.Inventory(self.host, dict(self.vms))
        if req.method == "sample":
            vms = {
                n: m.VMCounters(
                    n, 2, int(now * 1e9 * 0.2 * i), 0, 0, int(now * 1e8 * i), 0, int(now * 1e4 * i)
                )
                for i, n in enumerate(sorted(self.vms), 1)
            }
            return m.HostSample(self.host.name, now, vms, m.HostCounters(int(now * 1e9), 0, 0, 0))
        if req.method == "submit":
            a = req.args[0]
            st = self.vms.get(a.vm)
            if st is not None and isinstance(a, m.AttachVF):
                self.vms[a.vm] = m.VMState(st.vm, m.NicKind.VF, 0, a.max_bps)
            elif st is not None and isinstance(a, m.DetachVF):
                self.vms[a.vm] = m.VMState(st.vm)
            self.ops += 1
            return f"op{self.ops}"
        if req.method == "poll":
            return OpStatus(req.args[0], OpState.SUCCEEDED)
        raise ValueError(req.method)


@dataclass
class Wiring:
    driver: Driver
    ticker_factory: Callable[[threading.Event], Ticker]
    config: ControllerConfig | None = None  # a world's own controller (replaces settings')
    # builds the daemon (settings, driver, **kw) -> AgentDaemon; None: the production one.
    # The demo's agents add their lockstep and records this way (sova.demo).
    make_daemon: Callable[..., Any] | None = None


def libvirt_options(settings: AgentSettings) -> dict[str, Any]:
    """``LibvirtDriverConfig`` keywords from the agent's settings: every ``[libvirt]`` key
    the operator set, over ``$SOVA_LIBVIRT_DRIVER``'s file (read by the driver), and the
    migration deadline from ``controller.migration_timeout``, so that the driver aborts a
    migration when the executor stops waiting for it, not at a second, hidden deadline."""
    return {
        "migration_timeout_s": settings.controller.migration_timeout,
        **settings.libvirt.driver_options(),
    }


def check_hotplug_budget(
    config: Any, op_timeout_s: float, close: Callable[[], None] = lambda: None
) -> None:
    """The driver's worst-case plug (its settings as resolved: [libvirt] over
    ``$SOVA_LIBVIRT_DRIVER`` over its defaults) must end before the executor stops waiting
    for it, or the driver keeps retrying a plug nobody waits for, holding the VF."""
    budget = config.hotplug_budget_s()
    if budget > op_timeout_s:
        close()
        raise ConfigError(
            f"libvirt.hotplug_timeout_s = {config.hotplug_timeout_s:g}s x hotplug_attempts = "
            f"{config.hotplug_attempts} (+ back-off retry_backoff_s = {config.retry_backoff_s:g}s)"
            f" = {budget:g}s exceeds controller.op_timeout = {op_timeout_s:g}s; "
            "lower them or raise op_timeout"
        )


def libvirt_wiring(settings: AgentSettings, **_: Any) -> Wiring:
    """``libvirt``: a real host; libvirt is imported only when chosen."""
    c = settings.controller
    try:
        from sova.driver.libvirt_driver import LibvirtDriver
    except ImportError as exc:  # pragma: no cover - depends on the host
        from sova.install import install_hint

        raise ConfigError(
            f"driver: 'libvirt' needs libvirt-python ({exc}); {install_hint('agent')}"
        ) from None
    try:
        drv = LibvirtDriver.open(
            settings.connect or "qemu:///system",
            read_only=settings.dry_run,
            **libvirt_options(settings),
        )
    except ValueError as exc:  # a strategy the driver refuses, a bad driver file
        raise ConfigError(f"libvirt: {exc}") from None
    check_hotplug_budget(drv.config, c.op_timeout, drv.close)
    return Wiring(drv, wall_ticker(drv, settings))


def mock_wiring(settings: AgentSettings, **_: Any) -> Wiring:
    """``mock``: a static toy host (smoke tests)."""
    from sova.driver.base import MockDriver

    drv = MockDriver(_ToyHost(settings.host or "mock-host"))
    return Wiring(drv, wall_ticker(drv, settings))


def wall_ticker(drv: Driver, settings: AgentSettings) -> Callable[[threading.Event], Ticker]:
    """The wall clock, for a driver on a real (or toy) host."""
    c = settings.controller
    bw = c.bandwidth_period if c.bandwidth_policy != "none" else None
    return lambda stop: WallTicker(drv, c.period, bw, settings.poll_interval_s, stop)


def build(
    settings: AgentSettings, *, speed: float | None = None, policy: str | None = None
) -> Wiring:
    """The driver and clock for ``settings.driver``, from the drivers' registry."""
    try:
        factory = DRIVERS[DRIVERS.check(settings.driver)]
    except ValueError as exc:
        raise ConfigError(f"driver: {exc}") from None
    wiring = factory(settings, speed=speed, policy=policy)
    if not isinstance(wiring, Wiring):
        raise ConfigError(
            f"driver = {settings.driver!r}: its factory returned {type(wiring).__name__}, "
            "not a Wiring"
        )
    return wiring
