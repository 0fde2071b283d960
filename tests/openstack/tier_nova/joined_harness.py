"""The joined harness with two hypervisors, shared by the joined tier's test modules
(test_os_nova_joined_moves.py, test_os_nova_joined_lifecycle.py): Nova's harness and
Neutron's real API server (ML2, an OVS and an SR-IOV agent record per compute), each
compute's domains held by its own libvirt test driver (test_os_nova.py's
:class:`Hypervisor`), and the guest's bond (:class:`BondGuest`) answering Sova's scripts
from the NICs its hypervisor holds. Every interface Nova unplugs is recorded with the
guest's active slave at that moment, so a test can say the bond was never on the NIC
being unplugged.

Imported only by those modules, after their ``importorskip`` of Nova's harness.
"""

from __future__ import annotations

import tempfile
import time
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from nova.tests.fixtures import libvirt as fakelibvirt
from nova.tests.functional.libvirt import test_pci_sriov_servers as sriov
from test_os_nova import (
    NODE_XML,
    REAL_NEUTRON_CLIENT,
    BondGuest,
    Hypervisor,
    NeutronProcess,
    _UnderPytest,
    sdk,
    wait,
)

from sova.driver.base import OpState
from sova.model import AttachVF
from sova.orchestrator.openstack import OpenStackActuator

HOSTS = ("compute0", "compute1")


# (host, domain, MAC of the interface Nova unplugs, the guest's active slave then)
Unplug = tuple[str, str, str | None, str | None]


def hold_nova_xml_per_host(
    test: Any, hvs: dict[str, Hypervisor], guests: dict[str, BondGuest]
) -> list[Unplug]:
    """test_os_nova's ``_hold_nova_xml`` for several computes: each fake libvirt connection
    (named by its compute's host name) keeps Nova's XML in that host's libvirt test driver.
    A domain Nova defines is a guest booted anew: its bond's runtime state is gone; a domain
    Nova undefines (deleted, shelved offloaded, moved away) is gone from that hypervisor.
    Returns the record of every interface Nova unplugs, filled as it happens."""
    real_define = fakelibvirt.Connection.defineXML
    real_attach = fakelibvirt.Domain.attachDeviceFlags
    real_detach = fakelibvirt.Domain.detachDeviceFlags
    real_undefine = fakelibvirt.Domain.undefine
    real_xml = fakelibvirt.Domain.XMLDesc
    unplugs: list[Unplug] = []

    def hv_of(dom: Any) -> Hypervisor:
        return hvs[dom._connection.getHostname()]

    def define(conn: Any, xml: str) -> Any:
        hvs[conn.getHostname()].define(xml)
        guests[conn.getHostname()].active.pop(ET.fromstring(xml).findtext("name", ""), None)
        return real_define(conn, xml)

    def attach(dom: Any, xml: str, flags: int) -> Any:
        out = real_attach(dom, xml, flags)
        hv_of(dom).attach(dom.name(), xml)
        return out

    def detach(dom: Any, xml: str, flags: int) -> Any:
        dev = ET.fromstring(xml)
        if dev.tag == "interface":
            host = dom._connection.getHostname()
            mac = dev.find("mac")
            unplugs.append(
                (
                    host,
                    dom.name(),
                    None if mac is None else mac.get("address"),
                    guests[host].active.get(dom.name()),
                )
            )
        hv_of(dom).detach(dom.name(), xml)
        return real_detach(dom, xml, flags)

    def undefine(dom: Any) -> Any:
        host = dom._connection.getHostname()
        forget(hvs[host], guests[host], dom.name())
        return real_undefine(dom)

    def xml_desc(dom: Any, flags: int) -> str:
        root = hv_of(dom).xml.get(dom.name())
        if root is None:
            return str(real_xml(dom, flags))
        return ET.tostring(root, encoding="unicode")

    test.flags(device_detach_timeout=1, group="libvirt")
    test.stub_out("nova.tests.fixtures.libvirt.Domain.XMLDesc", xml_desc)
    test.stub_out("nova.tests.fixtures.libvirt.Connection.defineXML", define)
    test.stub_out("nova.tests.fixtures.libvirt.Domain.attachDeviceFlags", attach)
    test.stub_out("nova.tests.fixtures.libvirt.Domain.detachDeviceFlags", detach)
    test.stub_out("nova.tests.fixtures.libvirt.Domain.undefine", undefine)
    return unplugs


