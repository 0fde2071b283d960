"""Sova's agent through a real Keystone and keystonemiddleware in front of Nova (the OpenStack
tier, nova env).

Keystone runs in its own process and environment (tests/openstack/keystone_server.py, the
keystone env's interpreter), set up as docs/openstack.md#credentials-roles-and-policies says:
the ``sova`` user holding ``admin`` and ``sova`` in ``service``, an application credential
with both roles and the shipped access rules, and a second with ``sova`` alone and no rules
(judged by Nova's policy with the shipped fragment). Nova's compute API (the harness's) is served on
a loopback socket behind keystonemiddleware's ``auth_token`` validating against that Keystone
(``service_type = compute``), and Nova builds its request context from what ``auth_token``
validated (Nova's own ``NovaKeystoneContext``, not the harness's header stand-in). Sova's
``connect`` reads the credentials from clouds.yaml entries. Neutron is Nova's NeutronFixture
here; Neutron behind keystonemiddleware is tier_neutron's test_os_neutron_keystone.py.

Run with ``scripts/openstack-envs.sh test nova``.
"""

from __future__ import annotations

import pathlib
import sys
import threading
import types
from typing import Any

import pytest

helpers = pytest.importorskip(
    "nova.tests.functional.integrated_helpers",
    reason="needs the pinned nova environment: scripts/openstack-envs.sh test nova",
)

import fixtures  # noqa: E402  (the nova environment's; after the skip)
from nova.api import auth as nova_auth  # noqa: E402
from test_os_nova import FixtureNetwork, _UnderPytest, wait  # noqa: E402

from sova.driver.base import OpState  # noqa: E402
from sova.model import NIC, VM, Host, Inventory, Migrate, VMState  # noqa: E402
from sova.orchestrator.openstack import OpenStackActuator, connect  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from keystone_server import OneKeystone  # noqa: E402  (shared with tier_neutron)

pytestmark = pytest.mark.openstack

# Nova's own context from keystonemiddleware's headers, kept before the harness stubs it.
REAL_CREATE_CONTEXT = nova_auth.NovaKeystoneContext._create_context


