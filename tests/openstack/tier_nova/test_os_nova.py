"""Sova's OpenStack actuator inside Nova's functional harness (the OpenStack tier, nova env).

Nova's API, conductor, scheduler and compute services plus real Placement run in this
process on in-memory SQLite (Nova's own test fixtures); openstacksdk reaches the API through
the harness's in-process interception, so the code under test is exactly what runs against a
cloud. Neutron here is Nova's NeutronFixture, reached through :class:`FixtureNetwork`, which
plays the part of openstacksdk's network proxy; the Neutron tier checks the same port
request against Neutron's real ML2 plugin.

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

from keystoneauth1 import noauth, session  # noqa: E402
from nova.tests.fixtures import libvirt as fakelibvirt  # noqa: E402
from nova.tests.functional.libvirt import test_pci_sriov_servers as sriov  # noqa: E402

from openstack import connection  # noqa: E402
from sova.driver.base import OpState, OpStatus  # noqa: E402
from sova.model import NIC, VM, AttachVF, DetachVF, Host, Inventory, Migrate, VMState  # noqa: E402
from sova.orchestrator.openstack import OpenStackActuator  # noqa: E402
from sova.policy.vfsched import Candidate, VFSchedulerConfig, schedule  # noqa: E402

pytestmark = pytest.mark.openstack


def sdk(base_url: str, project_id: str) -> Any:
    """An openstacksdk Connection to the harness's API as an admin (Keystone is stubbed)."""
    sess = session.Session(
        auth=noauth.NoAuth(),
        additional_headers={
            "X-Auth-User": "admin",
            "X-User-Id": "admin",
            "X-Auth-Project-Id": project_id,
            "X-Roles": "reader,member,admin",
        },
    )
    return connection.Connection(session=sess, compute_endpoint_override=base_url)


class FixtureNetwork:
    """openstacksdk's network-proxy calls the actuator makes, answered by Nova's NeutronFixture.

    A real Neutron binds a ``direct`` port with ``hw_veb`` through the sriovnicswitch
    mechanism driver (tests/openstack/tier_neutron); the fixture stores what it is given, so
    the binding's vif type is filled in here as that driver would.
    """

    def __init__(self, fx: Any) -> None:
        self.fx = fx
        self.created: list[str] = []
        self.deleted: list[str] = []

    @staticmethod
    def _obj(p: dict[str, Any]) -> Any:
        return types.SimpleNamespace(
            id=p["id"],
            name=p.get("name"),
            network_id=p.get("network_id"),
            device_id=p.get("device_id") or "",
            project_id=p.get("project_id"),
            binding_vnic_type=p.get("binding:vnic_type"),
            binding_host_id=p.get("binding:host_id"),
            binding_vif_type=p.get("binding:vif_type"),
        )

    def ports(self, **query: Any) -> list[Any]:
        found = self.fx.list_ports(is_admin=True)["ports"]
        return [self._obj(p) for p in found if all(p.get(k) == v for k, v in query.items())]

    def create_port(self, **attrs: Any) -> Any:
        port = self.fx.create_port({"port": {}})["port"]
        body = {
            "network_id": attrs["network_id"],
            "project_id": attrs.get("project_id"),
            "tenant_id": attrs.get("project_id"),
            "name": attrs["name"],
            "description": attrs["description"],
            "binding:vnic_type": attrs["binding_vnic_type"],
            "binding:vif_type": "hw_veb",
            "binding:vif_details": {"vlan": 100},
            "binding:profile": {},
            "device_id": "",
            "port_security_enabled": False,
        }
        self.fx.update_port(port["id"], {"port": body})
        self.created.append(port["id"])
        return self._obj(self.fx.show_port(port["id"])["port"])

    def delete_port(self, port: Any, ignore_missing: bool = True) -> None:
        self.deleted.append(port.id)
        self.fx.delete_port(port.id)

    def find_network(self, name_or_id: str, ignore_missing: bool = True) -> Any:
        nets = self.fx.list_networks()["networks"]
        for n in nets:
            if name_or_id in (n["id"], n.get("name")):
                return types.SimpleNamespace(id=n["id"], name=n.get("name"))
        return None


