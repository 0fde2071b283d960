"""Rate limits held on real guests: guest-side HTB through the guest agent (DAQS's place)
and host-side HTB on the virtio tap where there is no agent (never libvirt <bandwidth>).

A 20 Mbit/s limit must give 10–21 Mbit/s of iperf3 over 6 s, and lifting it must give at
least 1.5x that (the slow path's own cap is 100 Mbit/s). The upper bound is the limit
holding (HTB lets TCP reach ~95 % of the rate). The lower bound only catches a limit set
far too low: measured 15–21 Mbit/s with the machine lightly loaded, and 12.4 Mbit/s once
with a load average of ~15 on the 2 cores, when TCG starves the guest's sender.
"""

from __future__ import annotations

import json
import subprocess
import time

from .conftest import guest_sh, wait_op
from .test_lab_driver import dom_of, open_driver

LIMIT = 20e6


def sent_mbit(lab, dom, port: int) -> float:
    srv = subprocess.Popen(
        ["ip", "netns", "exec", lab.peer_ns, "iperf3", "-s", "-1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)
        out = guest_sh(dom, f"iperf3 -c {lab.peer_ip} -p {port} -t 6 -J", 60)
    finally:
        srv.wait(20)
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6


def test_guest_side_limit_through_the_guest_agent_holds(lab):
    from sova.model import DetachVF, SetGuestRateLimit

    drv = open_driver(lab)
    dom = dom_of(drv, "g1")
    try:
        wait_op(drv, drv.submit(DetachVF("g1")))
        st = wait_op(drv, drv.submit(SetGuestRateLimit("g1", LIMIT)))
        assert st.state.value == "succeeded" and "guest HTB" in st.detail, st
        limited = sent_mbit(lab, dom, 5297)
        st = wait_op(drv, drv.submit(SetGuestRateLimit("g1", None)))
        assert st.state.value == "succeeded", st
        free = sent_mbit(lab, dom, 5297)
    finally:
        drv.close()
    assert 10 <= limited <= 21, limited
    assert free > 1.5 * limited, (free, limited)


def test_host_side_limit_without_an_agent_uses_tap_htb_not_bandwidth(lab):
    from sova.driver.libvirt_driver import LibvirtDriver
    from sova.model import SetGuestRateLimit

    drv = open_driver(lab)
    drv.close()
    bare = LibvirtDriver(drv.config)  # no guest agent: the host side must do it
    dom = dom_of(bare, "g1")
    try:
        st = wait_op(bare, bare.submit(SetGuestRateLimit("g1", LIMIT)))
        assert st.state.value == "succeeded", st
        assert "HTB" in st.detail and "no <bandwidth>" in st.detail, st.detail
        limited = sent_mbit(lab, dom, 5296)
        st = wait_op(bare, bare.submit(SetGuestRateLimit("g1", None)))
        assert st.state.value == "succeeded", st
    finally:
        bare.close()
        # the lab's own slow-path cap on that tap, as `up` left it
        from sova.lab.lab import shape_backups

        shape_backups(lab, 100e6)
    assert 10 <= limited <= 21, limited
