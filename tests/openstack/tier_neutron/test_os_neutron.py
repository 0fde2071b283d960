"""The ports Sova creates, against Neutron's ML2 plugin with ``sriovnicswitch`` (neutron env).

The request body is the one openstacksdk sends for the actuator's port attributes
(:func:`sova.orchestrator.openstack.vf_port_attrs`); it goes through Neutron's API (policy
included) to ML2 with the real SR-IOV mechanism driver. Nova's part of an interface attach
(setting ``binding:host_id`` and the PCI profile, with the service role) is done here as Nova
does it, so the test shows the port binds ``hw_veb`` on the host Sova intended, and fails to
bind on a host without the SR-IOV agent.

Run with ``scripts/openstack-envs.sh test neutron``.
"""

from __future__ import annotations

from typing import Any

import pytest

plugin_tests = pytest.importorskip(
    "neutron.tests.unit.plugins.ml2.test_plugin",
    reason="needs the pinned neutron environment: scripts/openstack-envs.sh test neutron",
)

from neutron.tests.common import helpers  # noqa: E402
from openstack.network.v2.network import Network  # noqa: E402
from openstack.network.v2.port import Port  # noqa: E402

from sova.orchestrator.openstack import PORT_PREFIX, vf_port_attrs  # noqa: E402

pytestmark = pytest.mark.openstack

PCI_PROFILE = {
    "pci_vendor_info": "8086:154c",
    "pci_slot": "0000:81:10.2",
    "physical_network": "physnet1",
}


class TestSovaPortsOnSriovNicSwitch(plugin_tests.Ml2PluginV2TestCase):
    _mechanism_drivers = ["logger", "sriovnicswitch"]

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
