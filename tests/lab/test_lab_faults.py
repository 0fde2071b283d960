"""Faults on real QEMU, each ending bounded, reported, and with the guest still reachable.

Runs after test_lab_driver.py (g2 lives on HV2 by then) and before the crash test. A paused
guest's agent call fails after the agent's 5 s command timeout; the destination daemon is
killed 3 s into a migration capped at 8 MiB/s (~40 s for the guest's memory).
"""

from __future__ import annotations

import logging
import os
import signal
import time

from .conftest import guest_sh, wait_op
from .test_lab_driver import BOND, Pinger, dom_of, open_driver, perm_macs


def test_silent_guest_agent_degrades_to_black_box_counters_with_a_log_line(lab, caplog):
    drv = open_driver(lab, sampling="guest-agent")
    dom = dom_of(drv, "g1")
    caplog.set_level(logging.INFO, logger="sova.driver.libvirt")
    try:
        before = drv.sample().vms["g1"]
        dom.suspend()
        try:
            during = drv.sample().vms["g1"]  # no crash, counters still there (host side)
        finally:
            dom.resume()
        assert during.rx_bytes > 0 and during.cpu_time_ns >= before.cpu_time_ns
        warn = [r for r in caplog.records if "guest agent of g1 not answering" in r.message]
        assert len(warn) == 1 and warn[0].levelno == logging.WARNING
        assert "black-box" in warn[0].message
        time.sleep(1)
        drv.sample()
        assert any("guest agent of g1 answers again" in r.message for r in caplog.records)
    finally:
        drv.close()


def test_destination_daemon_killed_mid_migration_guest_stays_and_gets_its_fast_path(lab):
    """The guest keeps running on HV1 on its backup, the op fails saying so, and a fast NIC
    can be plugged again at once."""
    from sova.lab.daemons import daemon_pid
    from sova.model import AttachVF, Migrate

    # 8 MiB/s: a 320 MiB guest needs ~40 s, time enough to kill the destination mid-way.
    drv = open_driver(lab, migration_bandwidth_bps=8 * 8 * 1024 * 1024, migration_timeout_s=120)
    dom = dom_of(drv, "g1")
    ping = Pinger(lab, lab.guest_ip(1))
    try:
        st = wait_op(drv, drv.submit(AttachVF("g1")))
        assert st.state.value == "succeeded", st
        op = drv.submit(Migrate("g1", "HV2"))
        deadline = time.monotonic() + 90
        while "migrating" not in drv.poll(op).detail:
            assert time.monotonic() < deadline, drv.poll(op)
            time.sleep(0.2)
        time.sleep(3)
        pid = daemon_pid(lab, "HV2")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the lab's own daemon, by the pid it recorded
        st = wait_op(drv, op, 180)
        assert st.state.value == "failed", st
        assert "VM stays on this host on virtio" in st.detail
        assert dom.isActive()  # still running on HV1
        macs = perm_macs(dom)
        assert macs[guest_sh(dom, BOND).strip()] == lab.guest_mac(1)  # on its backup
        st = wait_op(drv, drv.submit(AttachVF("g1")))
        assert st.state.value == "succeeded", st  # the fast path is given back
    finally:
        gap, n = ping.stop()
        drv.close()
        from sova.lab.daemons import ensure_daemon

        ensure_daemon(lab, "HV2", 1)  # HV2 again if it was killed, for the tests after this one
    assert n > 20 and gap < 2.0, (gap, n)
