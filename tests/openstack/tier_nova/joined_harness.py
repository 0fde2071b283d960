"""The joined run of the nova tier: Nova's harness and Neutron's real API server (ML2, an
OVS and an SR-IOV agent record per compute, in another process: :class:`NeutronProcess`),
each compute's domains held by its own libvirt test driver (:class:`Hypervisor`), and the
guest's bond (:class:`BondGuest`) answering Sova's scripts from the NICs its hypervisor
holds. Every interface Nova unplugs is recorded with the guest's active slave at that
moment, so a test can say the bond was never on the NIC being unplugged.

:class:`JoinedRun` is the set-up every joined test shares (Neutron, the hypervisors, the
VLAN provider network); :class:`BondedVFHolderHarness` adds two computes and one bonded
server with Sova's agent side on each (test_os_nova_joined_moves.py,
test_os_nova_joined_lifecycle.py); test_os_nova.py's joined test runs on one compute.

Imported only by those modules, after their ``importorskip`` of Nova's harness.
"""

from __future__ import annotations

import copy
import os
import tempfile
import time
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from nova.network import neutron as _nova_neutron
from nova.tests.fixtures import libvirt as fakelibvirt
from nova.tests.functional.libvirt import test_pci_sriov_servers as sriov
from nova_harness import _UnderPytest, sdk, wait

from sova.driver.base import OpState
from sova.model import AttachVF
from sova.orchestrator.openstack import OpenStackActuator

# Nova's own Neutron client, kept before NeutronFixture replaces it in every test's setUp.
REAL_NEUTRON_CLIENT = _nova_neutron.get_client

NODE_XML = """<node>
  <cpu><nodes>1</nodes><sockets>1</sockets><cores>8</cores><threads>1</threads>
    <active>8</active><mhz>2400</mhz><model>x86_64</model></cpu>
  <memory>16777216</memory>
  <device><name>pci_0000_81_00_0</name><parent>computer</parent>
    <capability type='pci'><domain>0</domain><bus>129</bus><slot>0</slot><function>0</function>
      <product id='0x1528'/><vendor id='0x8086'/>
      <capability type='virt_functions' maxCount='1'>
        <address domain='0x0000' bus='0x81' slot='0x00' function='0x1'/>
      </capability></capability></device>
  <device><name>net_ens1f0</name><parent>pci_0000_81_00_0</parent>
    <capability type='net'><interface>ens1f0</interface><address>52:54:00:aa:00:01</address>
      <link speed='10000' state='up'/></capability></device>
</node>
"""
# The one PF and VF of Nova's fake host (fakelibvirt.HostPCIDevicesInfo(num_pfs=1, num_vfs=1)),
# as a libvirt node file: the pool the host offers Sova.


class Hypervisor:
    """libvirt's own test driver (``test://<node file>``) holding the domains Nova's libvirt
    driver generated for one compute: Nova's domain XML as Nova passed it to ``defineXML`` and
    Nova's device XML as Nova passed it to ``attachDeviceFlags``/``detachDeviceFlags``
    (Nova's fake libvirt keeps only a digest of them). The one change: the domain type,
    ``kvm``, becomes ``test``, the only type the test driver runs."""

    def __init__(self, node_file: str) -> None:
        import libvirt

        self.lv = libvirt
        self.conn = libvirt.open(f"test://{node_file}")
        self.xml: dict[str, Any] = {}  # domain name -> Nova's XML (ElementTree)
        self.events: list[tuple[str, str, str]] = []  # (what, domain, detail)

    def define(self, xml: str) -> None:
        root = ET.fromstring(xml)
        self.xml[root.findtext("name", "")] = root
        self._redefine(root.findtext("name", ""))

    def attach(self, name: str, device_xml: str) -> None:
        self.xml[name].find("devices").append(ET.fromstring(device_xml))
        self.events.append(("attach", name, device_xml))
        self._redefine(name)

    def detach(self, name: str, device_xml: str) -> None:
        dev = ET.fromstring(device_xml)
        mac = dev.find("mac")
        devices = self.xml[name].find("devices")
        for el in list(devices):
            m = el.find("mac")
            same = m is not None and mac is not None and m.get("address") == mac.get("address")
            if el.tag == dev.tag and same:
                devices.remove(el)
                self.events.append(("detach", name, device_xml))
        self._redefine(name)

    def _redefine(self, name: str) -> None:
        # The aliases libvirt's QEMU driver gives devices in the live XML (netN for an
        # interface, hostdevN for a hostdev one), which Nova detaches by.
        counters = {"net": 0, "hostdev": 0}
        for iface in self.xml[name].iter("interface"):
            kind = "hostdev" if iface.get("type") == "hostdev" else "net"
            if iface.find("alias") is None:
                ET.SubElement(iface, "alias", name=f"{kind}{counters[kind]}")
            counters[kind] += 1

        root = copy.deepcopy(self.xml[name])
        root.set("type", "test")
        self.undefine(name)
        self.conn.defineXML(ET.tostring(root, encoding="unicode")).create()

    def undefine(self, name: str) -> None:
        """The test driver's domain ``name`` stopped and undefined, if it has one."""
        try:
            old = self.conn.lookupByName(name)
            if old.isActive():
                old.destroy()
            old.undefine()
        except self.lv.libvirtError:
            pass


