"""The hypervisor lab tier: real libvirt daemons and QEMU guests (marker ``lab``).

Skips, naming what is missing, only where libvirt or QEMU cannot run (not root, no
libvirtd/QEMU/image tools, no libvirt-python). The lab is built once per session with its
own directory and name prefix, so a lab an operator left up is never touched, and it is
torn down at the end whatever happened.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEST_ROOT = Path("/var/lib/sova-lab-test")
TEST_PREFIX = "svq"
GUESTS = 2


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "lab: real libvirt + QEMU guests (the hypervisor lab tier)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.lab)


@functools.cache
def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root (libvirt daemons, bridges)"
    for tool in (
        "libvirtd",
        "qemu-system-x86_64",
        "qemu-img",
        "mmdebstrap",
        "mkfs.ext4",
        "unshare",
        "virsh",
        "tc",
        "ip",
        "iperf3",
        "ping",
    ):
        if shutil.which(tool) is None:
            return f"needs {tool} (scripts/ci-setup-lab.sh installs it)"
    try:
        import libvirt  # type: ignore[import-untyped]  # noqa: F401
        import libvirt_qemu  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        return "needs libvirt-python (scripts/ci-setup-libvirt.sh installs it)"
    return None


def settings() -> Any:
    from sova.lab.settings import LabSettings

    return LabSettings(root=TEST_ROOT, prefix=TEST_PREFIX, guests=GUESTS)


@pytest.fixture(scope="session")
def lab() -> Iterator[Any]:
    why = unavailable()
    if why:
        pytest.skip(why)
    from sova.lab import lab as lab_mod

    s = settings()
    lab_mod.down(s, say=lambda _m: None)  # leftovers of a crashed earlier session
    t0 = time.monotonic()
    try:
        st = lab_mod.up(s, ROOT, guests=GUESTS, slow_rate_bps=100e6, say=print)
        print(
            f"lab up (session): {time.monotonic() - t0:.1f} s, accel {st.accel}, "
            f"QEMU {st.qemu_version} ({st.qemu})"
        )
        yield s
    finally:
        lab_mod.down(s, say=lambda _m: None)


def guest_sh(dom: Any, script: str, timeout_s: float = 30.0) -> str:
    """Run ``script`` in the guest through the real guest agent; its stdout (exit 0 only)."""
    from sova.driver.guest_agent import GuestAgent

    return GuestAgent(exec_timeout_s=timeout_s).exec(dom, "/bin/sh", ["-c", script]).stdout


def wait_op(drv: Any, op: str, timeout_s: float = 120.0) -> Any:
    """The driver operation's final status, polled every 0.2 s until ``timeout_s`` (the
    nested tier's TCG L1s pass 300 s)."""
    deadline = time.monotonic() + timeout_s
    while True:
        st = drv.poll(op)
        if st.done:
            return st
        if time.monotonic() > deadline:
            raise AssertionError(f"{op} still pending after {timeout_s} s: {st}")
        time.sleep(0.2)


def lab_run(lab: Any, scenario: Path, out: Path, timeout_s: float = 900.0) -> Any:
    """``sova lab run SCENARIO -o OUT`` as an operator runs it, on the test's lab; its
    summary.json (the run must exit 0)."""
    env = os.environ | {"SOVA_LAB_DIR": str(lab.root), "SOVA_LAB_PREFIX": lab.prefix}
    r = subprocess.run(
        [sys.executable, "-m", "sova.cli", "lab", "run", str(scenario), "-o", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="session")
def nested_lab() -> Iterator[Any]:
    """The nested SR-IOV lab (two L1s), booted once for tests/lab/test_nested_*.py."""
    from tests.lab.nested_helpers import nested_lab_session

    yield from nested_lab_session()
