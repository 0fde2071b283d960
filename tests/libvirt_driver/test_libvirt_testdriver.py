"""The driver against libvirt's own test driver: inventory, counters, interface parameters
and lifecycle events, with a node XML describing one SR-IOV host (tests/libvirt_driver/data)."""

from __future__ import annotations

import time
from typing import Any

import pytest

libvirt = pytest.importorskip(
    "libvirt", reason="libvirt-python not installed (scripts/ci-setup-libvirt.sh installs it)"
)

from conftest import eventually, wait_done  # noqa: E402

from sova.driver.base import Driver, OpState  # noqa: E402
from sova.driver.libvirt_driver import LibvirtDriver, LibvirtDriverConfig  # noqa: E402
from sova.driver.netlink_vf import RateProbe, VFInfo, stats_usable  # noqa: E402
from sova.model import AttachVF, NicKind, SetGuestRateLimit  # noqa: E402


def make(node_uri: str, closing: list[Any], **kw: Any) -> LibvirtDriver:
    kw.setdefault("sysfs_root", "/nonexistent")
    drv = LibvirtDriver(LibvirtDriverConfig(uri=node_uri, host_name="hv1", **kw))
    closing.append(drv)
    return drv


def test_is_a_driver(node_uri, closing):
    assert isinstance(make(node_uri, closing), Driver)


def test_inventory_pf_vfs_holders_and_readiness(node_uri, closing):
    drv = make(node_uri, closing)
    pf = drv.pf_view()
    assert pf.name == "enp3s0f0" and pf.speed_mbit == 10000 and pf.total_vfs == 63
    assert pf.vfs == {0: "0000:03:10.0", 1: "0000:03:10.2", 2: "0000:03:10.4", 3: "0000:03:10.6"}
    inv = drv.inventory()
    assert inv.host.name == "hv1" and inv.host.cores == 8
    assert inv.host.memory_bytes == 32 * 2**30
    assert inv.host.nic.capacity_bps == 10e9 and inv.host.nic.vf_pool == 4
    vms = inv.vms
    assert set(vms) == {"web1", "db1", "legacy1", "plain1", "off1"}
    assert (vms["web1"].nic, vms["web1"].vf_index) == (NicKind.VF, 0)
    assert (vms["plain1"].nic, vms["plain1"].vf_index) == (NicKind.VF, 1)
    assert vms["db1"].nic is NicKind.VIRTIO and vms["db1"].failover_ready
    assert not vms["legacy1"].failover_ready
    assert vms["off1"].running is False and vms["db1"].running is True
    assert inv.vf_holders == {"web1", "plain1"}
    # the SLA an operator declared in <metadata>
    assert vms["web1"].vm.sla.bandwidth.minimum == 100e6
    assert vms["web1"].vm.sla.bandwidth.maximum == 2e9 and vms["web1"].vm.sla.priority == 2
    reports = {r.name: r for r in drv.vm_reports()}
    assert "cannot live-migrate" in reports["plain1"].reason
    assert "teaming" in reports["legacy1"].reason


def test_sysfs_vf_numbering_wins_over_libvirt_order(node_uri, closing, fake_sysfs):
    drv = make(node_uri, closing, sysfs_root=str(fake_sysfs))
    pf = drv.pf_view()
    assert pf.vfs == {0: "0000:03:10.0", 1: "0000:03:10.4", 2: "0000:03:10.2", 3: "0000:03:10.6"}
    assert pf.speed_mbit == 25000
    inv = drv.inventory()
    assert inv.vms["plain1"].vf_index == 2  # 10.2 is the kernel's virtfn2
    totals = drv.sample().totals
    assert (totals.nic_rx_bytes, totals.nic_tx_bytes) == (123456, 654321)


def test_capabilities_without_netlink_say_why(node_uri, closing):
    caps = make(node_uri, closing).capabilities()
    assert caps.vf_total == 4
    assert not caps.nic.max_rate and not caps.nic.min_rate
    assert any("no netlink" in n for n in caps.notes)


