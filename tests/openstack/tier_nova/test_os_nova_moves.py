"""Nova moving or re-spawning a VF holder on its own (the OpenStack tier, nova env):
evacuation off a host whose compute service is forced down, resize to another flavour
(confirmed, reverted). Each through Nova's API in Nova's functional
harness (the harness and helpers of test_os_nova.py), two hosts with one VF each.

What every test asks of Sova: no Sova port left once the operation is over (Nova carries the
port along and re-plugs it without the guest's bond, so the agent of the host it lands on
gives it back), every host's VF free again in Nova's PCI tracker, the bond moved to virtio
before each unplug Sova asks for, and the VM granted a VF again on the host it now runs on.

Run with ``scripts/openstack-envs.sh test nova``.
"""

from __future__ import annotations

import time
import types
from typing import Any

import pytest

helpers = pytest.importorskip(
    "nova.tests.functional.integrated_helpers",
    reason="needs the pinned nova environment: scripts/openstack-envs.sh test nova",
)

from nova.tests.fixtures import libvirt as fakelibvirt  # noqa: E402
from nova.tests.functional.libvirt import test_pci_sriov_servers as sriov  # noqa: E402
from test_os_nova import FixtureNetwork, _UnderPytest, sdk, virtio_ports, wait  # noqa: E402

from sova.driver.base import OpState  # noqa: E402
from sova.model import NIC, VM, AttachVF, Host, Inventory, VMState  # noqa: E402
from sova.orchestrator.openstack import OpenStackActuator  # noqa: E402

pytestmark = pytest.mark.openstack

HOSTS = ("compute0", "compute1")


class BondLog:
    """The guest-bond hooks of one host's driver, as the actuator calls them, and the
    interface detaches it asks Nova for, in one log shared by both hosts: the order the
    product keeps (bond on virtio confirmed, then the unplug) is read from it."""

    def __init__(self, host: str, log: list[tuple[str, str, str]]) -> None:
        self.host, self.log = host, log

    def to_backup(self, vm: str) -> str:
        self.log.append((self.host, "to_backup", vm))
        return f"{vm}: bond on virtio"

    def to_fast(self, vm: str) -> str:
        self.log.append((self.host, "to_fast", vm))
        return f"{vm}: bond on the VF"


class LoggedCompute:
    """openstacksdk's compute proxy, logging each interface detach (the VF's unplug)."""

    def __init__(self, compute: Any, log: list[tuple[str, str, str]]) -> None:
        self._compute, self._log = compute, log

    def delete_server_interface(self, port: Any, server: Any = None, **kw: Any) -> Any:
        self._log.append(("nova", "unplug", str(server)))
        return self._compute.delete_server_interface(port, server=server, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._compute, name)