class TestAgentThroughKeystone(_UnderPytest, OneKeystone, helpers.ProviderUsageBaseTestCase):
    """Three fake computes, vm1 on host1 in a tenant's project; Sova's agent for host1 with
    the application credential."""

    compute_driver = "fake.MediumFakeDriver"

    def setUp(self) -> None:
        super().setUp()
        for h in ("host1", "host2", "host3"):
            self._start_compute(h)
        self.server = self._create_server(name="vm1", host="host1", networks="none")
        self.seen: list[tuple[str, str, str]] = []  # (method, path, roles) Nova acted on
        url = self.serve_behind_keystonemiddleware()
        clouds = self.keystone.clouds_yaml("compute", url)
        self.useFixture(fixtures.EnvironmentVariable("OS_CLIENT_CONFIG_FILE", str(clouds)))
        self.sdk = connect("sova", api_timeout_s=30)

    def serve_behind_keystonemiddleware(self) -> str:
        """Nova's compute API on a loopback socket behind auth_token; its base URL."""
        from wsgiref.simple_server import WSGIRequestHandler, make_server

        from nova.api import wsgi

        class Quiet(WSGIRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

        harness_ctx = nova_auth.NovaKeystoneContext._create_context

        def create_context(env: dict[str, Any], **kwargs: Any) -> Any:
            # A request auth_token validated gets Nova's real context (its roles, is_admin
            # from Nova's policy); the harness's own clients keep the stand-in.
            if env.get("HTTP_X_IDENTITY_STATUS") == "Confirmed":
                return REAL_CREATE_CONTEXT(env, **kwargs)
            return harness_ctx(env, **kwargs)

        self.stub_out("nova.api.auth.NovaKeystoneContext._create_context", create_context)
        nova = wsgi.Loader().load_app("osapi_compute")

        def record(environ: dict[str, Any], start_response: Any) -> Any:
            self.seen.append(
                (environ["REQUEST_METHOD"], environ["PATH_INFO"], environ.get("HTTP_X_ROLES", ""))
            )
            return nova(environ, start_response)

        app = self.keystone.auth_token(record, "compute")
        httpd = make_server("127.0.0.1", 0, app, handler_class=Quiet)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        self.addCleanup(httpd.server_close)
        self.addCleanup(httpd.shutdown)
        return f"http://127.0.0.1:{httpd.server_port}/v2.1"

    def test_agent_lists_and_migrates_with_keystones_token_and_nothing_else(self) -> None:
        """The agent's inventory and a live migration go through on the credential's token
        (Nova saw the roles Keystone gave it); a call outside the access rules is refused
        by keystonemiddleware (401) before Nova sees it, whatever the roles."""
        from openstack import exceptions as sdk_exc

        conn = types.SimpleNamespace(compute=self.sdk.compute, network=FixtureNetwork(self.neutron))
        act = OpenStackActuator(conn, "host1", poll_s=0.2, migration_timeout_s=60)
        host = Host("host1", 8, 16 << 30, NIC("pf0", 10e9, vf_pool=0))
        inv = act.reconcile(Inventory(host, {"vm1": VMState(VM("vm1", 1, 512 << 20))}))
        assert inv.vms["vm1"].running, act.discrepancies
        st = wait(act, act.submit(Migrate("vm1", "host3")))
        assert st.state is OpState.SUCCEEDED, st.detail
        assert self.api.get_server(self.server["id"])["OS-EXT-SRV-ATTR:host"] == "host3"
        acted = {(m, p) for m, p, _ in self.seen}
        assert ("GET", "/v2.1/servers/detail") in acted
        assert ("POST", f"/v2.1/servers/{self.server['id']}/action") in acted
        # Keystone's token: the credential's roles and those admin implies (Keystone's
        # bootstrap: admin > manager > member > reader), nothing else.
        implied = {"admin", "sova", "manager", "member", "reader"}
        for _, _, roles in self.seen:
            assert {"admin", "sova"} <= set(roles.split(",")) <= implied, roles

        before = len(self.seen)
        for call in (
            lambda: self.sdk.compute.delete_server(self.server["id"]),
            lambda: list(self.sdk.compute.hypervisors()),
        ):
            with pytest.raises(sdk_exc.HttpException) as err:
                call()
            assert err.value.status_code == 401
        assert len(self.seen) == before  # Nova never saw them
        assert self.api.get_server(self.server["id"])["status"] == "ACTIVE"

    def test_sova_role_alone_is_judged_by_novas_policy_on_keystones_token(self) -> None:
        """A credential holding ``sova`` alone and no access rules (keystone_server.py's
        second): auth_token passes every call to Nova, whose own policy, with the shipped
        deploy/openstack/nova-policy-sova.yaml merged, judges the token's roles. The agent's
        listing of its host across projects (host and libvirt name) passes; admin's calls
        are 403 from Nova's policy (Nova saw them and names its rule); and Nova's
        ``project_only`` reads give this ``service``-project token 404 for the tenant's
        server by id, for a read and a delete alike
        (docs/openstack.md#credentials-roles-and-policies)."""
        import yaml

        from openstack import exceptions as sdk_exc

        conn = connect("sova-only", api_timeout_s=30)
        sid = self.server["id"]
        with pytest.raises(sdk_exc.ForbiddenException):  # Nova's defaults: not a reader here
            list(conn.compute.servers(details=True, all_projects=True, compute_host="host1"))
        shipped = pathlib.Path(__file__).resolve().parents[3] / "deploy/openstack"
        rules = yaml.safe_load((shipped / "nova-policy-sova.yaml").read_text())
        self.policy.set_rules(rules, overwrite=False)
        listed = list(conn.compute.servers(details=True, all_projects=True, compute_host="host1"))
        assert [(s.id, s.compute_host) for s in listed] == [(sid, "host1")]
        assert listed[0].instance_name  # os-extended-server-attributes
        for call, rule, path in (
            (conn.compute.hypervisors, "os-hypervisors:list", "/v2.1/os-hypervisors"),
            (conn.compute.services, "os-services:list", "/v2.1/os-services"),
        ):
            with pytest.raises(sdk_exc.ForbiddenException) as err:
                list(call())
            # Nova's policy refusal names its rule; auth_token's would be a 401 Nova never saw.
            assert f"Policy doesn't allow os_compute_api:{rule} to be performed" in str(
                err.value
            ), err.value
            assert ("GET", path, "sova") in self.seen
        with pytest.raises(sdk_exc.NotFoundException):
            conn.compute.get_server(sid)
        with pytest.raises(sdk_exc.NotFoundException):
            conn.compute.delete_server(sid, ignore_missing=False)
        assert ("DELETE", f"/v2.1/servers/{sid}", "sova") in self.seen
        assert {roles for _, _, roles in self.seen} == {"sova"}  # Keystone's token: the role
        server = self.api.get_server(sid)
        assert (server["status"], server["OS-EXT-SRV-ATTR:host"]) == ("ACTIVE", "host1")
