"""The ports Sova creates, against Neutron's ML2 plugin with ``sriovnicswitch`` (neutron env).

The request body is the one openstacksdk sends for the actuator's port attributes
(:func:`sova.orchestrator.openstack_cloud.vf_port_attrs`); it goes through Neutron's API (policy
included) to ML2 with the real SR-IOV mechanism driver. Nova's part of an interface attach
(setting ``binding:host_id`` and the PCI profile, with the service role) is done here as Nova
does it, so the test shows the port binds ``hw_veb`` on the host Sova intended, and fails to
bind on a host without the SR-IOV agent.

Run with ``scripts/openstack-envs.sh test neutron``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

plugin_tests = pytest.importorskip(
    "neutron.tests.unit.plugins.ml2.test_plugin",
    reason="needs the pinned neutron environment: scripts/openstack-envs.sh test neutron",
)

from neutron.tests.common import helpers  # noqa: E402
from openstack.network.v2.network import Network  # noqa: E402
from openstack.network.v2.port import Port  # noqa: E402

from sova.orchestrator.openstack_cloud import PORT_PREFIX, SOVA_TAG, vf_port_attrs  # noqa: E402

pytestmark = pytest.mark.openstack

PCI_PROFILE = {
    "pci_vendor_info": "8086:154c",
    "pci_slot": "0000:81:10.2",
    "physical_network": "physnet1",
}


class TestSovaPortsOnSriovNicSwitch(plugin_tests.Ml2PluginV2TestCase):
    _mechanism_drivers = ["logger", "sriovnicswitch"]

    def get_additional_service_plugins(self) -> dict[str, str]:
        # Neutron loads its tag plugin by default; its unit-test base does not (Sova's ports
        # carry the tag "sova-vf").
        return {"tag": "tag"}

    def setUp(self) -> None:
        from oslo_config import cfg

        # As deployed: port security on, so address pairs are checked against it.
        cfg.CONF.set_override("extension_drivers", ["port_security"], group="ml2")
        super().setUp()
        helpers.register_sriovnicswitch_agent(host="cmp1", device_mappings={"physnet1": ["ens1f0"]})

    def _json(self, req: Any, status: int) -> dict[str, Any]:
        res = req.get_response(self.api)
        assert res.status_int == status, res.body
        out: dict[str, Any] = self.deserialize("json", res)
        return out

    def vlan_network(self) -> dict[str, Any]:
        body = {
            "network": {
                "name": "sriov-data",
                "provider:network_type": "vlan",
                "provider:physical_network": "physnet1",
                "provider:segmentation_id": 42,
                "tenant_id": self._project_id,
            }
        }
        return self._json(self.new_create_request("networks", body, as_admin=True), 201)["network"]

    def sova_port(self, network_id: str, addresses: tuple[str, ...] = ()) -> dict[str, Any]:
        attrs = vf_port_attrs("vm1", network_id, self._project_id, addresses)
        # The exact body openstacksdk POSTs for create_port(**attrs).
        body = Port(**attrs)._prepare_request(requires_id=False, prepend_key=True).body
        assert body["port"]["binding:vnic_type"] == "direct"
        return self._json(self.new_create_request("ports", body, as_admin=True), 201)["port"]

    def nova_binds(self, port_id: str, host: str) -> dict[str, Any]:
        body = {"port": {"binding:host_id": host, "binding:profile": PCI_PROFILE}}
        req = self.new_update_request("ports", body, port_id, as_service=True)
        return self._json(req, 200)["port"]

    def test_sova_port_binds_hw_veb_on_the_intended_host(self) -> None:
        net = self.vlan_network()
        port = self.sova_port(net["id"])
        assert port["name"] == PORT_PREFIX + "vm1"
        assert port["binding:vnic_type"] == "direct"
        assert port["binding:vif_type"] == "unbound"
        bound = self.nova_binds(port["id"], "cmp1")
        assert bound["binding:host_id"] == "cmp1"
        assert bound["binding:vif_type"] == "hw_veb"
        assert str(bound["binding:vif_details"]["vlan"]) == "42"

    def test_sova_port_may_carry_the_virtio_ports_address_on_the_same_vlan(self) -> None:
        """The actuator reads the network's type through openstacksdk (Neutron's own reply
        parsed by the SDK's Network resource) and gives its port the virtio port's IP as an
        address pair: Neutron accepts that with port security on, and it still binds."""
        net = self.vlan_network()
        assert Network(**net).provider_network_type == "vlan"
        subnet = {
            "subnet": {
                "network_id": net["id"],
                "cidr": "192.0.2.0/24",
                "ip_version": 4,
                "tenant_id": self._project_id,
            }
        }
        self._json(self.new_create_request("subnets", subnet, as_admin=True), 201)
        virtio = {"port": {"network_id": net["id"], "tenant_id": self._project_id}}
        vport = self._json(self.new_create_request("ports", virtio, as_admin=True), 201)["port"]
        ip = vport["fixed_ips"][0]["ip_address"]
        port = self.sova_port(net["id"], (ip,))
        assert port["allowed_address_pairs"] == [
            {"ip_address": ip, "mac_address": port["mac_address"]}
        ]
        assert port["port_security_enabled"] is True
        assert port["mac_address"] != vport["mac_address"]  # the VF keeps its own MAC
        assert port["fixed_ips"] == []  # no spare address: the pair is all the guest uses
        assert self.nova_binds(port["id"], "cmp1")["binding:vif_type"] == "hw_veb"

    def test_sova_port_does_not_bind_where_no_sriov_agent_runs(self) -> None:
        net = self.vlan_network()
        port = self.sova_port(net["id"])
        bound = self.nova_binds(port["id"], "cmp2")
        assert bound["binding:vif_type"] == "binding_failed"


def test_sova_is_imported_from_this_checkout() -> None:
    """The tier's environments are shared by every checkout on the machine: the code under
    test must be this checkout's (scripts/openstack-envs.sh puts its src/ first on the path),
    never the one an earlier run installed."""
    import pathlib

    import sova

    here = pathlib.Path(__file__).resolve().parents[3] / "src"
    imported = pathlib.Path(sova.__file__).resolve()
    assert imported.is_relative_to(here), f"sova imported from {imported}, not from {here}"


# --------------------------------------------------------------------------- over HTTP


class NovaPortSide:
    """Stand-in for Nova's compute API, limited to what Nova does to Neutron on an interface
    attach/detach: it updates the port over HTTP (binding host, PCI profile, device id and
    owner on attach; all cleared on detach) through its own openstacksdk connection, as Nova's
    Neutron client does. Nova itself (scheduling, PCI claim, libvirt XML) is tier_nova's."""

    def __init__(self, neutron: Any, host: str, servers: dict[str, str], project_id: str):
        self.neutron, self.host = neutron, host
        self.by_name = {
            name: SimpleNamespace(
                id=sid,
                name=name,
                project_id=project_id,
                compute_host=host,
                task_state=None,
                instance_name=f"instance-{name}",
            )
            for name, sid in servers.items()
        }
        self.calls: list[tuple[str, str]] = []

    def servers(self, **_: Any) -> list[Any]:
        return list(self.by_name.values())

    def find_server(self, name_or_id: str, ignore_missing: bool = True, **_: Any) -> Any:
        return next(
            (s for s in self.by_name.values() if name_or_id in (s.id, s.name)),
            None,
        )

    def get_server(self, sid: str) -> Any:
        return next(s for s in self.by_name.values() if s.id == sid)

    def create_server_interface(self, server: Any, port_id: str) -> Any:
        self.calls.append(("attach", port_id))
        self.neutron.update_port(
            port_id,
            **{
                "binding:host_id": self.host,
                "binding:profile": PCI_PROFILE,
                "device_id": server.id,
                "device_owner": "compute:nova",
            },
        )
        return SimpleNamespace(port_id=port_id)

    def delete_server_interface(self, port_id: str, server: str) -> None:
        self.calls.append(("detach", port_id))
        self.neutron.update_port(
            port_id,
            **{"binding:host_id": "", "binding:profile": {}, "device_id": "", "device_owner": ""},
        )

    def server_interfaces(self, sid: str) -> list[Any]:
        return [SimpleNamespace(port_id=p.id) for p in self.neutron.ports(device_id=sid)]


