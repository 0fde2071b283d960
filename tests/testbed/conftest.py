"""Fixtures for the namespace testbed: skip only where the kernel or the tools cannot do it.

The tests build real namespaces, qdiscs and TCP flows, so they need root, iproute2,
iperf3, ping, and a kernel with network namespaces, veth, IFB, bridges, TAP, HTB, the
ingress qdisc and u32 + mirred. Each missing piece is a skip that names it; anything else
that goes wrong is a failure. They use their own prefix (``svt-``) so that they never
touch a testbed an operator left up with the default one.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios" / "testbed"
PREFIX = "svt-"


def _ok(*argv: str) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=15, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def unavailable() -> str | None:
    """Why the testbed cannot run on this machine, or None."""
    if os.geteuid() != 0:
        return "needs root and network namespaces"
    for tool, pkg in (
        ("ip", "iproute2"),
        ("tc", "iproute2"),
        ("iperf3", "iperf3"),
        ("ping", "iputils-ping"),
    ):
        if shutil.which(tool) is None:
            return f"needs {tool} (apt-get install {pkg}; scripts/ci-testbed.sh does it)"
    if not os.path.exists("/dev/net/tun"):
        return "needs /dev/net/tun for the virtio relay"
    ns = f"{PREFIX}probe"
    _ok("ip", "netns", "del", ns)
    if not _ok("ip", "netns", "add", ns):
        return "needs network namespaces (ip netns add failed)"
    try:
        steps = [
            (("ip", "-n", ns, "link", "add", "p0", "type", "veth", "peer", "name", "p1"), "veth"),
            (("ip", "-n", ns, "link", "add", "q0", "type", "ifb"), "the ifb driver"),
            (("ip", "-n", ns, "link", "add", "b0", "type", "bridge"), "the bridge driver"),
            (("ip", "-n", ns, "link", "set", "p0", "up"), "veth"),
            (("tc", "-n", ns, "qdisc", "add", "dev", "p0", "root", "handle", "1:", "htb"), "HTB"),
            (
                ("tc", "-n", ns, "qdisc", "add", "dev", "p0", "handle", "ffff:", "ingress"),
                "the ingress qdisc",
            ),
            (
                (
                    "tc",
                    "-n",
                    ns,
                    "filter",
                    "add",
                    "dev",
                    "p0",
                    "parent",
                    "ffff:",
                    "protocol",
                    "all",
                    "u32",
                    "match",
                    "u32",
                    "0",
                    "0",
                    "action",
                    "mirred",
                    "egress",
                    "redirect",
                    "dev",
                    "q0",
                ),
                "u32 + mirred",
            ),
        ]
        for argv, what in steps:
            if not _ok(*argv):
                return f"needs {what} in the kernel"
    finally:
        _ok("ip", "netns", "del", ns)
    return None


@pytest.fixture
def testbed_ok() -> None:
    why = unavailable()
    if why is not None:
        pytest.skip(f"testbed: {why}")


@pytest.fixture(scope="session")
def testbed_session_lock() -> Iterator[None]:
    """One pytest session's testbed tests at a time on this machine.

    Every test here builds and tears down namespaces named ``svt-*``; two sessions at
    once (a CI job and a developer, or two CI jobs) would tear down each other's. The
    second session waits here instead (up to 20 minutes), and says so.
    """
    import fcntl
    import time

    from sova.testbed.topology import STATE_DIR

    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with (STATE_DIR / "tests.lock").open("w") as fh:
        deadline = time.monotonic() + 1200
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail("another session's testbed tests held the machine for 20 min")
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# Niceness the testbed runs at (the test process and every iperf3, relay and tc it starts).
# Its figures measure the mechanisms, not how the kernel shares 2 cores with whatever else
# the machine runs: measured with a busy-loop on one core and other sessions' tests on the
# other (load average 14-18), the runner's loop fell seconds behind at niceness 0 and its
# 1-second intervals no longer described the traffic (docs/testbed.md).
NICENESS = -10


@pytest.fixture
def prefix(testbed_ok: None, testbed_session_lock: None) -> Iterator[str]:
    from sova.testbed.topology import teardown

    before = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, NICENESS)  # root: the tests need it anyway
    teardown(PREFIX)
    try:
        yield PREFIX
    finally:
        teardown(PREFIX)
        os.setpriority(os.PRIO_PROCESS, 0, before)