def forget(hv: Hypervisor, guest: BondGuest, name: str) -> None:
    """The domain ``name`` gone from ``hv`` (undefined, or migrated away), its guest too."""
    if hv.xml.pop(name, None) is not None:
        try:
            gone = hv.conn.lookupByName(name)
            if gone.isActive():
                gone.destroy()
            gone.undefine()
        except hv.lv.libvirtError:
            pass
    guest.active.pop(name, None)


class BondedVFHolderHarness(_UnderPytest, sriov._PCIServersTestBase):
    """One server booted through Nova's API on compute0 from an image with the guest agent,
    its virtio port on the VLAN provider network (physnet2, VLAN 242) in the real Neutron;
    compute1 starts after it. One Sova host driver (guest-bond) and actuator per compute."""

    PCI_ALIAS: list[str] = []
    ADMIN_API = True
    microversion = "latest"
    PCI_DEVICE_SPEC = sriov.SRIOVAttachDetachTest.PCI_DEVICE_SPEC

    def setUp(self) -> None:
        super().setUp()
        pytest.importorskip("libvirt", reason="needs libvirt-python in the nova environment")
        neutron = NeutronProcess(*HOSTS)
        self.addCleanup(neutron.stop)
        self.stub_out("nova.network.neutron.get_client", REAL_NEUTRON_CLIENT)
        self.flags(auth_type="none", endpoint_override=neutron.url, group="neutron")
        self.flags(vif_plugging_timeout=0)
        with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as node:
            node.write(NODE_XML)
        self.addCleanup(__import__("os").unlink, node.name)
        self.hv = {h: Hypervisor(node.name) for h in HOSTS}
        self.guest = {h: BondGuest(self.hv[h]) for h in HOSTS}
        self.unplugs = hold_nova_xml_per_host(self, self.hv, self.guest)
        self.start_compute("compute0", host_info=self.host_info(), pci_info=self.pci_info())

        self.conn = sdk(self.api_fixture.base_url, self.api.project_id, network=neutron.url)
        project = self.api.project_id
        net = self.conn.network.create_network(
            name="provider-vlan",
            provider_network_type="vlan",
            provider_physical_network="physnet2",
            provider_segmentation_id=242,
            project_id=project,
        )
        self.conn.network.create_subnet(
            network_id=net.id, cidr="192.168.13.0/24", ip_version=4, project_id=project
        )
        base = self.glance.show(None, self.glance.auto_disk_config_enabled_image["id"])
        img = {k: v for k, v in base.items() if k not in ("id", "properties")}
        img["name"], img["properties"] = "img-bonded", {"hw_qemu_guest_agent": "yes"}
        self.image = image = self.glance.create(None, img)["id"]
        self.vport = self.conn.network.create_port(
            network_id=net.id, name="bonded-virtio", project_id=project
        )
        self.server = self._create_server(
            name="bonded", image_uuid=image, networks=[{"port": self.vport.id}]
        )
        self.domain = self.server["OS-EXT-SRV-ATTR:instance_name"]
        self.start_compute("compute1", host_info=self.host_info(), pci_info=self.pci_info())
        # Nova's fake libvirt has no disks to copy (Nova's own SR-IOV tests stub this too).
        self.stub_out(
            "nova.virt.libvirt.driver.LibvirtDriver.migrate_disk_and_power_off",
            lambda *args, **kwargs: "{}",
        )
        self.drv = {h: self.orchestrated(h) for h in HOSTS}

    @staticmethod
    def host_info() -> Any:
        return fakelibvirt.HostInfo(cpu_nodes=2, cpu_sockets=1, cpu_cores=2, cpu_threads=2)

    @staticmethod
    def pci_info() -> Any:
        return fakelibvirt.HostPCIDevicesInfo(num_pfs=1, num_vfs=1)

    def orchestrated(self, host: str) -> Any:
        """Sova's agent side on ``host``: its LibvirtDriver on that hypervisor (guest-bond
        through the guest's agent) and the actuator acting through Nova and Neutron."""
        from sova.driver.guest_agent import GuestAgent
        from sova.driver.libvirt_driver import LibvirtDriver, LibvirtDriverConfig
        from sova.orchestrator.base import OrchestratedDriver

        drv = LibvirtDriver(
            LibvirtDriverConfig(
                uri="test:///", host_name=host, failover="guest-bond", sysfs_root="/nonexistent"
            ),
            conn=self.hv[host].conn,
            agent=GuestAgent(self.guest[host], exec_timeout_s=5.0),
        )
        self.addCleanup(drv.close)
        act = OpenStackActuator(
            self.conn, host, network="provider-vlan", poll_s=0.2, detach_timeout_s=30, fallback=drv
        )
        return OrchestratedDriver(drv, act)

    def sova_ports(self) -> list[Any]:
        return [p for p in self.conn.network.ports(tags="sova-vf")]

    def hostdevs(self, host: str) -> list[str]:
        """The MACs of the VF interfaces the domain has on ``host``'s hypervisor."""
        root = self.hv[host].xml.get(self.domain)
        if root is None:
            return []
        return [
            i.find("mac").get("address")  # type: ignore[union-attr]
            for i in root.iter("interface")
            if i.get("type") == "hostdev"
        ]

    def assert_bond_on_a_live_nic(self, host: str) -> None:
        """The guest's active slave is a NIC its hypervisor holds, whose Neutron port is
        bound to that host: virtio when no VF is plugged, else the VF."""
        active = self.guest[host].active[self.domain]
        root = self.hv[host].xml[self.domain]
        assert active in {m.get("address") for m in root.iter("mac")}, active
        [port] = [p for p in self.conn.network.ports(mac_address=active)]
        assert port.binding_host_id == host and port.device_id == self.server["id"]

    def grant(self, host: str) -> Any:
        """The VF of ``host`` granted to the bonded VM (its only candidate), bond on it."""
        act = self.drv[host].actuator
        inv = self.drv[host].inventory()
        assert inv.vms[self.domain].running and inv.vms[self.domain].failover_ready
        assert inv.vf_holders == frozenset() and inv.host.nic.vf_pool == 1, inv
        st = wait(act, self.drv[host].submit(AttachVF(self.domain)))
        assert st.state is OpState.SUCCEEDED, st.detail
        [vf] = self.sova_ports()
        assert (vf.binding_host_id, vf.binding_vif_type) == (host, "hw_veb")
        assert self.hostdevs(host) == [vf.mac_address]
        assert self.guest[host].active[self.domain] == vf.mac_address
        self.assert_bond_on_a_live_nic(host)
        return vf

    def given_back(self, host: str, timeout_s: float = 60.0) -> list[str]:
        act = self.drv[host].actuator
        notes: list[str] = []
        deadline = time.monotonic() + timeout_s
        prefix = f"{self.domain}: given back"
        while time.monotonic() < deadline:
            self.drv[host].inventory()
            notes += act.discrepancies
            if any(n.startswith(prefix) or "give-back failed" in n for n in notes):
                assert any(n.startswith(prefix) for n in notes), notes
                return notes
            time.sleep(0.2)
        raise AssertionError(f"no give-back on {host} within {timeout_s} s: {notes}")

    def assert_given_back_bond_first(self, host: str, calls_before: list[Any]) -> None:
        g = self.guest[host]
        assert g.calls == [*calls_before, (self.domain, "to_backup")]
        assert [e[0] for e in self.hv[host].events][-1] == "detach"
        assert self.hostdevs(host) == []
        assert g.active[self.domain] == self.vport.mac_address
        self.assert_bond_on_a_live_nic(host)
        assert self.sova_ports() == []
        for h in HOSTS:
            self.assertPCIDeviceCounts(h, total=2, free=2)
        self.assert_no_unplug_under_the_bond()

    def assert_no_unplug_under_the_bond(self) -> None:
        """Nova unplugged no interface of the bonded VM while the guest's bond had it as its
        active slave (Sova moved the bond to virtio, confirmed, before each)."""
        under = [u for u in self.unplugs if u[2] is not None and u[2] == u[3]]
        assert under == [], f"unplugged under the bond: {under}; all unplugs: {self.unplugs}"
