"""The lab's libvirt daemons on their own, without guests: a start is only a start when the
daemon answering is the one started, and `down` finds a daemon by what the lab recorded.

Found on QEMU 10 (issue 18): a fault test's cleanup started HV2 a second time while the first
still ran; the second libvirtd exited (``Failed to acquire pid file … Resource temporarily
unavailable``), ``start_daemon`` took the first one's socket for its answer and recorded the
dead pid, and ``sova lab down`` then left the first daemon running. A few seconds; its own
directory, so it never touches the session's lab.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import ROOT, unavailable


@pytest.fixture
def lone(tmp_path: Path):
    why = unavailable()
    if why:
        pytest.skip(why)
    from sova.lab import lab as lab_mod
    from sova.lab.settings import LabSettings

    s = LabSettings(root=tmp_path / "lab", prefix="svd", hosts=("HV1",))
    try:
        yield s
    finally:
        lab_mod.down(s, say=lambda _m: None)


def test_second_start_is_refused_and_down_finds_the_daemon_whose_record_was_lost(lone):
    from sova.lab import lab as lab_mod
    from sova.lab.daemons import LabError, ensure_daemon, proc_start_time, start_daemon

    pid = start_daemon(lone, "HV1", 0)
    assert proc_start_time(pid) is not None
    with pytest.raises(LabError, match="already runs"):
        start_daemon(lone, "HV1", 0)
    assert ensure_daemon(lone, "HV1", 0) == pid  # running: not started again
    # the record of the running daemon lost (what the second start used to do to it)
    (lone.host_dir("HV1") / "daemon.pid").write_text("999999 0\n")
    with pytest.raises(LabError):
        start_daemon(lone, "HV1", 0)  # its socket answers, but not for a daemon we started
    assert proc_start_time(pid) is not None  # the first one is untouched
    removed = lab_mod.down(lone, say=lambda _m: None)
    assert proc_start_time(pid) is None, removed  # found from the ledger, not the cmdline
    assert not lone.root.exists()


def test_both_daemons_run_the_qemu_the_lab_was_asked_for(lab):
    """``$SOVA_LAB_QEMU`` / ``up --qemu``: what libvirt probed in each daemon's namespace is
    the chosen build (QEMU 10 from backports laid over the machine's 7.2, or 7.2 itself),
    not whatever ``/usr/bin`` holds outside."""
    import re
    import subprocess

    from sova.lab import lab as lab_mod
    from sova.lab.daemons import lab_qemu
    from sova.lab.qemu import resolve

    q = lab_qemu(lab)
    assert q == resolve(lab.qemu, ROOT, lab.image_cache)
    out = subprocess.run(
        q.wrap(["qemu-system-x86_64", "--version"]), capture_output=True, text=True, timeout=30
    ).stdout
    m = re.search(r"version (\d+\.\d+\.\d+)", out)
    assert m, out
    for host in lab.hosts:
        conn = lab_mod.connect(lab, host)
        try:
            assert lab_mod.hypervisor_version(conn) == m.group(1), host
        finally:
            conn.close()
    assert lab_mod.load_state(lab).qemu_version == m.group(1)