class TestNovaMovesTheVFHolder(_UnderPytest, sriov._PCIServersTestBase):
    """vm1 boots on compute0 (one PF, one VF) and holds Sova's port there; compute1 (the
    same) starts after it. One actuator per host, as one agent per hypervisor."""

    PCI_ALIAS: list[str] = []
    ADMIN_API = True
    microversion = "latest"
    PCI_DEVICE_SPEC = sriov.SRIOVAttachDetachTest.PCI_DEVICE_SPEC

    def setUp(self) -> None:
        super().setUp()
        self.neutron = self.useFixture(sriov.nova_fixtures.NeutronFixture(self))
        net2 = self.neutron.network_2
        self.neutron._networks[net2["id"]] = net2
        self.neutron._subnets[self.neutron.subnet_2["id"]] = self.neutron.subnet_2
        self.start_compute("compute0", host_info=self.host_info(), pci_info=self.pci_info())
        self.net = FixtureNetwork(self.neutron)
        self.log: list[tuple[str, str, str]] = []
        self.conn = types.SimpleNamespace(
            compute=LoggedCompute(
                sdk(self.api_fixture.base_url, self.api.project_id).compute, self.log
            ),
            network=self.net,
        )
        port = virtio_ports(self.neutron, ("vm1",))["vm1"]
        self.server = self._create_server(name="vm1", networks=[{"port": port}])
        self.start_compute("compute1", host_info=self.host_info(), pci_info=self.pci_info())
        self.act = {
            h: OpenStackActuator(
                self.conn,
                h,
                network=net2["id"],
                poll_s=0.2,
                detach_timeout_s=30,
                fallback=BondLog(h, self.log),
            )
            for h in HOSTS
        }
        # Nova's fake libvirt has no disks to copy (Nova's own SR-IOV tests stub this too).
        self.stub_out(
            "nova.virt.libvirt.driver.LibvirtDriver.migrate_disk_and_power_off",
            lambda *args, **kwargs: "{}",
        )

    @staticmethod
    def host_info() -> Any:
        return fakelibvirt.HostInfo(cpu_nodes=2, cpu_sockets=1, cpu_cores=2, cpu_threads=2)

    @staticmethod
    def pci_info() -> Any:
        return fakelibvirt.HostPCIDevicesInfo(num_pfs=1, num_vfs=1)

    def sensed(self, host: str) -> Inventory:
        """What ``host`` senses: vm1's domain (kept on the source until Nova cleans it)."""
        nic = NIC("pf0", 10e9, vf_pool=1)
        return Inventory(Host(host, 8, 16 << 30, nic), {"vm1": VMState(VM("vm1", 1, 512 << 20))})

    def reconcile(self, host: str) -> tuple[Inventory, list[str]]:
        inv = self.act[host].reconcile(self.sensed(host))
        return inv, list(self.act[host].discrepancies)

    def given_back(self, host: str, timeout_s: float = 60.0) -> list[str]:
        """Reconcile ``host`` until vm1's give-back ends; the notes of every period."""
        notes: list[str] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            notes += self.reconcile(host)[1]
            if any(n.startswith("vm1: given back") or "give-back failed" in n for n in notes):
                assert any(n.startswith("vm1: given back") for n in notes), notes
                return notes
            time.sleep(0.2)
        raise AssertionError(f"no give-back of vm1 on {host} within {timeout_s} s: {notes}")

    def grant(self, host: str) -> str:
        """vm1 earns the VF of ``host`` (the only candidate): granted through Nova there."""
        inv, _ = self.reconcile(host)
        assert inv.vms["vm1"].running and inv.host.nic.vf_pool == 1, inv
        assert inv.vf_holders == frozenset()
        st = wait(self.act[host], self.act[host].submit(AttachVF("vm1")))
        assert st.state is OpState.SUCCEEDED, st.detail
        port_id = self.net.created[-1]  # (Nova's fixture gives a new port the same id again)
        assert self.reconcile(host)[0].vf_holders == frozenset({"vm1"})
        port = self.neutron.show_port(port_id)["port"]
        assert (port["binding:host_id"], port["device_id"]) == (host, self.server["id"])
        return port_id

    def assert_unplugs_after_the_bond_moved(self) -> None:
        """Every unplug Sova asked of Nova came right after the bond's move to virtio."""
        sid = self.server["id"]
        unplugs = [i for i, e in enumerate(self.log) if e == ("nova", "unplug", sid)]
        assert unplugs, self.log
        for i in unplugs:
            assert i > 0 and self.log[i - 1][1:] == ("to_backup", "vm1"), self.log

    def assert_no_sova_port_and_vfs_free(self) -> None:
        assert [p.id for p in self.net.ports() if "sova-vf" in p.tags] == []
        for h in HOSTS:
            self.assertPCIDeviceCounts(h, total=2, free=2)

    def test_evacuation_off_a_forced_down_host(self) -> None:
        """compute0 dies with vm1 holding Sova's port; an operator forces its service down
        and evacuates vm1 through Nova's API. Nova rebuilds it on compute1 (stopped, at this
        microversion) with the port re-bound there and a VF claimed, and keeps compute0's
        claim, under the same PCI request, until compute0's service is back: a detach
        meanwhile releases compute0's VF in Nova's tracker, not compute1's, which stays
        taken for good. So compute1's agent stands back while vm1 is stopped and then while
        Nova's evacuation record is ``done``; compute0 back up (the record ``completed``,
        its VF freed), it gives the port back and grants a VF again."""
        port0 = self.grant("compute0")
        self.assertPCIDeviceCounts("compute0", total=2, free=0)
        self.computes["compute0"].stop()
        self.api.put_service(self.computes["compute0"].service_ref.uuid, {"forced_down": True})
        server = self._evacuate_server(self.server, expected_host="compute1")
        assert server["status"] == "SHUTOFF"
        port = self.neutron.show_port(port0)["port"]
        assert (port["binding:host_id"], port["device_id"]) == ("compute1", server["id"])
        self.assertPCIDeviceCounts("compute1", total=2, free=0)

        inv, notes = self.reconcile("compute1")
        assert "vm1" not in inv.vms and inv.host.nic.vf_pool == 0, inv
        assert "vm1: Nova is operating on it (status SHUTOFF): Sova stands back" in notes
        self._start_server(server)
        for _ in range(3):  # periods go by: nothing given back while compute0 holds its claim
            inv, notes = self.reconcile("compute1")
            assert "vm1" not in inv.vms and inv.host.nic.vf_pool == 0, inv
            [note] = [n for n in notes if n.startswith("vm1:")]
            assert "evacuated by Nova migration" in note and "status done" in note, note
            time.sleep(0.3)
        assert port0 not in self.net.deleted
        assert ("nova", "unplug", server["id"]) not in self.log

        # compute0 comes back: Nova destroys the evacuated guest, frees its VF claim and
        # completes the evacuation; only then may its service be forced up again.
        self.restart_compute_service("compute0")
        self.api.put_service(self.computes["compute0"].service_ref.uuid, {"forced_down": False})
        self.assertPCIDeviceCounts("compute0", total=2, free=2)
        notes = self.given_back("compute1")
        assert any("outlived an operation of Nova's" in n for n in notes), notes
        assert port0 in self.net.deleted
        self.assert_unplugs_after_the_bond_moved()
        self.assert_no_sova_port_and_vfs_free()
        _, notes = self.reconcile("compute0")
        assert "vm1: sensed on compute0 but Nova places no such server here" in notes

        self.grant("compute1")
        assert self.log[-1] == ("compute1", "to_fast", "vm1")
        self.assertPCIDeviceCounts("compute1", total=2, free=0)

    def resize(self) -> tuple[str, dict[str, Any]]:
        """vm1, holding Sova's port on compute0, resized to a bigger flavour: Nova places it
        on compute1 (VERIFY_RESIZE) with the port and a VF there. Returns the port and the
        server."""
        port0 = self.grant("compute0")
        flavor = self._create_flavor(name="sova-bigger", memory_mb=1024, vcpu=2, disk=1)
        server = self._resize_server(self.server, flavor)
        assert server["OS-EXT-SRV-ATTR:host"] == "compute1"
        assert server["flavor"]["original_name"] == "sova-bigger"
        port = self.neutron.show_port(port0)["port"]
        assert (port["binding:host_id"], port["device_id"]) == ("compute1", server["id"])
        # Neither agent acts meanwhile: compute0's no longer has vm1 as its server,
        # compute1's stands back while Nova waits for the confirm or the revert.
        inv0, notes0 = self.reconcile("compute0")
        assert not inv0.vms["vm1"].running
        assert "vm1: sensed on compute0 but Nova places no such server here" in notes0
        inv1, notes1 = self.reconcile("compute1")
        assert "vm1" not in inv1.vms
        assert "vm1: Nova is operating on it (status VERIFY_RESIZE): Sova stands back" in notes1
        assert port0 not in self.net.deleted
        return port0, server

    def test_resize_confirmed_is_given_back_on_the_target(self) -> None:
        port0, server = self.resize()
        self._confirm_resize(server)
        self.assertPCIDeviceCounts("compute0", total=2, free=2)
        notes = self.given_back("compute1")
        assert any("outlived an operation of Nova's" in n for n in notes), notes
        assert port0 in self.net.deleted
        self.assert_unplugs_after_the_bond_moved()
        self.assert_no_sova_port_and_vfs_free()
        self.grant("compute1")
        assert self.log[-1] == ("compute1", "to_fast", "vm1")

    def test_resize_reverted_is_given_back_on_the_source(self) -> None:
        """Reverted, vm1 is re-spawned on compute0 with the old flavour and the same port
        re-plugged (bond not on it): no operation of Nova's was seen there, Nova's new launch
        time says the guest is a new one, and compute0's agent gives the port back."""
        port0, server = self.resize()
        self._revert_resize(server)
        port = self.neutron.show_port(port0)["port"]
        assert port["binding:host_id"] == "compute0"
        self.assertPCIDeviceCounts("compute1", total=2, free=2)
        _, notes1 = self.reconcile("compute1")
        assert "vm1: sensed on compute1 but Nova places no such server here" in notes1
        notes = self.given_back("compute0")
        assert any("outlived Nova re-spawning the server" in n for n in notes), notes
        assert port0 in self.net.deleted
        self.assert_unplugs_after_the_bond_moved()
        self.assert_no_sova_port_and_vfs_free()
        self.grant("compute0")
        assert self.log[-1] == ("compute0", "to_fast", "vm1")
