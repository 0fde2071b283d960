"""Sova's Neutron calls through a real Keystone and keystonemiddleware in front of Neutron
(the OpenStack tier, neutron env).

Keystone runs in its own process and environment (tests/openstack/keystone_server.py, the
keystone env's interpreter, as for tier_nova's agent behind keystonemiddleware), set up as
docs/openstack.md#credentials-roles-and-policies says: the ``sova`` user holding ``admin`` and
``sova`` in ``service``, an application credential with both roles and the shipped access
rules, and a second one with ``sova`` alone and no rules. Neutron's API (its WSGI app on the
ML2 plugin with ``sriovnicswitch``, port security, tags, SQLite) is served on a loopback
port as its api-paste.ini composes it: ``/`` the versions document without authentication,
``/v2.0`` behind keystonemiddleware's ``auth_token`` (``service_type = network``) validating
against that Keystone, then Neutron's own keystone context middleware, with the shipped
deploy/openstack/neutron-policy-sova.yaml as Neutron's policy file. Sova's ``connect`` reads
both credentials from a clouds.yaml entry; Nova's side of an attach (tier_neutron's
``NovaPortSide``) is Keystone's ``nova`` user (``admin`` and ``service``).

Run with ``scripts/openstack-envs.sh test neutron``.
"""

from __future__ import annotations

import pathlib
import sys
from types import SimpleNamespace
from typing import Any

import pytest

plugin_tests = pytest.importorskip(
    "neutron.tests.unit.plugins.ml2.test_plugin",
    reason="needs the pinned neutron environment: scripts/openstack-envs.sh test neutron",
)

import fixtures  # noqa: E402  (the neutron environment's; after the skip)
from neutron.tests.common import helpers  # noqa: E402
from test_os_neutron import NovaPortSide, serve_neutron_api, vlan_network  # noqa: E402

from sova.orchestrator.openstack_cloud import SOVA_TAG, vf_port_attrs  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from keystone_server import OneKeystone  # noqa: E402  (shared with tier_nova)

pytestmark = pytest.mark.openstack

SHIPPED = pathlib.Path(__file__).resolve().parents[3] / "deploy/openstack"


def matches_rule(method: str, path: str, rules: list[dict[str, str]]) -> bool:
    """keystonemiddleware's match of a request against access rules ('*' one segment)."""
    parts = path.split("/")
    for rule in rules:
        want = rule["path"].split("/")
        same = rule["method"] == method and len(want) == len(parts)
        if same and all(w in ("*", p) for w, p in zip(want, parts, strict=True)):
            return True
    return False


