"""`sova testbed down` after a killed run leaves no namespace, link, qdisc or process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from sova.testbed.topology import list_namespaces, netns_inodes, pids_in

SCENARIO = {
    "name": "killme",
    "duration": "60s",
    "link": {"capacity": "1Gbit", "vf_pool": 1},
    "vms": [{"name": "a", "vf": True, "sla": {"min": "200Mbit"}}, {"name": "b"}],
    "traffic": [{"vm": "a", "streams": 2}, {"vm": "b", "rate": "50Mbit"}],
    "compare": {"axis": "bandwidth", "policies": ["sova"]},
    "probes": {"ping_interval": "100ms"},
}


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "sova.cli_testbed", *args]


def root_state() -> tuple[str, str]:
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, timeout=10).stdout
    qdiscs = subprocess.run(["tc", "qdisc"], capture_output=True, text=True, timeout=10).stdout
    return "\n".join(sorted(links.splitlines())), "\n".join(sorted(qdiscs.splitlines()))


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def our_processes(prefix: str) -> list[str]:
    """Command lines anywhere on the machine that belong to a testbed with ``prefix``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if f"{prefix}rl0" in cmd or f"{prefix}vm-" in cmd or f"{prefix}sink" in cmd:
            found.append(cmd)
    return found


def start_run(
    tmp_path: Path, prefix: str
) -> tuple[subprocess.Popen[bytes], dict[str, tuple[int, int]]]:
    path = tmp_path / "killme.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    proc = subprocess.Popen(
        cli("run", str(path), "--prefix", prefix, "--out", str(tmp_path / "out")),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        inodes = netns_inodes(prefix)
        if len(inodes) == 4 and any(
            "iperf3 -c" in cmdline(pid) for pid in pids_in(set(inodes.values()))
        ):
            time.sleep(1.0)  # traffic, pings, relay and agent all busy
            return proc, netns_inodes(prefix)
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("the run never got its traffic going")


def test_down_after_a_killed_run_leaves_nothing_behind(prefix: str, tmp_path: Path) -> None:
    before = root_state()
    proc, inodes = start_run(tmp_path, prefix)
    os.killpg(proc.pid, signal.SIGKILL)  # no chance to clean up
    proc.wait(timeout=10)
    assert list_namespaces(prefix), "a killed run leaves its namespaces (that is the point)"
    assert pids_in(set(inodes.values())), "... and its processes"

    down = subprocess.run(
        cli("down", "--prefix", prefix), capture_output=True, text=True, timeout=60
    )
    assert down.returncode == 0, down.stderr
    assert "removed 4 namespace(s)" in down.stdout

    assert list_namespaces(prefix) == []
    assert pids_in(set(inodes.values())) == [], "a process still lives in a removed namespace"
    assert our_processes(prefix) == []
    assert root_state() == before, "links or qdiscs of the root namespace changed"
    # And down is idempotent.
    again = subprocess.run(
        cli("down", "--prefix", prefix), capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0 and "removed 0 namespace(s)" in again.stdout


def test_a_terminated_run_cleans_up_by_itself(prefix: str, tmp_path: Path) -> None:
    proc, inodes = start_run(tmp_path, prefix)
    proc.send_signal(signal.SIGTERM)  # what `kill` and CI timeouts send
    assert proc.wait(timeout=30) == 130
    assert list_namespaces(prefix) == []
    assert pids_in(set(inodes.values())) == []
    assert our_processes(prefix) == []
    assert not (tmp_path / "out" / "summary.json").exists(), "nothing half-written"