def serve_neutron_api(case: Any, pipeline: Callable[[Any], Any] | None = None) -> str:
    """Serve ``case.api`` (the test case's Neutron API on its ML2 plugin) over HTTP on a
    loopback port until the test ends, and return its URL. ``pipeline`` wraps the
    authenticated part (``/v2.0``, from Neutron's keystone context middleware on) as
    api-paste.ini's would: keystonemiddleware's ``auth_token`` where a real Keystone runs."""
    import threading
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from neutron.auth import NeutronKeystoneContext
    from neutron.pecan_wsgi.app import versions_factory

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    # The keystone pipeline's context middleware: the request's identity comes from the
    # X-* headers keystonemiddleware sets (without ``pipeline`` each client sets its own:
    # Keystone is the one stand-in), so Neutron's policy rules judge Sova's and Nova's calls apart.
    api, versions = NeutronKeystoneContext(case.api), versions_factory({})
    if pipeline is not None:
        api = pipeline(api)

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        # Neutron's api-paste.ini composite: "/" its versions document (openstacksdk's
        # version discovery), "/v2.0" the API (here the test case's, on the ML2 plugin), which
        # sees its mount point as SCRIPT_NAME (auth_token matches access rules on the whole path).
        path = environ.get("PATH_INFO", "")
        if path.startswith("/v2.0"):
            environ["SCRIPT_NAME"] = "/v2.0"
            environ["PATH_INFO"] = path[len("/v2.0") :] or "/"
            return api(environ, start_response)
        return versions(environ, start_response)

    httpd = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    case.addCleanup(httpd.server_close)
    case.addCleanup(httpd.shutdown)
    return f"http://127.0.0.1:{httpd.server_port}/"