def wait(act: OpenStackActuator, op_id: str, timeout_s: float = 60.0) -> OpStatus:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        st = act.poll(op_id)
        if st.state is not OpState.PENDING:
            return st
        time.sleep(0.1)
    raise AssertionError(f"operation {op_id} still pending after {timeout_s} s")


class _UnderPytest:
    """Nova's TestCase deletes every public attribute at cleanup, including the bound test
    method pytest's unittest runner removes itself afterwards; keep them (three tests)."""

    def _clear_attrs(self) -> None:
        pass


class TestLiveMigrationThroughNova(_UnderPytest, helpers.ProviderUsageBaseTestCase):
    """Three fake computes; Sova's manager chose host3, the actuator asks Nova for exactly that."""

    compute_driver = "fake.MediumFakeDriver"

    def setUp(self) -> None:
        super().setUp()
        for h in ("host1", "host2", "host3"):
            self._start_compute(h)
        self.conn = types.SimpleNamespace(
            compute=sdk(self.api_fixture.base_url, self.api.project_id).compute,
            network=FixtureNetwork(self.neutron),
        )
        self.server = self._create_server(name="vm1", host="host1", networks="none")
        self.assertEqual("host1", self.server["OS-EXT-SRV-ATTR:host"])

    def actuator(self) -> OpenStackActuator:
        return OpenStackActuator(self.conn, "host1", poll_s=0.2, migration_timeout_s=60)

    def test_migrates_to_the_chosen_host_and_placement_follows(self) -> None:
        act = self.actuator()
        st = wait(act, act.submit(Migrate("vm1", "host3")))
        assert st.state is OpState.SUCCEEDED, st.detail
        assert "completed" in st.detail
        server = self.api.get_server(self.server["id"])
        assert server["OS-EXT-SRV-ATTR:host"] == "host3"
        migs = [m for m in self.api.get_migrations() if m["instance_uuid"] == self.server["id"]]
        assert [(m["status"], m["dest_compute"]) for m in migs] == [("completed", "host3")]
        allocs = self._get_allocations_by_server_uuid(self.server["id"])
        assert set(allocs) == {self._get_provider_uuid_by_host("host3")}
        assert self._get_provider_usages(self._get_provider_uuid_by_host("host1"))["VCPU"] == 0

    def test_refused_target_leaves_the_server_on_its_source(self) -> None:
        # The target's pre-check refuses (as a host whose CPU or PCI cannot take the VM).
        from nova import exception

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise exception.MigrationPreCheckError(reason="target refused by test")

        self.stub_out("nova.virt.fake.FakeDriver.check_can_live_migrate_destination", refuse)
        act = self.actuator()
        st = wait(act, act.submit(Migrate("vm1", "host2")))
        assert st.state is OpState.FAILED
        # Nova's own verdict is in the outcome, and where the server is now.
        assert "No valid host" in st.detail and "server on 'host1'" in st.detail, st.detail
        server = self.api.get_server(self.server["id"])
        assert server["OS-EXT-SRV-ATTR:host"] == "host1"
        assert server["status"] == "ACTIVE"
        allocs = self._get_allocations_by_server_uuid(self.server["id"])
        assert set(allocs) == {self._get_provider_uuid_by_host("host1")}