class TestSovaThroughKeystoneInFrontOfNeutron(OneKeystone, plugin_tests.Ml2PluginV2TestCase):
    """One Keystone for the class (its set-up is most of the time); Neutron, its database and
    policy anew for each test."""

    _mechanism_drivers = ["logger", "sriovnicswitch"]

    def get_additional_service_plugins(self) -> dict[str, str]:
        return {"tag": "tag"}  # Sova's ports carry the tag "sova-vf"

    def setUp(self) -> None:
        from neutron import policy
        from oslo_config import cfg

        cfg.CONF.set_override("extension_drivers", ["port_security"], group="ml2")
        super().setUp()
        helpers.register_sriovnicswitch_agent(host="cmp1", device_mappings={"physnet1": ["ens1f0"]})
        # The shipped fragment as Neutron's policy file: every rule not in it keeps
        # Neutron's default, as when an operator merges it into /etc/neutron/policy.yaml.
        policy.refresh(policy_file=str(SHIPPED / "neutron-policy-sova.yaml"))
        self.seen: list[tuple[str, str, str]] = []  # (method, path, roles) Neutron acted on
        url = serve_neutron_api(self, self.behind_keystonemiddleware)
        ks = self.keystone.info
        clouds = self.keystone.clouds_yaml("network", url)
        self.useFixture(fixtures.EnvironmentVariable("OS_CLIENT_CONFIG_FILE", str(clouds)))
        import openstack
        from sova.orchestrator.openstack import connect

        self.sova = connect("sova", api_timeout_s=30).network
        self.sova_only = connect("sova-only", api_timeout_s=30).network

        def user(name: str, project: str) -> Any:
            return openstack.connect(
                auth_url=ks["url"],
                username=name,
                password=ks[f"{name}_password"],
                project_name=project,
                user_domain_name="Default",
                project_domain_name="Default",
                network_endpoint_override=url,
                api_timeout=30,
            ).network

        self.admin = user("admin", "admin")  # the cloud admin: networks, ports of tenants
        self.nova = user("nova", "service")  # Nova's [neutron] client: binds ports

    def behind_keystonemiddleware(self, neutron: Any) -> Any:
        """Neutron's /v2.0 pipeline behind auth_token (``service_type = network``), each
        request it passes recorded in ``seen``."""

        def record(environ: dict[str, Any], start_response: Any) -> Any:
            path = environ["SCRIPT_NAME"] + environ["PATH_INFO"]
            self.seen.append((environ["REQUEST_METHOD"], path, environ.get("HTTP_X_ROLES", "")))
            return neutron(environ, start_response)

        return self.keystone.auth_token(record, "network")

    def test_sovas_neutron_calls_pass_on_the_access_ruled_credential_and_nothing_else(
        self,
    ) -> None:
        """The actuator's VF grant and take-back through Neutron (network read, port list,
        create with the address pair, tag, delete) on the credential with the shipped access
        rules: each call Neutron saw is one the rules list, with the credential's roles. A
        Neutron call outside the rules is 401 from auth_token, and Neutron never sees it."""
        import json

        from openstack import exceptions as sdk_exc
        from sova.driver.base import OpState
        from sova.model import NIC, VM, AttachVF, DetachVF, Host, Inventory, VMState
        from sova.orchestrator.openstack import OpenStackActuator

        net = vlan_network(self.admin, self._project_id, cidr="192.0.2.0/24")
        sid = "9a1c5c8e-0000-4000-8000-000000000011"
        virtio = self.admin.create_port(
            network_id=net.id, device_id=sid, project_id=self._project_id
        )
        nova = NovaPortSide(self.nova, "cmp1", {"vm1": sid}, self._project_id)
        act = OpenStackActuator(
            SimpleNamespace(network=self.sova, compute=nova),
            "cmp1",
            network="sriov-data",
            spawn=lambda fn: fn(),
            poll_s=0.05,
        )
        sensed = Inventory(
            Host("cmp1", 8, 16 << 30, NIC("pf0", 10e9, vf_pool=1)),
            {"vm1": VMState(VM("vm1", 1, 512 << 20))},
        )
        self.seen.clear()
        assert act.reconcile(sensed).vf_holders == frozenset()
        st = act.poll(act.submit(AttachVF("vm1")))
        assert st.state is OpState.SUCCEEDED, st.detail
        [port] = [p for p in self.admin.ports(device_id=sid) if p.id != virtio.id]
        assert port.binding_vif_type == "hw_veb" and port.tags == [SOVA_TAG]
        ip = virtio.fixed_ips[0]["ip_address"]
        assert [a["ip_address"] for a in port.allowed_address_pairs] == [ip]
        assert act.reconcile(sensed).vf_holders == frozenset({"vm1"})
        st = act.poll(act.submit(DetachVF("vm1")))
        assert st.state is OpState.SUCCEEDED, st.detail
        assert [p.id for p in self.admin.ports(network_id=net.id)] == [virtio.id]

        rules = json.loads((SHIPPED / "sova-access-rules.json").read_text())
        network_rules = [r for r in rules if r["service"] == "network"]
        sovas = [(m, p) for m, p, roles in self.seen if "sova" in roles.split(",")]
        for call in (
            ("GET", "/v2.0/ports"),
            ("POST", "/v2.0/ports"),
            ("PUT", f"/v2.0/ports/{port.id}/tags/{SOVA_TAG}"),
            ("DELETE", f"/v2.0/ports/{port.id}"),
        ):
            assert call in sovas, sovas
        assert any(p.startswith("/v2.0/networks") for m, p in sovas if m == "GET"), sovas
        outside = [(m, p) for m, p in sovas if not matches_rule(m, p, network_rules)]
        assert outside == [], outside
        for _, _, roles in self.seen:  # the credential's roles, or the admin's or Nova's
            assert "admin" in roles.split(","), roles

        before = len(self.seen)
        for call in (
            lambda: self.sova.create_network(name="not-sovas"),
            lambda: list(self.sova.subnets()),
            lambda: self.sova.update_port(virtio.id, name="renamed"),
        ):
            with pytest.raises(sdk_exc.HttpException) as err:
                call()
            assert err.value.status_code == 401, err.value
        assert len(self.seen) == before  # Neutron never saw them
        assert self.admin.get_port(virtio.id).name == virtio.name

    def test_sova_role_alone_is_judged_by_neutrons_policy_on_keystones_token(self) -> None:
        """The credential with ``sova`` alone and no access rules: auth_token passes every
        call to Neutron, whose policy (the shipped fragment on Neutron's defaults) judges the
        token's roles. In its own project (``service``) Sova's port calls pass: the network's
        type read, the ``direct`` port with an address pair and no fixed IP created, tagged,
        listed and deleted. A call outside the fragment (creating a network) is 403 from
        Neutron's policy, which saw it. And what no policy grants: another project's network
        is 404 and its ports are not listed to this token
        (docs/openstack.md#credentials-roles-and-policies)."""
        from neutron import policy

        from openstack import exceptions as sdk_exc

        service = self.keystone.info["project_id"]
        own = vlan_network(self.admin, service, "sova-own")
        theirs = vlan_network(self.admin, self._project_id, "tenant-data", vlan=43)
        tenant_port = self.admin.create_port(network_id=theirs.id, project_id=self._project_id)

        policy.refresh()  # Neutron's defaults alone: the role is no reader of its network
        with pytest.raises(sdk_exc.NotFoundException):
            self.sova_only.get_network(own.id)
        policy.refresh(policy_file=str(SHIPPED / "neutron-policy-sova.yaml"))

        assert self.sova_only.get_network(own.id).provider_network_type == "vlan"
        port = self.sova_only.create_port(
            **vf_port_attrs("vm1", own.id, service, ("192.0.2.10",), "cmp1")
        )
        assert port.binding_vnic_type == "direct" and port.fixed_ips == []
        assert [a["ip_address"] for a in port.allowed_address_pairs] == ["192.0.2.10"]
        self.sova_only.add_tag(port, SOVA_TAG)
        assert [p.id for p in self.sova_only.ports(tags=SOVA_TAG)] == [port.id]
        self.sova_only.delete_port(port)
        assert list(self.admin.ports(network_id=own.id)) == []

        with pytest.raises(sdk_exc.ForbiddenException) as err:
            self.sova_only.create_network(name="not-sovas")
        # Neutron's policy refusal names its rule; auth_token's would be a 401 it never saw.
        assert "create_network is disallowed by policy" in str(err.value), err.value
        assert ("POST", "/v2.0/networks", "sova") in self.seen

        with pytest.raises(sdk_exc.NotFoundException):
            self.sova_only.get_network(theirs.id)
        assert list(self.sova_only.ports(network_id=theirs.id)) == []
        assert [p.id for p in self.admin.ports(network_id=theirs.id)] == [tenant_port.id]
        assert {roles for _, _, roles in self.seen if "admin" not in roles} == {"sova"}
