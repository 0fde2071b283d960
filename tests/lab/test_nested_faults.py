"""Faults on the real SR-IOV stack (nested lab, L1 1 of the shared lab): a guest that does
not answer the unplug, and the agent inside L1 killed in the middle of a plug.

Opt-in (``SOVA_LAB_SRIOV=1``), like the other nested modules; figures in docs/lab.md#nested.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import pytest
from tests.lab.nested_helpers import (
    ROOT,
    StreamSink,
    guest_sh,
    module_lab,
    wait_agent_started,
    wait_guest_agent,
)

from .conftest import wait_op


@pytest.fixture(scope="module")
def nested(nested_lab: Any) -> Iterator[Any]:
    """The shared lab (tests/lab/conftest.py), clean before and after."""
    with module_lab(nested_lab) as ns:
        yield ns


@pytest.fixture(scope="module")
def prebooted(nested: Any) -> Iterator[dict[str, Any]]:
    """g1 of the agent-killed test, defined and started at the module's start: its boot
    (minutes under load) overlaps the paused-guest test's instead of following it. Idle
    until the agent-killed test starts its stream."""
    import libvirt

    from sova.lab.nested import l2_guest_xml

    conn = libvirt.open(nested.l1_uri(1))
    caps = conn.getCapabilities()
    dtype = "kvm" if "type='kvm'" in caps or 'type="kvm"' in caps else "qemu"
    doms = {}
    try:
        for k in (1,):
            doms[f"g{k}"] = conn.defineXML(l2_guest_xml(nested, 1, k, dtype))
            doms[f"g{k}"].create()
        yield doms
    finally:
        conn.close()


def _dtype(conn: Any) -> str:
    caps = conn.getCapabilities()
    return "kvm" if "type='kvm'" in caps or 'type="kvm"' in caps else "qemu"


def _hostdevs(dom: Any) -> int:
    live = ET.fromstring(dom.XMLDesc(0))
    return len([i for i in live.iter("interface") if i.get("type") == "hostdev"])


def test_a_guest_that_ignores_the_unplug_keeps_its_vf_and_a_working_path(nested, prebooted):
    """The production driver (from this machine, on L1 1's libvirt) plugs a VF into a
    teamed guest, then the guest's vCPUs are paused (``virsh suspend``: it cannot answer
    the PCIe unplug request) and the driver takes the VF back with one 10 s attempt. The
    detach must time out and say the VF stays attached; the live XML and the driver's
    inventory must agree on it; once the guest runs again, it answers pings within 30 s
    through whichever member it then has, and the driver's view still matches the live
    XML (the guest may finish the pending unplug late: the VF is then free).

    Measured (docs/lab.md#nested): the detach FAILED after 12.5 s (runs 3 and 7); after the
    resume 292-293 replies of 300 in the judged window, 0 lost, largest gap 0.05 s (runs 4
    and 7, load average 4-20), against > 150 replies and gaps <= 5 s asserted."""
    import libvirt  # type: ignore[import-untyped]

    from sova.driver.base import OpState
    from sova.driver.guest_agent import GuestAgent
    from sova.driver.libvirt_driver import LibvirtDriver, LibvirtDriverConfig, ensure_event_loop
    from sova.lab.loads import ping_gaps
    from sova.lab.nested import l2_guest_xml
    from sova.model import AttachVF, DetachVF

    ensure_event_loop()
    ns = nested
    uri = ns.l1_uri(1)
    conn = libvirt.open(uri)
    dom = conn.defineXML(l2_guest_xml(ns, 1, 3, _dtype(conn)))
    dom.create()
    ip = ns.l2_ip(1, 3)

    def driver(timeout_s: float, attempts: int) -> Any:
        return LibvirtDriver(
            LibvirtDriverConfig(
                uri=uri,
                host_name="l1-1",
                sysfs_root="/nonexistent",  # the PF is L1's: its VFs come from libvirt
                hotplug_timeout_s=timeout_s,
                hotplug_attempts=attempts,
                retry_backoff_s=2.0,
            )
        )

    drv = driver(60.0, 3)
    ping: subprocess.Popen[bytes] | None = None
    log = ns.root / "ping-g3.log"
    try:
        wait_guest_agent(GuestAgent(command_timeout_s=10), dom)
        st = wait_op(drv, drv.submit(AttachVF("g3")), 300)
        assert st.state is OpState.SUCCEEDED, st
        assert _hostdevs(dom) == 1
        # right after the plug the first ping got an ICMP error at once (ARP unanswered
        # while net_failover switched; run 2), not a 60 s wait: ask again until 60 s
        deadline = time.monotonic() + 60
        while True:
            r = subprocess.run(["ping", "-c", "1", "-W", "5", ip], capture_output=True)
            if r.returncode == 0:
                break
            assert time.monotonic() < deadline, r.stdout.decode()[-200:]
            time.sleep(2)
        ping = subprocess.Popen(["ping", "-D", "-i", "0.05", ip], stdout=log.open("w"))
        drv.close()
        drv = driver(10.0, 1)
        dom.suspend()
        t0 = time.monotonic()
        st = wait_op(drv, drv.submit(DetachVF("g3")), 300)
        took = time.monotonic() - t0
        print(f"detach of a paused guest's VF: {st.state.name} after {took:.1f} s: {st.detail}")
        assert st.state is OpState.FAILED, st
        assert "VF still attached" in st.detail, st.detail
        assert _hostdevs(dom) == 1, "the VF left a paused guest"
        assert drv.inventory().vms["g3"].vf_index is not None
        dom.resume()
        t_resume = time.time()
        deadline = time.monotonic() + 90
        while True:  # the guest may finish the pending unplug: the view follows the XML
            time.sleep(5)
            held = _hostdevs(dom)
            seen = drv.inventory().vms["g3"].vf_index
            if (seen is not None) == (held == 1) or time.monotonic() > deadline:
                break
        assert (seen is not None) == (held == 1), (held, seen)
        # a fixed window, 30-45 s after the resume: 300 pings at 20/s (the window used to
        # end when the loop above broke, 5 s or more after the resume, so a guest answering
        # every ping showed 96 replies where the test wanted 100: run of this session)
        time.sleep(max(0.0, t_resume + 45 - time.time()))
        gaps = ping_gaps(log, t_resume + 30, t_resume + 45, 0.05)
        print(f"after resume: VF {'kept' if held else 'unplugged late'}; ping {gaps}")
        assert gaps["replies"] > 150 and gaps["max_gap_s"] <= 5.0, gaps
        if not held:  # the late unplug gave the VF back to the pool
            assert drv.pf_view().vfs, "no VF listed"
            assert not [v for v in drv.inventory().vms.values() if v.vf_index is not None]
    finally:
        if ping is not None:
            ping.terminate()
        drv.close()
        with contextlib.suppress(libvirt.libvirtError):
            dom.destroy()
        with contextlib.suppress(libvirt.libvirtError):
            dom.undefine()
        conn.close()


def test_the_agent_killed_mid_plug_is_reconciled_from_the_live_xml(nested, prebooted):
    """`sova agent` in L1 1 (a pool of one VF) starts plugging the VF into a sending guest
    and is killed (SIGKILL) as soon as the hostdev shows in the live XML, before it could
    record the outcome. Started again with the same file, it must adopt the VF holder from
    the live XML (its ``reconciled`` line names the guest), keep that one holder (the pool
    has one VF: a second plug would be refused) and report no failed action.

    Measured (docs/lab.md#nested, runs 2 and 7): killed 1.5 s after the plug showed; the
    agent's restart (unpack and import under TCG) 68 s in run 7, against 600 s allowed."""
    import libvirt

    from sova.driver.guest_agent import GuestAgent
    from sova.lab.nested import agent_toml, start_agent, stop_agent

    ns = nested
    conn = libvirt.open(ns.l1_uri(1))
    host = f"{ns.subnet}.1"
    ga = GuestAgent(command_timeout_s=10, exec_timeout_s=30.0)
    controller = {
        "period": "5s",
        "sensing": {"window": 2},
        "scheduler": {"io_filter": "top-q", "top_q": 8, "min_dwell": "0s", "cost_benefit": False},
        "op_timeout": "90s",
    }
    toml = agent_toml(ns, 1, controller, vf_pool=1)
    sink = StreamSink(host, 5211)  # the guest's bulk stream lands here
    try:
        # the agent first, its guest idle (its start took minutes beside a busy guest)
        log = start_agent(ns, 1, toml, ROOT)
        t0 = time.monotonic()
        wait_agent_started(log)
        print(f"agent started in {time.monotonic() - t0:.0f} s")
        dom = conn.lookupByName(prebooted["g1"].name())
        print(f"guest agent up in {wait_guest_agent(ga, dom):.0f} s")
        guest_sh(ga, dom, f"nc {host} 5211 </dev/zero >/dev/null 2>&1 &")
        deadline = time.monotonic() + 300
        while _hostdevs(dom) == 0:
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-1500:]
            time.sleep(0.2)
        killed = stop_agent(ns, 1, "KILL")
        before = log.read_text(errors="replace")
        print(f"agent killed {killed:.1f} s after the VF showed; log tail: {before[-800:]}")
        assert "stopped by SIGKILL" in before
        log = start_agent(ns, 1, toml, ROOT)
        print(f"agent restarted in {wait_agent_started(log):.0f} s")
        deadline = time.monotonic() + 120
        text = ""
        while not re.search(r"reconciled l1-1: .*VF holders \[g1\]", text):
            assert time.monotonic() < deadline, text[-1500:]
            time.sleep(2)
            text = log.read_text(errors="replace")
        time.sleep(40)  # several periods with the load unchanged
        text = log.read_text(errors="replace")
        print(f"restarted agent log tail: {text[-1200:]}")
        assert _hostdevs(dom) == 1, "the holder lost its VF after the restart"
        bad = [ln for ln in text.splitlines() if " failed" in ln or "refused" in ln]
        assert not bad, bad
    finally:
        sink.close()
        with contextlib.suppress(Exception):
            stop_agent(ns, 1)
        conn.close()