def vlan_network(
    sdk: Any, project_id: str, name: str = "sriov-data", vlan: int = 42, cidr: str | None = None
) -> Any:
    """A VLAN provider network on ``physnet1`` (what sriovnicswitch binds) in ``project_id``,
    made through ``sdk`` (an admin's), with an IPv4 subnet on ``cidr`` where given."""
    net = sdk.create_network(
        name=name,
        provider_network_type="vlan",
        provider_physical_network="physnet1",
        provider_segmentation_id=vlan,
        project_id=project_id,
    )
    if cidr is not None:
        sdk.create_subnet(network_id=net.id, cidr=cidr, ip_version=4, project_id=project_id)
    return net


def sdk_client(url: str, user: str, roles: str, project: str = "service") -> Any:
    """An openstacksdk network proxy on ``url`` acting as ``user`` with ``roles``."""
    from keystoneauth1 import noauth, session

    from openstack import connection

    headers = {"X-User-Id": user, "X-Project-Id": project, "X-Roles": roles}
    sess = session.Session(auth=noauth.NoAuth(), additional_headers=headers)
    return connection.Connection(session=sess, network_endpoint_override=url).network


class TestSovaNetworkCallsOverHTTP(plugin_tests.Ml2PluginV2TestCase):
    """Neutron's API (its WSGI application with the real ML2 plugin, sriovnicswitch, port
    security, SQLite) served over HTTP on a loopback port; Sova's actuator reaches it with a
    real openstacksdk Connection: ``get_network`` (the configured name and the type),
    ``ports(device_id=…)``, ``ports(binding:host_id=…)``, ``create_port``, ``delete_port``."""

    _mechanism_drivers = ["logger", "sriovnicswitch"]

    def get_additional_service_plugins(self) -> dict[str, str]:
        # Neutron loads its tag plugin by default; its unit-test base does not (Sova's ports
        # carry the tag "sova-vf").
        return {"tag": "tag"}

    def setUp(self) -> None:
        from oslo_config import cfg

        cfg.CONF.set_override("extension_drivers", ["port_security"], group="ml2")
        super().setUp()
        helpers.register_sriovnicswitch_agent(host="cmp1", device_mappings={"physnet1": ["ens1f0"]})
        url = serve_neutron_api(self)
        self.sdk = sdk_client(url, "sova", "admin,member,reader")
        self.nova_sdk = sdk_client(url, "nova", "admin,service")  # Nova's Neutron client
        self.tenant_sdk = sdk_client(url, "tenant", "member,reader", self._project_id)

    def test_vf_port_created_bound_found_and_deleted_through_neutrons_http_api(self) -> None:
        from sova.driver.base import OpState
        from sova.model import NIC, VM, AttachVF, DetachVF, Host, Inventory, VMState
        from sova.orchestrator.openstack import OpenStackActuator

        net = vlan_network(self.sdk, self._project_id, cidr="192.0.2.0/24")
        sid = "9a1c5c8e-0000-4000-8000-000000000001"
        virtio = self.sdk.create_port(network_id=net.id, device_id=sid, project_id=self._project_id)
        nova = NovaPortSide(self.nova_sdk, "cmp1", {"vm1": sid}, self._project_id)
        conn = SimpleNamespace(network=self.sdk, compute=nova)
        act = OpenStackActuator(
            conn, "cmp1", network="sriov-data", spawn=lambda fn: fn(), poll_s=0.05
        )
        sensed = Inventory(
            Host("cmp1", 8, 16 << 30, NIC("pf0", 10e9, vf_pool=1)),
            {"vm1": VMState(VM("vm1", 1, 512 << 20))},
        )
        assert act.reconcile(sensed).vf_holders == frozenset()

        st = act.poll(act.submit(AttachVF("vm1")))
        assert st.state is OpState.SUCCEEDED, st.detail
        [port] = [p for p in self.sdk.ports(device_id=sid) if p.id != virtio.id]
        # What Neutron's ML2 made of it: bound hw_veb on VLAN 42 by sriovnicswitch.
        assert port.name == PORT_PREFIX + "vm1" and port.binding_vnic_type == "direct"
        assert port.binding_host_id == "cmp1" and port.binding_vif_type == "hw_veb"
        assert str(port.binding_vif_details["vlan"]) == "42"
        assert port.network_id == net.id
        ip = virtio.fixed_ips[0]["ip_address"]
        assert [a["ip_address"] for a in port.allowed_address_pairs] == [ip]
        assert port.is_port_security_enabled and port.fixed_ips == []
        assert port.tags == [SOVA_TAG]  # Sova's mark, as Neutron stored it
        # Reconcile reads the holder back from Neutron (ports by binding:host_id).
        assert act.reconcile(sensed).vf_holders == frozenset({"vm1"})

        st = act.poll(act.submit(DetachVF("vm1")))
        assert st.state is OpState.SUCCEEDED, st.detail
        assert nova.calls == [("attach", port.id), ("detach", port.id)]
        assert [p.id for p in self.sdk.ports(network_id=net.id)] == [virtio.id]
        assert act.reconcile(sensed).vf_holders == frozenset()

    def test_tenants_own_direct_port_is_not_sovas_and_shrinks_its_pool(self) -> None:
        """A tenant's direct port on the same host (made by the tenant through Neutron, named
        like Sova's, bound hw_veb by Nova's side): Sova's pool is the PF's VFs less it, the
        VM is no Sova VF holder, and a revoke fails and leaves the port bound."""
        from sova.driver.base import OpState
        from sova.model import NIC, VM, DetachVF, Host, Inventory, NicKind, VMState
        from sova.orchestrator.openstack import OpenStackActuator

        net = vlan_network(self.sdk, self._project_id)
        sid = "9a1c5c8e-0000-4000-8000-000000000003"
        self.sdk.create_port(network_id=net.id, device_id=sid, project_id=self._project_id)
        theirs = self.tenant_sdk.create_port(
            network_id=net.id, name=PORT_PREFIX + "vm3", binding_vnic_type="direct"
        )
        nova = NovaPortSide(self.nova_sdk, "cmp1", {"vm3": sid}, self._project_id)
        nova.create_server_interface(nova.by_name["vm3"], theirs.id)
        assert self.sdk.get_port(theirs.id).binding_vif_type == "hw_veb"
        act = OpenStackActuator(
            SimpleNamespace(network=self.sdk, compute=nova), "cmp1", spawn=lambda fn: fn()
        )
        sensed = Inventory(
            Host("cmp1", 8, 16 << 30, NIC("pf0", 10e9, vf_pool=4)),
            {"vm3": VMState(VM("vm3", 1, 512 << 20), nic=NicKind.VF)},
        )
        inv = act.reconcile(sensed)
        assert inv.host.nic.vf_pool == 3  # 4 VFs - the tenant's 1
        assert inv.vf_holders == frozenset() and not inv.vms["vm3"].failover_ready
        st = act.poll(act.submit(DetachVF("vm3")))
        assert st.state is OpState.FAILED and "not Sova's" in st.detail, st.detail
        assert nova.calls == [("attach", theirs.id)]
        kept = self.sdk.get_port(theirs.id)
        assert kept.device_id == sid and kept.binding_host_id == "cmp1"

    def test_vf_refused_on_an_overlay_network_and_no_port_left(self) -> None:
        """A server whose only port is on a VXLAN network (Neutron's own network type, read by
        openstacksdk): sriovnicswitch could not bind a VF there, so Sova creates nothing."""
        from sova.driver.base import OpState
        from sova.model import AttachVF
        from sova.orchestrator.openstack import OpenStackActuator

        net = self.sdk.create_network(
            name="tenant-overlay",
            provider_network_type="vxlan",
            provider_segmentation_id=1001,
            project_id=self._project_id,
        )
        assert self.sdk.get_network(net.id).provider_network_type == "vxlan"
        sid = "9a1c5c8e-0000-4000-8000-000000000002"
        self.sdk.create_port(network_id=net.id, device_id=sid, project_id=self._project_id)
        nova = NovaPortSide(self.nova_sdk, "cmp1", {"vm2": sid}, self._project_id)
        act = OpenStackActuator(
            SimpleNamespace(network=self.sdk, compute=nova), "cmp1", spawn=lambda fn: fn()
        )
        st = act.poll(act.submit(AttachVF("vm2")))
        assert st.state is OpState.FAILED
        assert "is 'vxlan': sriovnicswitch binds only vlan and flat" in st.detail, st.detail
        assert nova.calls == []
        assert len(list(self.sdk.ports(network_id=net.id))) == 1  # the server's own port only
