"""The lab's wires: a slow (virtio backup) bridge, a fast bridge, and a peer namespace.

Both bridges form one L2 segment (a veth pair joins them), so a guest's bond can move its
active slave from the backup NIC on the slow bridge to a fast NIC on the fast bridge and
keep its address; the peer namespace on the slow side is what guests send to and ping.
The slow path costs something: every backup tap is shaped to the profile's virtio rate on
the host side (HTB), so a network-heavy guest on the backup path is measurably worse off
than on a fast NIC, as virtio is against SR-IOV on real hosts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from sova.lab.settings import LabSettings


def sh(*args: str, check: bool = True, timeout_s: float = 10.0) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
    return r


def links() -> list[str]:
    return [p.name for p in Path("/sys/class/net").iterdir()]


def up(s: LabSettings) -> None:
    p = s.prefix
    for br in (s.slow_bridge, s.fast_bridge):
        if br not in links():
            sh("ip", "link", "add", br, "type", "bridge", "forward_delay", "0")
        sh("ip", "link", "set", br, "up")
    if f"{p}-lnkf" not in links():
        sh("ip", "link", "add", f"{p}-lnkf", "type", "veth", "peer", "name", f"{p}-lnks")
    sh("ip", "link", "set", f"{p}-lnkf", "master", s.fast_bridge, "up")
    sh("ip", "link", "set", f"{p}-lnks", "master", s.slow_bridge, "up")
    if s.peer_ns not in sh("ip", "netns", "list").stdout.split():
        sh("ip", "netns", "add", s.peer_ns)
    if f"{p}-peer" not in links():
        sh(
            "ip",
            "link",
            "add",
            f"{p}-peer",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            s.peer_ns,
        )
    sh("ip", "link", "set", f"{p}-peer", "master", s.slow_bridge, "up")
    sh("ip", "-n", s.peer_ns, "link", "set", "lo", "up")
    sh("ip", "-n", s.peer_ns, "addr", "replace", f"{s.peer_ip}/24", "dev", "eth0")
    sh("ip", "-n", s.peer_ns, "link", "set", "eth0", "up")


def down(s: LabSettings) -> list[str]:
    """Delete every link and namespace with the lab's prefix; what was removed."""
    removed: list[str] = []
    if s.peer_ns in sh("ip", "netns", "list", check=False).stdout.split():
        # Pings and iperf3 servers of a killed `lab run`: exactly the processes in our netns.
        pids = sh("ip", "netns", "pids", s.peer_ns, check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        if pids:
            removed.append(f"peer processes {' '.join(pids)}")
        sh("ip", "netns", "del", s.peer_ns, check=False)
        removed.append(f"netns {s.peer_ns}")
    from sova.driver.libvirt_driver.tap_shaping import orphan_ifbs

    for name in orphan_ifbs():  # a host-side limit's ifb whose guest is gone
        if sh("ip", "link", "del", name, check=False).returncode == 0:
            removed.append(name)
    for name in sorted(links()):
        if name.startswith(s.prefix) and sh("ip", "link", "del", name, check=False).returncode == 0:
            removed.append(name)
    return removed
