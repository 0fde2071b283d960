"""`sova lab run` killed with SIGKILL mid-run, then `sova lab down`: nothing of the lab stays.

Nothing means: no process the lab recorded (both libvirtd daemons, whose command lines name
nothing of the lab, and every QEMU), no process that still sees the lab's directories in its
mounts (a libvirtd in its private mount namespace: the leak issue 18 found on QEMU 10, where
`down` said "nothing to remove"), no link or namespace with the prefix, no directory.
Runs last (file name): it takes the session's lab down.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SCENARIO = """
name: crash
guests: 1
fast_slots: 1
net_mbit: 20
controller: {period: 3s, sensing: {window: 1}, scheduler: {io_filter: top-q, min_dwell: 0s, cost_benefit: false}}
phases:
  - {name: only, duration_s: 120, loads: {g1: net}, expect_holders: [g1]}
"""


def _lab_env(lab) -> dict[str, str]:
    return os.environ | {"SOVA_LAB_DIR": str(lab.root), "SOVA_LAB_PREFIX": lab.prefix}


def _seeing_the_lab(lab) -> dict[int, str]:
    """pid -> command of every process whose mount table names the lab's directory."""
    out: dict[int, str] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if str(lab.root) + "/" in (p / "mountinfo").read_text():
                out[int(p.name)] = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
    return out


def test_killed_run_then_down_leaves_nothing(lab, tmp_path):
    scn = tmp_path / "crash.yaml"
    scn.write_text(SCENARIO)
    env = _lab_env(lab)
    run = subprocess.Popen(
        [sys.executable, "-m", "sova.cli", "lab", "run", str(scn), "-o", str(tmp_path / "out")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert run.stdout is not None
    deadline = time.monotonic() + 180
    seen = []
    while time.monotonic() < deadline:
        line = run.stdout.readline()
        seen.append(line)
        if "vf_attach g1" in line or not line:
            break
    time.sleep(2)  # traffic and pings running, a fast NIC plugged
    os.kill(run.pid, signal.SIGKILL)
    run.wait(10)
    assert any("vf_attach g1" in s for s in seen), "".join(seen)
    # Something to clean: the peer namespace, the daemons and the QEMUs are still there.
    assert Path(f"/run/netns/{lab.peer_ns}").exists()
    from sova.lab.daemons import proc_start_time, recorded_pids

    before = {pid: (what, proc_start_time(pid)) for pid, what in recorded_pids(lab).items()}
    daemons_before = [w for w, _ in before.values() if w.endswith("libvirtd")]
    assert sorted(daemons_before) == [f"{h} libvirtd" for h in lab.hosts], before
    assert _seeing_the_lab(lab), "the daemons' mount namespaces name the lab directory"

    down = subprocess.run(
        [sys.executable, "-m", "sova.cli", "lab", "down"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert down.returncode == 0, down.stderr
    from sova.lab.daemons import lab_pids

    assert lab_pids(lab) == []
    alive = {p: w for p, (w, start) in before.items() if proc_start_time(p) == start}
    assert alive == {}, f"recorded lab processes survived `down`: {alive}"
    assert _seeing_the_lab(lab) == {}
    assert str(lab.root) not in Path("/proc/self/mounts").read_text()
    links = [p.name for p in Path("/sys/class/net").iterdir()]
    assert not [n for n in links if n.startswith(lab.prefix)]
    assert not Path(f"/run/netns/{lab.peer_ns}").exists()
    assert not lab.root.exists()
    from sova.driver.libvirt_driver.tap_shaping import orphan_ifbs

    assert orphan_ifbs() == []  # no ifb of a slot or limit whose guest is gone
    # No pings or iperf3 servers of the killed run survive anywhere.
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert lab.peer_ns not in ps
    for n in (1, 2):
        assert "ping -D -n -i 0.1 -w" not in ps or lab.guest_ip(n) not in ps