class BondGuest:
    """The guest agent of a guest whose bond enslaves its virtio NIC (backup) and, once
    plugged, its VF: answers Sova's guest-bond scripts as the guest would, from what the
    hypervisor holds (a NIC that is not plugged cannot become the active slave)."""

    def __init__(self, hv: Hypervisor) -> None:
        self.hv = hv
        self.active: dict[str, str] = {}  # domain -> MAC of the active slave
        self.calls: list[tuple[str, str]] = []
        self._out: dict[int, str] = {}

    def __call__(self, dom: Any, cmd: str, timeout_s: int) -> str:
        import base64
        import json

        from sova.driver.libvirt_driver.failover import TO_BACKUP, TO_FAST

        req = json.loads(cmd)
        if req["execute"] == "guest-exec":
            _, script, _, fast, backup = req["arguments"]["arg"]
            name = dom.name()
            macs = {m.get("address") for m in self.hv.xml[name].iter("mac")}
            if script == TO_FAST:
                if fast not in macs:
                    return json.dumps({"error": {"desc": f"no netdev with MAC {fast}"}})
                self.active[name] = fast
            elif script == TO_BACKUP:
                self.active[name] = backup
            self.calls.append((name, "to_fast" if script == TO_FAST else "to_backup"))
            pid = len(self._out) + 1
            self._out[pid] = f"bond0: active slave {self.active[name]}"
            return json.dumps({"return": {"pid": pid}})
        if req["execute"] == "guest-exec-status":
            out = self._out[req["arguments"]["pid"]]
            data = base64.b64encode(out.encode()).decode()
            return json.dumps({"return": {"exited": True, "exitcode": 0, "out-data": data}})
        return json.dumps({"error": {"desc": f"unexpected {req['execute']}"}})


