"""The netns driver on a real testbed: every action changes the kernel, every count is real."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sova.agent.executor import Executor
from sova.driver.base import OpState, OpStatus
from sova.model import AttachVF, DetachVF, NicKind, SetGuestRateLimit, SetVFRate
from sova.testbed.netns_driver import NetnsDriver
from sova.testbed.scenario import parse_testbed_scenario
from sova.testbed.topology import SINK_IP, Topology, rtnl, teardown
from sova.testbed.traffic import SinkMeter


def scenario(vf_pool: int = 2) -> Any:
    return parse_testbed_scenario(
        {
            "name": "drv",
            "duration": "5s",
            "link": {"capacity": "1Gbit", "vf_pool": vf_pool},
            "vms": [{"name": "a", "sla": {"min": "100Mbit"}}, {"name": "b"}],
        }
    )


@pytest.fixture
def world(prefix: str) -> Iterator[tuple[Topology, Any]]:
    scn = scenario()
    topo = Topology(scn, prefix)
    topo.up()
    try:
        yield topo, scn
    finally:
        teardown(prefix)


def make_driver(topo: Topology, scn: Any, **kw: Any) -> NetnsDriver:
    kw.setdefault("hotplug_attach_s", 0.0)
    kw.setdefault("hotplug_detach_s", 0.0)
    return NetnsDriver(topo, scn.model_vms(), scn.model_host(), **kw)


def wait_done(driver: NetnsDriver, op: str, timeout: float = 15.0) -> OpStatus:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = driver.poll(op)
        if st.done:
            return st
        time.sleep(0.02)
    raise AssertionError(f"{op} not done after {timeout} s")


def host_rx(topo: Topology, dev: str) -> int:
    ipr = rtnl(topo.names.host_ns)
    try:
        for m in ipr.get_links():
            if m.get("IFLA_IFNAME") == dev:
                return int(m.get("IFLA_STATS64")["rx_bytes"])
    finally:
        ipr.close()
    raise AssertionError(f"no link {dev}")


def ping(ns: str, count: int = 5) -> bool:
    return (
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                ns,
                "ping",
                "-q",
                "-c",
                str(count),
                "-i",
                "0.05",
                "-W",
                "2",
                SINK_IP,
            ],
            capture_output=True,
            timeout=30,
            check=False,
        ).returncode
        == 0
    )


def iperf(topo: Topology, vm: str, seconds: int = 3, port: int = 5290) -> float:
    """Delivered Mbit/s at the sink for one unlimited 2-stream iperf3 run of ``vm``."""
    p = topo.vms[vm]
    meter = SinkMeter(topo)
    srv = subprocess.Popen(
        ["ip", "netns", "exec", topo.names.sink_ns, "iperf3", "-s", "-1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.3)
        cli = subprocess.Popen(
            ["ip", "netns", "exec", p.ns, "iperf3", "-c", SINK_IP, "-p", str(port), "-B", p.ip]
            + ["-t", str(seconds + 1), "-P", "2"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)
        a, t0 = meter.read()[vm], time.monotonic()
        time.sleep(seconds - 0.5)
        b, t1 = meter.read()[vm], time.monotonic()
        cli.wait(timeout=30)
        return (b - a) * 8 / (t1 - t0) / 1e6
    finally:
        srv.kill()
        srv.wait(timeout=10)
        meter.close()


def test_attach_moves_the_vms_traffic_onto_its_vf_and_detach_moves_it_back(
    world: tuple[Topology, Any],
) -> None:
    topo, scn = world
    drv = make_driver(topo, scn)
    try:
        a = topo.vms["a"]
        assert drv.inventory().vms["a"].nic is NicKind.VIRTIO
        st = wait_done(drv, drv.submit(AttachVF("a")))
        assert st.state is OpState.SUCCEEDED, st.detail
        inv = drv.inventory().vms["a"]
        assert (inv.nic, inv.vf_index) == (NicKind.VF, 0)

        vf0, tap0 = host_rx(topo, a.vf_host_if), host_rx(topo, a.tap_if)
        assert ping(a.ns)
        assert host_rx(topo, a.vf_host_if) - vf0 > 5 * 84  # the echo requests took the VF
        assert host_rx(topo, a.tap_if) - tap0 < 5 * 84

        st = wait_done(drv, drv.submit(DetachVF("a")))
        assert st.state is OpState.SUCCEEDED, st.detail
        assert drv.inventory().vms["a"].nic is NicKind.VIRTIO
        tap1 = host_rx(topo, a.tap_if)
        assert ping(a.ns)
        assert host_rx(topo, a.tap_if) - tap1 > 5 * 84  # and now the virtio path
    finally:
        drv.close()


def test_submit_returns_at_once_and_the_hotplug_completes_later(
    world: tuple[Topology, Any],
) -> None:
    topo, scn = world
    drv = make_driver(topo, scn, hotplug_attach_s=1.0)
    try:
        t0 = time.monotonic()
        op = drv.submit(AttachVF("b"))
        assert time.monotonic() - t0 < 0.1
        assert drv.poll(op).state is OpState.PENDING
        st = wait_done(drv, op)
        assert st.state is OpState.SUCCEEDED
        assert time.monotonic() - t0 >= 1.0
    finally:
        drv.close()


def test_a_vf_is_never_pulled_while_the_virtio_backup_is_dead(
    world: tuple[Topology, Any],
) -> None:
    topo, scn = world
    drv = make_driver(topo, scn)
    try:
        assert wait_done(drv, drv.submit(AttachVF("a"))).state is OpState.SUCCEEDED
        for pid in topo.relay_pids():
            subprocess.run(["kill", "-9", str(pid)], timeout=5, check=True)
        time.sleep(0.6)  # the driver caches the backend's state for 0.5 s
        inv = drv.inventory()
        assert not inv.vms["a"].backup_link_up
        # The agent's executor does not even ask ...
        out = Executor(drv).apply(DetachVF("a"), inv)
        assert out is not None and out.result == "blocked"
        # ... and the driver refuses on its own too.
        st = wait_done(drv, drv.submit(DetachVF("a")))
        assert st.state is OpState.FAILED
        assert "virtio backup path does not answer" in st.detail
        assert drv.inventory().vms["a"].nic is NicKind.VF
        assert ping(topo.vms["a"].ns)  # still connected, over its VF
    finally:
        drv.close()


def test_the_vf_rate_is_an_htb_ceiling_that_real_traffic_obeys(
    world: tuple[Topology, Any],
) -> None:
    topo, scn = world
    drv = make_driver(topo, scn)
    try:
        st = wait_done(drv, drv.submit(AttachVF("a", max_bps=200e6)))
        assert st.state is OpState.SUCCEEDED
        got = iperf(topo, "a")
        assert 170 <= got <= 210, got
        assert wait_done(drv, drv.submit(SetVFRate("a", 400e6))).state is OpState.SUCCEEDED
        got = iperf(topo, "a", port=5291)
        assert 350 <= got <= 415, got
        assert drv.inventory().vms["a"].vf_max_bps == pytest.approx(400e6)
    finally:
        drv.close()


def test_host_side_limits_cap_both_paths(world: tuple[Topology, Any]) -> None:
    topo, scn = world
    drv = make_driver(topo, scn, limit_side="host")
    try:
        assert wait_done(drv, drv.submit(SetGuestRateLimit("b", 100e6))).state is OpState.SUCCEEDED
        got = iperf(topo, "b")  # b is on virtio
        assert got <= 105, got
        assert drv.inventory().vms["b"].guest_limit_bps == pytest.approx(100e6)
    finally:
        drv.close()


def test_guest_side_limits_are_htb_inside_the_vm(world: tuple[Topology, Any]) -> None:
    topo, scn = world
    drv = make_driver(topo, scn, limit_side="guest")
    ns = topo.vms["a"].ns

    def qdiscs() -> str:
        return subprocess.run(
            ["tc", "-n", ns, "class", "show", "dev", "eth0"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout

    try:
        for rate in (150e6, 120e6):  # built once, then changed in place
            st = wait_done(drv, drv.submit(SetGuestRateLimit("a", rate)))
            assert st.state is OpState.SUCCEEDED, st.detail
            assert f"rate {int(rate / 1e6)}Mbit" in qdiscs()
        got = iperf(topo, "a")
        assert got <= 126, got
        assert wait_done(drv, drv.submit(SetGuestRateLimit("a", None))).state is OpState.SUCCEEDED
        assert "htb" not in qdiscs()
    finally:
        drv.close()


def test_the_pool_and_the_nics_capabilities_are_enforced(prefix: str) -> None:
    scn = scenario(vf_pool=1)
    topo = Topology(scn, prefix)
    topo.up()
    drv = make_driver(topo, scn)
    try:
        assert wait_done(drv, drv.submit(AttachVF("a"))).state is OpState.SUCCEEDED
        st = wait_done(drv, drv.submit(AttachVF("b")))
        assert st.state is OpState.FAILED and "no free VF" in st.detail
        st = wait_done(drv, drv.submit(SetVFRate("a", 5e8, min_bps=1e8)))
        assert st.state is OpState.FAILED and "min_tx_rate" in st.detail
        assert drv.capabilities().vf_pool == 1
    finally:
        drv.close()
        teardown(prefix)


def test_counters_are_cumulative_and_count_real_traffic(world: tuple[Topology, Any]) -> None:
    import threading

    topo, scn = world
    drv = make_driver(topo, scn)
    try:
        s0 = drv.sample()
        t = threading.Thread(target=iperf, args=(topo, "b", 2))
        t.start()
        time.sleep(2.0)
        mid = drv.sample()  # while iperf3 runs in the VM
        t.join(timeout=30)
        s1 = drv.sample()  # after it exited
        sent = (s1.vms["b"].tx_bytes - s0.vms["b"].tx_bytes) * 8 / 1e6
        assert sent > 100  # Mbit over ~3 s through the virtio relay
        assert mid.vms["b"].cpu_time_ns > s0.vms["b"].cpu_time_ns  # iperf3's CPU is b's
        assert s1.vms["b"].cpu_time_ns >= mid.vms["b"].cpu_time_ns  # and stays counted
        assert s1.vms["a"].tx_bytes - s0.vms["a"].tx_bytes < 1e5  # a stayed quiet
        assert s1.totals.nic_tx_bytes > s0.totals.nic_tx_bytes
        assert s1.time_s > mid.time_s > s0.time_s
    finally:
        drv.close()
