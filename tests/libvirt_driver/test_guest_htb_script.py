"""The guest-side HTB script (what the driver runs in a guest through guest-exec), run for
real in a network namespace on a dummy netdev: a limit set, changed and removed.

The bandwidth controller changes a guest's limit every period; HTB refuses ``tc qdisc
replace`` of an HTB root by itself ("Change operation not supported"), so a script that
always replaced the root failed from the second change on (found by the lab's guarantee
scenario). Needs root and iproute2 (CI runs as root); skips naming what is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest

from sova.driver.guest_agent import htb_script

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("tc") is None or shutil.which("ip") is None,
    reason="needs root and iproute2 (ip, tc) for a network namespace",
)

MAC = "52:54:00:aa:bb:01"


@pytest.fixture
def netns():
    ns = f"svt{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(
            # a veth pair (kernels without the dummy module have veth: the lab needs it)
            ["ip", "-n", ns, "link", "add", "eth0", "address", MAC, "type", "veth", "peer", "eth1"],
            check=True,
        )
        subprocess.run(["ip", "-n", ns, "link", "set", "eth0", "up"], check=True)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def _run(ns: str, rate: float | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", ns, "/bin/sh", *htb_script(MAC, rate)],
        capture_output=True,
        text=True,
        timeout=10,
    )


def _class(ns: str) -> str:
    return subprocess.run(
        ["tc", "-n", ns, "class", "show", "dev", "eth0"], capture_output=True, text=True
    ).stdout


def test_a_limit_can_be_set_changed_and_removed(netns):
    for rate in (20e6, 35e6, 12e6):
        r = _run(netns, rate)
        assert r.returncode == 0, r.stderr
        assert f"rate {int(rate / 1e6)}Mbit" in _class(netns), _class(netns)
    r = _run(netns, None)
    assert r.returncode == 0, r.stderr
    assert "htb" not in _class(netns)


def test_an_unknown_mac_is_an_error_not_a_no_op(netns):
    r = subprocess.run(
        ["ip", "netns", "exec", netns, "/bin/sh", *htb_script("52:54:00:00:00:99", 1e6)],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert r.returncode == 3 and "no netdev with MAC" in r.stderr