class NeutronProcess:
    """Neutron's API on the real ML2 plugin (openvswitch + sriovnicswitch), in its own process
    and Python environment (tests/openstack/neutron_server.py, the neutron env's interpreter),
    reached over HTTP on a loopback port."""

    def __init__(self, *hosts: str) -> None:
        import os
        import pathlib
        import subprocess

        python = os.environ.get("SOVA_NEUTRON_PYTHON")
        if not python or not pathlib.Path(python).exists():
            pytest.skip(
                "needs the neutron environment's interpreter in SOVA_NEUTRON_PYTHON "
                "(scripts/openstack-envs.sh test nova sets it)"
            )
        script = pathlib.Path(__file__).resolve().parents[1] / "neutron_server.py"
        self.proc = subprocess.Popen(
            [python, str(script), *hosts],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()  # printed once it listens
        if not self.url.startswith("http://"):
            _, err = self.proc.communicate(timeout=30)
            raise AssertionError(f"Neutron's server did not start: {err[-3000:]}")

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()
            self.proc.wait()


HOSTS = ("compute0", "compute1")


# (host, domain, MAC of the interface Nova unplugs, the guest's active slave then)
Unplug = tuple[str, str, str | None, str | None]


def hold_nova_xml_per_host(
    test: Any, hvs: dict[str, Hypervisor], guests: dict[str, BondGuest]
) -> list[Unplug]:
    """Nova's fake libvirt keeps the XML Nova defines, attaches and detaches in the libvirt
    test driver of the compute whose host name names the connection, and reads it back from
    there (Nova finds an interface to detach by its config): one hypervisor per compute,
    seen alike by Nova and Sova.
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
        hv.undefine(name)
    guest.active.pop(name, None)


class JoinedRun(_UnderPytest, sriov._PCIServersTestBase):
    """Nova's harness joined to Neutron's real API server: Nova reaches it through its own
    Neutron client (not NeutronFixture), Sova through one openstacksdk connection to both
    (:attr:`conn`). Each of :attr:`HOSTS` has its hypervisor (libvirt's test driver) and
    its guests' agent; the first compute is started, the others are the subclass's to
    start. In Neutron: the VLAN provider network ``provider-vlan`` (physnet2, VLAN 242)
    with a subnet, on which Sova's ports go too."""

    PCI_ALIAS: list[str] = []
    ADMIN_API = True
    microversion = "latest"
    PCI_DEVICE_SPEC = sriov.SRIOVAttachDetachTest.PCI_DEVICE_SPEC
    HOSTS: tuple[str, ...] = ("compute0",)

    def setUp(self) -> None:
        super().setUp()
        pytest.importorskip("libvirt", reason="needs libvirt-python in the nova environment")
        neutron = NeutronProcess(*self.HOSTS)
        self.addCleanup(neutron.stop)
        # Nova's Neutron client, not NeutronFixture's: [neutron] points at the server, with a
        # service credential (Keystone is the stand-in: no token, see neutron_server.identity).
        self.stub_out("nova.network.neutron.get_client", REAL_NEUTRON_CLIENT)
        self.flags(auth_type="none", endpoint_override=neutron.url, group="neutron")
        self.flags(vif_plugging_timeout=0)  # no notifications from Neutron to Nova here
        with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as node:
            node.write(NODE_XML)
        self.addCleanup(os.unlink, node.name)
        self.hv = {h: Hypervisor(node.name) for h in self.HOSTS}
        self.guest = {h: BondGuest(self.hv[h]) for h in self.HOSTS}
        self.unplugs = hold_nova_xml_per_host(self, self.hv, self.guest)
        self.start_compute(self.HOSTS[0], host_info=self.host_info(), pci_info=self.pci_info())

        self.conn = sdk(self.api_fixture.base_url, self.api.project_id, network=neutron.url)
        project = self.api.project_id
        self.provider_net = self.conn.network.create_network(
            name="provider-vlan",
            provider_network_type="vlan",
            provider_physical_network="physnet2",
            provider_segmentation_id=242,
            project_id=project,
        )
        self.conn.network.create_subnet(
            network_id=self.provider_net.id,
            cidr="192.168.13.0/24",
            ip_version=4,
            project_id=project,
        )

    @staticmethod
    def host_info() -> Any:
        return fakelibvirt.HostInfo(cpu_nodes=2, cpu_sockets=1, cpu_cores=2, cpu_threads=2)

    @staticmethod
    def pci_info() -> Any:
        return fakelibvirt.HostPCIDevicesInfo(num_pfs=1, num_vfs=1)

    def make_image(self, name: str, properties: dict[str, str]) -> str:
        """A Glance image ``img-<name>`` (the harness's default one with ``properties``)."""
        base = self.glance.show(None, self.glance.auto_disk_config_enabled_image["id"])
        img = {k: v for k, v in base.items() if k not in ("id", "properties")}
        img["name"], img["properties"] = f"img-{name}", dict(properties)
        return str(self.glance.create(None, img)["id"])

    def boot(self, name: str, image: str) -> tuple[Any, dict[str, Any]]:
        """A server ``name`` booted through Nova's API from ``image``, on a virtio port
        ``<name>-virtio`` made beforehand on the provider network: (port, server)."""
        port = self.conn.network.create_port(
            network_id=self.provider_net.id, name=f"{name}-virtio", project_id=self.api.project_id
        )
        server = self._create_server(name=name, image_uuid=image, networks=[{"port": port.id}])
        return port, server

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


class BondedVFHolderHarness(JoinedRun):
    """One server booted through Nova's API on compute0 from an image with the guest agent,
    its virtio port on the provider network in the real Neutron; compute1 starts after it.
    One Sova host driver (guest-bond) and actuator per compute."""

    HOSTS = HOSTS

    def setUp(self) -> None:
        super().setUp()
        self.image = self.make_image("bonded", {"hw_qemu_guest_agent": "yes"})
        self.vport, self.server = self.boot("bonded", self.image)
        self.domain = self.server["OS-EXT-SRV-ATTR:instance_name"]
        self.start_compute("compute1", host_info=self.host_info(), pci_info=self.pci_info())
        # Nova's fake libvirt has no disks to copy (Nova's own SR-IOV tests stub this too).
        self.stub_out(
            "nova.virt.libvirt.driver.LibvirtDriver.migrate_disk_and_power_off",
            lambda *args, **kwargs: "{}",
        )
        self.drv = {h: self.orchestrated(h) for h in HOSTS}

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

    def given_back_then_granted_again(
        self, host: str, why: str, calls_before: list[Any], old: Any
    ) -> Any:
        """``host``'s agent gives back Sova's port ``old`` for ``why`` (a note of the
        period that did), bond first (:meth:`assert_given_back_bond_first`), then grants
        the VM its VF with a new port; returns that port."""
        notes = self.given_back(host)
        assert any(why in n for n in notes), notes
        self.assert_given_back_bond_first(host, calls_before)
        again = self.grant(host)
        assert again.id != old.id
        return again

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