class TestFastPathThroughNova(_UnderPytest, sriov._PCIServersTestBase):
    """One PF with one VF behind Nova's fake libvirt and PCI tracker; two VMs want it."""

    PCI_ALIAS: list[str] = []
    ADMIN_API = True
    microversion = "latest"  # servers without networks ("none") need >= 2.37
    PCI_DEVICE_SPEC = sriov.SRIOVAttachDetachTest.PCI_DEVICE_SPEC

    def setUp(self) -> None:
        super().setUp()
        self.neutron = self.useFixture(sriov.nova_fixtures.NeutronFixture(self))
        net2 = self.neutron.network_2
        self.neutron._networks[net2["id"]] = net2
        self.neutron._subnets[self.neutron.subnet_2["id"]] = self.neutron.subnet_2
        host_info = fakelibvirt.HostInfo(cpu_nodes=2, cpu_sockets=1, cpu_cores=2, cpu_threads=2)
        pci_info = fakelibvirt.HostPCIDevicesInfo(num_pfs=1, num_vfs=1)
        self.start_compute("compute0", host_info=host_info, pci_info=pci_info)
        self.net = FixtureNetwork(self.neutron)
        self.conn = types.SimpleNamespace(
            compute=sdk(self.api_fixture.base_url, self.api.project_id).compute,
            network=self.net,
        )
        self.vms = {
            name: self._create_server(name=name, networks="none") for name in ("vm1", "vm2")
        }
        self.act = OpenStackActuator(
            self.conn, "compute0", network=net2["id"], poll_s=0.2, detach_timeout_s=30
        )

    def sensed(self) -> Inventory:
        host = Host("compute0", 8, 16 << 30, NIC("pf0", 10e9, vf_pool=1))
        return Inventory(host, {n: VMState(VM(n, 1, 512 << 20)) for n in self.vms})

    def holder(self) -> list[str]:
        inv = self.act.reconcile(self.sensed())
        return sorted(inv.vf_holders)

    def chosen(self, net: dict[str, float], holders: dict[str, float] | None = None) -> str:
        """The VF scheduler's pick among two I/O-bound VMs for the host's one VF."""
        cands = [Candidate(vm, 80.0, net[vm], True, True) for vm in sorted(net)]
        decision = schedule(cands, holders or {}, 1, 3600.0, VFSchedulerConfig())
        [vm] = decision.pq
        return vm

    def test_direct_port_follows_the_ranking_and_exhaustion_is_reported(self) -> None:
        first = self.chosen({"vm1": 0.9, "vm2": 0.1})
        assert first == "vm1"
        st = wait(self.act, self.act.submit(AttachVF(first)))
        assert st.state is OpState.SUCCEEDED, st.detail
        port = self.neutron.show_port(self.net.created[0])["port"]
        assert port["binding:host_id"] == "compute0"
        assert port["device_id"] == self.vms["vm1"]["id"]
        assert port["binding:vnic_type"] == "direct"
        assert port["network_id"] == self.neutron.network_2["id"]
        assert self.holder() == ["vm1"]
        self.assertPCIDeviceCounts("compute0", total=2, free=0)  # the PF and its one VF

        # The one VF is taken: Nova's PCI claim fails, the actuator reports it, no port leaks.
        st = wait(self.act, self.act.submit(AttachVF("vm2")))
        assert st.state is OpState.FAILED
        assert st.detail.startswith("no VF left on compute0 for vm2"), st.detail
        assert self.net.created[1] in self.net.deleted
        assert self.holder() == ["vm1"]

        # The ranking changes: the VF moves (detach + delete, then attach to the new pick).
        second = self.chosen({"vm1": 0.1, "vm2": 0.9}, holders={"vm1": 0.0})
        assert second == "vm2"
        st = wait(self.act, self.act.submit(DetachVF("vm1")))
        assert st.state is OpState.SUCCEEDED, st.detail
        assert self.net.created[0] in self.net.deleted
        st = wait(self.act, self.act.submit(AttachVF(second)))
        assert st.state is OpState.SUCCEEDED, st.detail
        assert self.holder() == ["vm2"]


def test_sova_is_imported_from_this_checkout() -> None:
    """The tier's environments are shared by every checkout on the machine: the code under
    test must be this checkout's (scripts/openstack-envs.sh puts its src/ first on the path),
    never the one an earlier run installed."""
    import pathlib

    import sova

    here = pathlib.Path(__file__).resolve().parents[3] / "src"
    imported = pathlib.Path(sova.__file__).resolve()
    assert imported.is_relative_to(here), f"sova imported from {imported}, not from {here}"
