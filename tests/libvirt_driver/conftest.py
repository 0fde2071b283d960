"""Fixtures for the libvirt driver: libvirt's test driver, a fake sysfs, fast timeouts."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"
NODE_XML = DATA / "node.xml"


@pytest.fixture
def lv() -> Any:
    lv = pytest.importorskip(
        "libvirt", reason="libvirt-python not installed (scripts/ci-setup-libvirt.sh installs it)"
    )
    lv.registerErrorHandler(lambda _c, _e: None, None)
    return lv


@pytest.fixture
def node_uri(lv: Any) -> str:
    return f"test://{NODE_XML}"


@pytest.fixture
def fake_sysfs(tmp_path: Path) -> Path:
    """sysfs of enp3s0f0 with VF indices deliberately NOT in libvirt's node-device order.

    libvirt lists 10.0, 10.2, 10.4, 10.6; the kernel's virtfn1 is 10.4. The driver must take
    VF numbers from sysfs, because netlink's ``vf N`` means the kernel's numbering.
    """
    root = tmp_path / "sys"
    pci = root / "devices" / "pci0000:00" / "0000:00:02.0"
    pf = pci / "0000:03:00.0"
    pf.mkdir(parents=True)
    for fn in ("0", "2", "4", "6"):
        (pci / f"0000:03:10.{fn}").mkdir()
    (pf / "sriov_numvfs").write_text("4\n")
    (pf / "sriov_totalvfs").write_text("63\n")
    for idx, fn in enumerate(("0", "4", "2", "6")):
        os.symlink(f"../0000:03:10.{fn}", pf / f"virtfn{idx}")
    net = root / "class" / "net" / "enp3s0f0"
    net.mkdir(parents=True)
    os.symlink(os.path.relpath(pf, net), net / "device")
    (net / "speed").write_text("25000\n")
    (net / "statistics").mkdir()
    (net / "statistics" / "rx_bytes").write_text("123456\n")
    (net / "statistics" / "tx_bytes").write_text("654321\n")
    return root


def wait_done(drv: Any, op_id: str, timeout_s: float = 10.0) -> Any:
    """Poll like the agent does, with a deadline so a hung op fails the test instead."""
    deadline = time.monotonic() + timeout_s
    while True:
        st = drv.poll(op_id)
        if st.done:
            return st
        if time.monotonic() > deadline:
            raise AssertionError(f"operation {op_id} still pending: {st}")
        time.sleep(0.01)


def eventually(pred: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


@pytest.fixture
def fast() -> dict[str, Any]:
    """Timeouts small enough for a test, large enough for a loaded 2-core CI machine."""
    return {
        "hotplug_timeout_s": 0.3,
        "hotplug_attempts": 3,
        "retry_backoff_s": 0.01,
        "migration_timeout_s": 0.5,
        "migration_poll_s": 0.05,
        "migration_abort_grace_s": 2.0,
    }


@pytest.fixture
def closing() -> Iterator[list[Any]]:
    drivers: list[Any] = []
    yield drivers
    for d in drivers:
        d.close()