def test_counters_are_cumulative_and_per_running_vm(node_uri, closing):
    drv = make(node_uri, closing)
    s1 = drv.sample()
    time.sleep(0.02)
    s2 = drv.sample()
    assert set(s1.vms) == {"web1", "db1", "legacy1", "plain1"}  # off1 is not running
    assert s2.time_s > s1.time_s
    for name, c1 in s1.vms.items():
        c2 = s2.vms[name]
        assert c2.cpu_time_ns >= c1.cpu_time_ns > 0
        # the test driver names the tap "testnet0", not what the XML asked for: the
        # driver still finds the interface (by the live XML, keyed by MAC)
        assert c2.rx_bytes >= c1.rx_bytes > 0 and c2.tx_packets >= c1.tx_packets > 0
    assert s1.vms["db1"].vcpus == 4


def test_vf_counters_from_the_pf_are_added_to_the_vm(node_uri, closing):
    class FakeNetlink:
        def vfs(self) -> dict[int, VFInfo]:
            return {0: VFInfo(0, "52:54:00:00:00:01", 1000, 0, 10**9, 2 * 10**9, 7, 9)}

        def probe(self, free_vf: int | None, link_mbit: int = 0) -> RateProbe:
            return RateProbe(True, False, stats_usable(self.vfs())[0])

        def close(self) -> None:
            pass

    drv = make(node_uri, closing)
    base = drv.sample().vms["web1"]
    assert not drv.capabilities().nic.vf_stats  # probed without netlink
    drv._netlink = FakeNetlink()  # type: ignore[assignment]
    assert drv.refresh_capabilities().nic.vf_stats  # counters that moved are trusted
    with_vf = drv.sample().vms["web1"]
    assert with_vf.rx_bytes - base.rx_bytes >= 10**9
    assert with_vf.tx_bytes - base.tx_bytes >= 2 * 10**9
    assert drv.inventory().vms["web1"].vf_max_bps == 1e9


def test_host_side_bandwidth_sets_interface_parameters(node_uri, closing, fast):
    drv = make(node_uri, closing, host_side_shaping="bandwidth", **fast)
    st = wait_done(drv, drv.submit(SetGuestRateLimit("db1", 80e6)))
    assert st.state is OpState.SUCCEEDED, st
    conn = drv._conn
    params = conn.lookupByName("db1").interfaceParameters("testnet0", 0)
    assert params["outbound.average"] == round(80e6 / 8 / 1024)
    st = wait_done(drv, drv.submit(SetGuestRateLimit("db1", None)))
    assert st.state is OpState.SUCCEEDED
    assert conn.lookupByName("db1").interfaceParameters("testnet0", 0)["outbound.average"] == 0


def test_attach_where_the_hypervisor_cannot_hotplug_fails_bounded(node_uri, closing, fast):
    # libvirt's test driver has no hot-plug: the driver must surface that, not hang.
    drv = make(node_uri, closing, **fast)
    st = wait_done(drv, drv.submit(AttachVF("db1")))
    assert st.state is OpState.FAILED
    # an unsupported operation is permanent: reported at once, not retried
    assert "not supported" in st.detail and "not retried" in st.detail
    assert drv.inventory().vms["db1"].nic is NicKind.VIRTIO


def test_lifecycle_events_keep_the_state_true(node_uri, closing):
    drv = make(node_uri, closing)
    seen: list[Any] = []
    drv.add_event_listener(seen.append)
    conn = drv._conn
    dom = conn.lookupByName("db1")
    dom.suspend()
    dom.resume()
    dom.destroy()
    assert eventually(
        lambda: any(
            e.vm == "db1" and e.kind == "lifecycle" and e.event == libvirt.VIR_DOMAIN_EVENT_STOPPED
            for e in seen
        )
    )
    kinds = [e.event for e in seen if e.vm == "db1"]
    assert kinds[:3] == [
        libvirt.VIR_DOMAIN_EVENT_SUSPENDED,
        libvirt.VIR_DOMAIN_EVENT_RESUMED,
        libvirt.VIR_DOMAIN_EVENT_STOPPED,
    ]
    assert drv.inventory().vms["db1"].running is False
    assert "db1" not in drv.sample().vms
    dom.create()
    xml = dom.XMLDesc(0).replace("<name>db1</name>", "<name>db2</name>")
    xml = xml.split("<uuid>")[0] + xml.split("</uuid>")[1]
    conn.defineXML(xml)
    assert eventually(
        lambda: any(e.vm == "db2" and e.event == libvirt.VIR_DOMAIN_EVENT_DEFINED for e in seen)
    )
    inv = drv.inventory()
    assert inv.vms["db1"].running is True and inv.vms["db2"].running is False
