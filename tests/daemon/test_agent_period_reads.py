"""One read of the host per agent phase (issue 19): on libvirt each ``inventory()`` lists
every domain and fetches its XML, so the agent daemon must take one snapshot per phase
and let the step, the report to the manager and the manager's directive share it."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest

from sova.agent.schedule import BANDWIDTH, POLL, STEP
from sova.manager.daemons.agent.daemon import AgentDaemon, ManagerClient
from sova.manager.daemons.config import AgentSettings
from sova.model import Action, HostSample, Inventory

from .fakes import FakeHost, FakeManager, FakeVM

NODE_XML = Path(__file__).resolve().parents[1] / "libvirt_driver" / "data" / "node.xml"


class Counting:
    """Any driver, with every call counted by method (the real driver answers)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: collections.Counter[str] = collections.Counter()

    def now(self) -> float:
        self.calls["now"] += 1
        return float(self.inner.now())

    def capabilities(self) -> Any:
        self.calls["capabilities"] += 1
        return self.inner.capabilities()

    def inventory(self) -> Inventory:
        self.calls["inventory"] += 1
        inv: Inventory = self.inner.inventory()
        return inv

    def sample(self) -> HostSample:
        self.calls["sample"] += 1
        s: HostSample = self.inner.sample()
        return s

    def submit(self, action: Action) -> str:
        self.calls["submit"] += 1
        return str(self.inner.submit(action))

    def poll(self, op_id: str) -> Any:
        self.calls["poll"] += 1
        return self.inner.poll(op_id)


def _settings(host: str) -> AgentSettings:
    return AgentSettings.model_validate(
        {
            "driver": "mock",
            "host": host,
            "report_retries": 0,
            "dry_run": True,  # the test driver's guests are not to be changed here
            "controller": {
                "period": 10,
                "vf_policy": "sova",
                "bandwidth_policy": "sova",
                "sensing": {"window": 3},
            },
        }
    )


def _phases(drv: Counting, host: str, vm: str, advance: Any) -> list[tuple[int, int]]:
    """Run the daemon's phases (with a manager sending a migration directive for ``vm``)
    and return (phase, inventory calls during it) for each."""
    mgr = FakeManager()
    client = ManagerClient("http://manager", host, "tok", retries=0, transport=mgr.transport())
    d = AgentDaemon(_settings(host), drv, client=client)
    d.reconcile()
    seen = []
    for k in range(1, 8):
        if k == 4:
            mgr.directive = {"i": 1, "f": True, "t": "elsewhere", "v": vm}
        for phase in (POLL, BANDWIDTH, STEP):
            advance()
            before = drv.calls["inventory"]
            d.do_phase(phase)
            seen.append((phase, drv.calls["inventory"] - before))
    assert len(mgr.reports) >= 2, "the report (and so the directive) path was not exercised"
    assert mgr.reports[-1]["d"] == 1  # the directive was applied and acknowledged
    return seen


def test_a_libvirt_agent_period_reads_the_host_once_per_phase() -> None:
    libvirt = pytest.importorskip(
        "libvirt", reason="libvirt-python not installed (scripts/ci-setup-libvirt.sh)"
    )
    from sova.driver.libvirt_driver import LibvirtDriver, LibvirtDriverConfig

    libvirt.registerErrorHandler(lambda _c, _e: None, None)
    real = LibvirtDriver(
        LibvirtDriverConfig(uri=f"test://{NODE_XML}", host_name="hv1", sysfs_root="/nonexistent")
    )
    try:
        drv = Counting(real)
        seen = _phases(drv, "hv1", "db1", lambda: None)
    finally:
        real.close()
    steps = [n for phase, n in seen if phase == STEP]
    assert steps == [1] * len(steps), seen
    assert all(n <= 1 for _, n in seen), seen


def test_a_period_reads_the_host_once_per_phase_on_any_driver() -> None:
    """The same on a driver that always works (runs where libvirt-python is missing)."""
    host = FakeHost()
    host.vms = {"vm-a": FakeVM("vm-a", 2e9), "vm-b": FakeVM("vm-b", 2e8)}
    drv = Counting(host.driver())
    seen = _phases(drv, "h1", "vm-a", lambda: host.advance(10.0 / 3))
    steps = [n for phase, n in seen if phase == STEP]
    assert steps == [1] * len(steps), seen
    assert all(n <= 1 for _, n in seen), seen
