"""Sova's OpenStack actuator inside Nova's functional harness (the OpenStack tier, nova env).

Nova's API, conductor, scheduler and compute services plus real Placement run in this
process on in-memory SQLite (Nova's own test fixtures); openstacksdk reaches the API through
the harness's in-process interception, or a real loopback socket where a client timeout
must be able to fire (:func:`serve_nova_api`), so the code under test is exactly what runs
against a cloud. Neutron is, in the joined test (:class:`TestNovaMadeVMsGetAVFThroughARealNeutron`),
Neutron's own API server on the real ML2 plugin in a second process (tests/openstack/
neutron_server.py, the neutron env), which Nova's Neutron client and Sova's openstacksdk
connection both reach over HTTP (the set-up is joined_harness.py's, shared with the
two-compute joined modules); elsewhere it is Nova's NeutronFixture, reached through
:class:`FixtureNetwork`, which plays the part of openstacksdk's network proxy.

Run with ``scripts/openstack-envs.sh test nova``.
"""

from __future__ import annotations

import copy
import time
import types
from typing import Any

import pytest

helpers = pytest.importorskip(
    "nova.tests.functional.integrated_helpers",
    reason="needs the pinned nova environment: scripts/openstack-envs.sh test nova",
)

import joined_harness as jh  # noqa: E402
from joined_harness import NeutronProcess  # noqa: E402
from keystoneauth1 import noauth, session  # noqa: E402
from nova.tests.fixtures import libvirt as fakelibvirt  # noqa: E402
from nova.tests.functional.libvirt import test_pci_sriov_servers as sriov  # noqa: E402
from nova_harness import _UnderPytest, sdk, wait  # noqa: E402

from openstack import connection  # noqa: E402
from sova.driver.base import OpState  # noqa: E402
from sova.manager.daemons.service.store_rows import LogSlice  # noqa: E402
from sova.model import NIC, VM, AttachVF, DetachVF, Host, Inventory, Migrate, VMState  # noqa: E402
from sova.orchestrator.openstack import OpenStackActuator  # noqa: E402
from sova.policy.vfkernel import schedule_one  # noqa: E402
from sova.policy.vfsched import Candidate, VFSchedulerConfig  # noqa: E402

pytestmark = pytest.mark.openstack


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
            description=p.get("description") or "",
            network_id=p.get("network_id"),
            device_id=p.get("device_id") or "",
            project_id=p.get("project_id"),
            binding_vnic_type=p.get("binding:vnic_type"),
            binding_host_id=p.get("binding:host_id"),
            binding_vif_type=p.get("binding:vif_type"),
            fixed_ips=p.get("fixed_ips") or [],
            tags=list(p.get("tags") or []),
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
            "port_security_enabled": True,
            "allowed_address_pairs": attrs.get("allowed_address_pairs", []),
        }
        self.fx.update_port(port["id"], {"port": body})
        self.created.append(port["id"])
        return self._obj(self.fx.show_port(port["id"])["port"])

    def add_tag(self, port: Any, tag: str) -> Any:
        # Neutron's tag API (PUT /ports/{id}/tags/{tag}); the fixture keeps it on the port.
        tags = list(self.fx.show_port(port.id)["port"].get("tags") or [])
        self.fx.update_port(port.id, {"port": {"tags": [*tags, tag]}})
        return self._obj(self.fx.show_port(port.id)["port"])

    def delete_port(self, port: Any, ignore_missing: bool = True) -> None:
        self.deleted.append(port.id)
        self.fx.delete_port(port.id)

    def get_network(self, network_id: str) -> Any:
        n = self.fx.show_network(network_id)["network"]
        return types.SimpleNamespace(
            id=n["id"], name=n.get("name"), provider_network_type=n.get("provider:network_type")
        )

    def find_network(self, name_or_id: str, ignore_missing: bool = True) -> Any:
        nets = self.fx.list_networks()["networks"]
        for n in nets:
            if name_or_id in (n["id"], n.get("name")):
                return types.SimpleNamespace(id=n["id"], name=n.get("name"))
        return None


def virtio_ports(neutron: Any, names: tuple[str, ...]) -> dict[str, str]:
    """One virtio (OVS) port per server on the VLAN provider network network_2 (physnet2), as
    a user booting there gets: the fixture's normal port_2, moved to network_2. The VF port
    goes on the same network, the bond's backup's."""
    ports = {}
    for i, name in enumerate(names):
        port = copy.deepcopy(neutron.port_2)
        port.update(
            id=f"5460ee0c-0000-4000-8000-00000000000{i}",
            network_id=neutron.network_2["id"],
            mac_address=f"52:54:00:bb:00:0{i}",
            fixed_ips=[{"ip_address": f"192.168.13.{10 + i}", "subnet_id": neutron.subnet_2["id"]}],
        )
        neutron._ports[port["id"]] = port
        ports[name] = port["id"]
    return ports


def serve_nova_api(test: Any) -> str:
    """Nova's compute API (the same paste app the harness loads) on a real loopback socket,
    so that a client's timeout can fire (the harness's in-process interception has none).
    One request at a time: the harness runs casts as calls, so a request may carry a whole
    migration; later requests wait, as on an API whose workers are all busy."""
    import threading
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from nova.api import wsgi

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    nova = wsgi.Loader().load_app("osapi_compute")

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        # keystonemiddleware's part (the harness stubs Keystone with X-Auth-* headers): a
        # client with only a token (a clouds.yaml entry, ``admin_token``) names "user:project".
        if "HTTP_X_AUTH_USER" not in environ:
            user, _, project = environ.get("HTTP_X_AUTH_TOKEN", "").partition(":")
            roles = "reader,member,admin" if user == "admin" else "reader,member"
            environ.update(
                HTTP_X_AUTH_USER=user, HTTP_X_AUTH_PROJECT_ID=project, HTTP_X_ROLES=roles
            )
        return nova(environ, start_response)

    httpd = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    test.addCleanup(httpd.server_close)
    test.addCleanup(httpd.shutdown)
    path = test.api_fixture.base_url.split("/", 3)[3]
    return f"http://127.0.0.1:{httpd.server_port}/{path}"


REAL_UNAME = __import__("os").uname  # before Nova's GenericPoisonFixture replaces it


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

    def test_recommended_plan_once_approved_is_a_nova_live_migration(self) -> None:
        """Recommend mode's own path: Sova's round exported as a Watcher-shaped plan, the
        approved action run by execute_approved through the source's actuator, i.e. Nova."""
        from sova.orchestrator.recommend import (
            execute_approved,
            proposals_from_signals,
            to_watcher_action_plan,
        )
        from sova.policy.hotspot import MigrationSignal

        sid = self.server["id"]
        signals = {"host1": MigrationSignal(True, "host3", "cpu hot", sid)}
        plan = to_watcher_action_plan(proposals_from_signals(signals, {sid: "vm1"}))
        [action] = plan["actions"]
        assert self.api.get_server(sid)["OS-EXT-SRV-ATTR:host"] == "host1"  # nothing yet
        done = execute_approved(
            plan,
            action["uuid"],
            lambda src: OpenStackActuator(self.conn, src, poll_s=0.2, migration_timeout_s=60),
            poll_s=0.2,
            timeout_s=60,
        )
        assert done.result == "succeeded", done.detail
        assert self.api.get_server(sid)["OS-EXT-SRV-ATTR:host"] == "host3"
        migs = [m for m in self.api.get_migrations() if m["instance_uuid"] == sid]
        assert [(m["status"], m["dest_compute"]) for m in migs] == [("completed", "host3")]

    def test_manager_in_recommend_mode_runs_the_approved_plan_as_a_nova_live_migration(
        self,
    ) -> None:
        """The manager's own path, in this environment: its service (store, planner, operator
        desk) with ``mode = "recommend"``, ``orchestrator = "openstack"`` and a clouds.yaml
        entry for Nova's API (served on a loopback port). Reports make host1 hot; the round
        proposes vm1 to the coldest host, host3; the operator approves; the desk runs
        ``execute_approved`` through the actuator ``openstack_actuator`` makes from the
        settings (``connect`` reading clouds.yaml), i.e. a Nova live migration. Only the
        manager's HTTP layer (FastAPI, not installed next to Nova's harness) is left out:
        its routes call these same service methods."""
        import asyncio
        import os

        import fixtures

        # The manager's numpy (its first import) and its metrics (prometheus_client's
        # PlatformCollector) read os.uname, which Nova's harness forbids to Nova's own code.
        self.useFixture(fixtures.MonkeyPatch("os.uname", REAL_UNAME))

        from sova.manager.daemons.config import ManagerSettings
        from sova.manager.daemons.schema import build_report
        from sova.manager.daemons.service.service import ManagerService
        from sova.manager.daemons.service.store import Store
        from sova.orchestrator.settings import openstack_actuator
        from sova.policy.hotspot import Utilisation, VMLoad

        tmp = self.useFixture(fixtures.TempDir()).path
        clouds = os.path.join(tmp, "clouds.yaml")
        # Neutron's real API (the actuator asks it whether the server holds a Sova port
        # before migrating), as in the joined test.
        neutron = NeutronProcess("host1")
        self.addCleanup(neutron.stop)
        nova_url = serve_nova_api(self)
        with open(clouds, "w") as f:  # the stand-ins take "user:project" as the token
            f.write(
                "clouds:\n  tier:\n    auth_type: admin_token\n    auth:\n"
                f"      token: 'admin:{self.api.project_id}'\n      endpoint: '{nova_url}'\n"
                f"    compute_endpoint_override: '{nova_url}'\n"
                f"    network_endpoint_override: '{neutron.url}'\n"
            )
        self.useFixture(fixtures.EnvironmentVariable("OS_CLIENT_CONFIG_FILE", clouds))
        settings = ManagerSettings.model_validate(
            {
                "hosts": {h: {"token": f"{h}-" + "t" * 30} for h in ("host1", "host2", "host3")},
                "plan_period_s": 10,
                "clock": "agent",
                "planner": {"alpha": 0.75, "k": 3, "n": 5},
                "insecure": True,
                "mode": "recommend",
                "orchestrator": "openstack",
                "cloud": "tier",
                "openstack": {"migration_timeout_s": 120},
            }
        )
        made: list[OpenStackActuator] = []

        def actuator_for(host: str) -> OpenStackActuator:
            made.append(openstack_actuator(settings, host))  # what the manager's app passes
            return made[-1]

        store = Store(f"sqlite:///{os.path.join(tmp, 'manager.db')}")
        self.addCleanup(store.close)
        store.migrate()
        svc = ManagerService(settings, store, actuator_for=actuator_for)
        svc.restore()
        loop = asyncio.new_event_loop()
        self.addCleanup(loop.close)
        self.addCleanup(lambda: loop.run_until_complete(svc.close()))
        util = {"host1": (0.2, 0.3, 0.9), "host2": (0.1, 0.2, 0.1), "host3": (0.05, 0.1, 0.05)}
        vms = {"host1": "vm1", "host2": "vm-b", "host3": "vm-c"}
        for i in range(1, 4):
            for h, u in util.items():
                load = {vms[h]: VMLoad(Utilisation(0.1, 0.1, 0.5), 512 * 2**20)}
                svc.ingest(h, build_report(i, 10.0 * i, Utilisation(*u), load))
            loop.run_until_complete(svc.tick(10.0 * i))
        loop.run_until_complete(svc.drain())
        page = loop.run_until_complete(svc.plan_page(LogSlice(kind="proposed")))
        [plan] = page.plans
        assert [(a.vm, a.src, a.dst) for a in plan.actions] == [("vm1", "host1", "host3")]
        sid = self.server["id"]
        assert self.api.get_server(sid)["OS-EXT-SRV-ATTR:host"] == "host1"  # nothing yet

        loop.run_until_complete(svc.approve_plan(plan.id, "alice", "tier"))
        loop.run_until_complete(asyncio.gather(*svc.desk.executions))
        loop.run_until_complete(svc.drain())
        done = loop.run_until_complete(svc.plan_view(plan.id))
        assert done.state == "executed", done.detail
        assert "completed" in done.detail, done.detail
        assert [a.host for a in made] == ["host1"]  # the source's actuator, from settings
        assert self.api.get_server(sid)["OS-EXT-SRV-ATTR:host"] == "host3"
        migs = [m for m in self.api.get_migrations() if m["instance_uuid"] == sid]
        assert [(m["status"], m["dest_compute"]) for m in migs] == [("completed", "host3")]
        [row] = store.migration_rows("vm1")
        assert row["result"] == "succeeded"
        assert svc.cluster_view().leases == []

    def test_slow_target_pre_check_is_no_false_failure(self) -> None:
        """The target's pre-check outlasts ``api_timeout_s``. At microversion 2.30 Nova answers
        ``os-migrateLive`` only after its pre-checks, so over a real socket (Nova's API served
        on a loopback port here, not the harness's in-process interception, where no client
        timeout can fire) the POST times out while Nova goes on migrating. The actuator must
        follow Nova's migration record to its end instead of reporting a failure that did not
        happen (the record polls that wait behind the POST time out too, and are retried)."""
        from nova.virt import fake

        real = fake.FakeDriver.check_can_live_migrate_destination

        def slow(*args: Any, **kwargs: Any) -> Any:
            time.sleep(20.0)
            return real(*args, **kwargs)

        self.stub_out("nova.virt.fake.FakeDriver.check_can_live_migrate_destination", slow)
        sess = self.conn.compute.session  # the admin identity, with an 8 s timeout
        conn = types.SimpleNamespace(
            compute=connection.Connection(
                session=session.Session(
                    auth=sess.auth, additional_headers=sess.additional_headers, timeout=8
                ),
                compute_endpoint_override=serve_nova_api(self),
            ).compute,
            network=self.conn.network,
        )
        conn.compute.get_server(self.server["id"])  # the app's first request loads its policy
        act = OpenStackActuator(conn, "host1", poll_s=1.0, migration_timeout_s=120)
        st = wait(act, act.submit(Migrate("vm1", "host3")), timeout_s=150)
        # Whatever the actuator said, Nova's migration runs to its end before the verdict
        # (and before the harness stops its services under it).
        sid, deadline = self.server["id"], time.monotonic() + 120
        while time.monotonic() < deadline:
            migs = [m for m in self.api.get_migrations() if m["instance_uuid"] == sid]
            if migs and all(m["status"] in ("completed", "error", "failed") for m in migs):
                break
            time.sleep(0.5)
        assert st.state is OpState.SUCCEEDED, st.detail
        assert "Nova's answer timed out" in st.detail, st.detail  # the POST did time out
        assert self.api.get_server(sid)["OS-EXT-SRV-ATTR:host"] == "host3"
        assert [(m["status"], m["dest_compute"]) for m in migs] == [("completed", "host3")]

    def test_change_based_view_sees_nova_at_one_request_per_look(self) -> None:
        """The agent's change-based view (orchestrator/openstack_view.py) against Nova's own
        API, requests counted at the transport (requests' Session.send, which the harness's
        interception sits under): a full look is one ``GET /servers/detail?host=``, a
        cached period none, a changes-since look one; Nova's changes-since answers a stop
        (status SHUTOFF) and a delete (status DELETED) the host did not sense, and a server
        booted on the host and sensed there is listed at once."""
        import requests

        from sova.orchestrator.openstack_view import CloudView

        sent: list[str] = []
        send = requests.Session.send

        def counted(sess: Any, req: Any, **kw: Any) -> Any:
            sent.append(f"{req.method} {req.url}")
            return send(sess, req, **kw)

        self.stub_out("requests.Session.send", counted)
        view = CloudView(self.conn, "host1", refresh_s=120, resync_s=600, busy_s=10)
        act = OpenStackActuator(self.conn, "host1", view=view)
        host = Host("host1", 8, 16 << 30, NIC("pf0", 10e9, vf_pool=1))

        def sensed(*names: str) -> Inventory:
            return Inventory(host, {n: VMState(VM(n, 1, 512 << 20)) for n in names})

        self.conn.compute.get_server(self.server["id"])  # the SDK's version discovery, once
        sent.clear()
        inv = act.reconcile(sensed("vm1"))
        assert inv.vms["vm1"].running and [u.split("?")[0][-15:] for u in sent] == [
            "/servers/detail"
        ], sent
        assert "host=host1" in sent[0] and "changes-since" not in sent[0]
        sent.clear()
        view._full_at -= 10  # ten seconds later, nothing sensed changed: from the cache
        view._changes_at -= 10
        act.reconcile(sensed("vm1"))
        assert sent == [] and view.last_look == "cached"

        # Stopped through Nova's API; the host's view is left as it was (not sensed).
        self._stop_server(self.server)
        view._full_at -= 120
        view._changes_at -= 120
        sent.clear()
        act.reconcile(sensed("vm1"))
        assert view.last_look == "changes" and len(sent) == 1 and "changes-since=" in sent[0]
        [server] = view.look(sensed("vm1"), act.clock())[0]  # the cache: no request
        assert server.status == "SHUTOFF"

        # Deleted through Nova's API: changes-since lists it DELETED, the view drops it.
        self._delete_server(self.server)
        view._full_at -= 120
        view._changes_at -= 120
        sent.clear()
        inv = act.reconcile(sensed("vm1"))
        assert view.last_look == "changes" and len(sent) == 1
        assert not view.has_server(self.server["id"]) and not inv.vms["vm1"].running

        # A server booted on host1, sensed there: listed at once, in one request.
        vm2 = self._create_server(name="vm2", host="host1", networks="none")
        sent.clear()
        inv = act.reconcile(sensed("vm2"))
        assert view.last_look == "full" and len(sent) == 1
        assert inv.vms["vm2"].running and view.has_server(vm2["id"]) and not act.discrepancies

    def test_shipped_policy_grants_the_sova_role_its_listing_and_refuses_the_rest(self) -> None:
        """deploy/openstack/nova-policy-sova.yaml in Nova's own policy engine; Sova's
        connection carries only the ``sova`` role, in the ``service`` project, not the
        server's. The agent's listing of its host across projects (with Nova's host and
        libvirt name) is allowed; a call outside the file is 403. And what no policy file
        changes: Nova's database scopes a non-admin context to its own project for a server
        read by id (``project_only``), so the role gets 404 for another project's server,
        for a read, a live migration or an interface attach alike
        (docs/openstack.md#credentials-roles-and-policies)."""
        import pathlib

        import yaml

        from openstack import exceptions as sdk_exc

        shipped = pathlib.Path(__file__).resolve().parents[3] / "deploy/openstack"
        rules = yaml.safe_load((shipped / "nova-policy-sova.yaml").read_text())
        self.policy.set_rules(rules, overwrite=False)
        sess = session.Session(
            auth=noauth.NoAuth(),
            additional_headers={
                "X-Auth-User": "sova",
                "X-User-Id": "sova",
                "X-Auth-Project-Id": "service",
                "X-Project-Id": "service",
                "X-Roles": "sova",
            },
        )
        conn = connection.Connection(
            session=sess, compute_endpoint_override=self.api_fixture.base_url
        )
        sid = self.server["id"]
        listed = list(conn.compute.servers(details=True, all_projects=True, compute_host="host1"))
        assert [(s.id, s.compute_host) for s in listed] == [(sid, "host1")]
        assert listed[0].instance_name  # os-extended-server-attributes
        with pytest.raises(sdk_exc.ForbiddenException):  # os-hypervisors:list, admin's
            list(conn.compute.hypervisors())
        with pytest.raises(sdk_exc.ForbiddenException):  # os-services:list, admin's
            list(conn.compute.services())
        with pytest.raises(sdk_exc.NotFoundException):
            conn.compute.get_server(sid)
        with pytest.raises(sdk_exc.NotFoundException):
            conn.compute.live_migrate_server(sid, host="host3", block_migration="auto")
        assert self.api.get_server(sid)["OS-EXT-SRV-ATTR:host"] == "host1"

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


class TestMigrationAbortThroughNova(_UnderPytest, helpers.ProviderUsageBaseTestCase):
    """A live migration that outlasts ``migration_timeout_s``: the actuator aborts it through
    Nova's API and follows Nova's migration record to its end. The hypervisor is Nova's
    FakeLiveMigrateDriver (a migration runs until forced or aborted), given 120 s instead of
    its 5 s before completing on its own, so a loaded machine cannot make it win the race."""

    compute_driver = "fake.FakeLiveMigrateDriver"

    def setUp(self) -> None:
        super().setUp()

        def long_migration(
            drv: Any,
            context: Any,
            instance: Any,
            dest: Any,
            post_method: Any,
            recover_method: Any,
            block_migration: bool = False,
            migrate_data: Any = None,
        ) -> None:
            drv._abort_migration, drv._migrating = False, True
            deadline = time.monotonic() + 120
            while drv._migrating and time.monotonic() < deadline:
                time.sleep(0.1)
            if drv._abort_migration:  # Nova's abort reached the driver: roll back
                recover_method(context, instance, dest, migrate_data, migration_status="cancelled")
            else:
                post_method(context, instance, dest, block_migration, migrate_data)

        self.stub_out("nova.virt.fake.FakeLiveMigrateDriver.live_migration", long_migration)
        for h in ("host1", "host2"):
            self._start_compute(h)
        self.conn = types.SimpleNamespace(
            compute=sdk(self.api_fixture.base_url, self.api.project_id).compute,
            network=FixtureNetwork(self.neutron),
        )
        self.server = self._create_server(name="vm1", host="host1", networks="none")

    def test_timed_out_migration_is_aborted_and_nova_confirms_the_cancel(self) -> None:
        act = OpenStackActuator(
            self.conn, "host1", poll_s=0.2, migration_timeout_s=2, abort_timeout_s=60
        )
        t0 = time.monotonic()
        st = wait(act, act.submit(Migrate("vm1", "host2")), timeout_s=90)
        assert st.state is OpState.FAILED, st.detail
        assert "cancelled (timed out after 2s, abort confirmed)" in st.detail, st.detail
        assert "server on 'host1'" in st.detail
        assert time.monotonic() - t0 < 60  # ended by the abort, not the driver's 120 s
        sid = self.server["id"]
        migs = [m for m in self.api.get_migrations() if m["instance_uuid"] == sid]
        assert [(m["status"], m["dest_compute"]) for m in migs] == [("cancelled", "host2")]
        server = self.api.get_server(sid)
        assert server["OS-EXT-SRV-ATTR:host"] == "host1" and server["status"] == "ACTIVE"
        allocs = self._get_allocations_by_server_uuid(sid)
        assert set(allocs) == {self._get_provider_uuid_by_host("host1")}

    def test_an_operators_live_migration_is_never_doubled_by_sova(self) -> None:
        """An operator (or Watcher's applier) live-migrates vm1 through Nova's API; while it
        runs, Nova's task state is what Sova reads: the actuator withholds vm1 from the
        agent and refuses Sova's own migration of it before asking Nova. One migration,
        the operator's, completes."""
        sid = self.server["id"]
        self.conn.compute.live_migrate_server(sid, host="host2", block_migration="auto")
        drv = self.computes["host1"].driver
        deadline = time.monotonic() + 60
        while not getattr(drv, "_migrating", False) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert drv._migrating, "the operator's migration never reached the hypervisor"
        act = OpenStackActuator(self.conn, "host1", poll_s=0.2, migration_timeout_s=60)
        host = Host("host1", 8, 16 << 30, NIC("pf0", 10e9, vf_pool=1))
        inv = act.reconcile(Inventory(host, {"vm1": VMState(VM("vm1", 1, 512 << 20))}))
        assert dict(inv.vms) == {}
        assert "vm1: Nova is operating on it (task_state migrating): Sova stands back" in (
            act.discrepancies
        )
        st = wait(act, act.submit(Migrate("vm1", "host2")))
        assert st.state is OpState.FAILED, st.detail
        assert st.detail == "Nova is operating on vm1 (task_state migrating): Sova stands back"
        drv._migrating = False  # the hypervisor finishes the operator's migration
        # Nova frees the server (task state, host) a moment before it closes the record.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            migs = [m for m in self.api.get_migrations() if m["instance_uuid"] == sid]
            if all(m["status"] in ("completed", "error", "failed") for m in migs):
                break
            time.sleep(0.2)
        assert [(m["status"], m["dest_compute"]) for m in migs] == [("completed", "host2")]
        assert self.api.get_server(sid)["OS-EXT-SRV-ATTR:host"] == "host2"


class TestFastPathThroughNova(_UnderPytest, sriov._PCIServersTestBase):
    """One PF with one VF behind Nova's fake libvirt and PCI tracker; two VMs want it."""

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
        host_info = fakelibvirt.HostInfo(cpu_nodes=2, cpu_sockets=1, cpu_cores=2, cpu_threads=2)
        pci_info = fakelibvirt.HostPCIDevicesInfo(num_pfs=1, num_vfs=1)
        self.start_compute("compute0", host_info=host_info, pci_info=pci_info)
        self.net = FixtureNetwork(self.neutron)
        self.conn = types.SimpleNamespace(
            compute=sdk(self.api_fixture.base_url, self.api.project_id).compute,
            network=self.net,
        )
        ports = virtio_ports(self.neutron, ("vm1", "vm2"))
        self.vms = {
            name: self._create_server(name=name, networks=[{"port": ports[name]}])
            for name in ("vm1", "vm2")
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
        decision = schedule_one(cands, holders or {}, 1, 3600.0, VFSchedulerConfig())
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

    def given_back(self, vm: str, timeout_s: float = 60.0) -> list[str]:
        """Reconcile until the give-back of ``vm``'s port ends; the notes of every period."""
        notes: list[str] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.act.reconcile(self.sensed())
            notes += self.act.discrepancies
            if any(n.startswith(f"{vm}: given back") or "give-back failed" in n for n in notes):
                return notes
            time.sleep(0.2)
        raise AssertionError(f"no give-back of {vm} within {timeout_s} s: {notes}")

    def test_nova_operations_on_the_vf_holder_leave_no_sova_port(self) -> None:
        """An operator stops and starts vm1, which holds Sova's port, then rebuilds it, each
        through Nova's API. While Nova says SHUTOFF the actuator stands back (vm1 withheld,
        its VF not free for vm2, a detach refused before it reaches Nova); once ACTIVE the
        port is given back through Nova (the VF is free in Nova's PCI tracker, the port
        deleted). The rebuild runs to its end between two periods: Nova's own launched_at
        says the guest was spawned anew, and that port is given back too."""
        st = wait(self.act, self.act.submit(AttachVF("vm1")))
        assert st.state is OpState.SUCCEEDED, st.detail
        assert self.holder() == ["vm1"]
        server = self.vms["vm1"]
        self._stop_server(server)
        inv = self.act.reconcile(self.sensed())
        assert set(inv.vms) == {"vm2"} and inv.host.nic.vf_pool == 0
        assert "vm1: Nova is operating on it (status SHUTOFF): Sova stands back" in (
            self.act.discrepancies
        )
        st = wait(self.act, self.act.submit(DetachVF("vm1")))
        assert st.state is OpState.FAILED, st.detail
        assert st.detail == "Nova is operating on vm1 (status SHUTOFF): Sova stands back"
        self.assertPCIDeviceCounts("compute0", total=2, free=0)
        self._start_server(server)
        notes = self.given_back("vm1")
        assert any("outlived an operation of Nova's" in n for n in notes), notes
        assert self.net.created[0] in self.net.deleted
        self.assertPCIDeviceCounts("compute0", total=2, free=2)
        assert self.holder() == []

        st = wait(self.act, self.act.submit(AttachVF("vm1")))
        assert st.state is OpState.SUCCEEDED, st.detail
        assert self.holder() == ["vm1"]  # seen settled: Nova's launch time noted
        self._rebuild_server(server, server["image"]["id"])
        notes = self.given_back("vm1")
        assert any("outlived Nova re-spawning the server" in n for n in notes), notes
        assert self.net.created[-1] in self.net.deleted
        self.assertPCIDeviceCounts("compute0", total=2, free=2)
        assert self.holder() == []
        assert self.api.get_server(server["id"])["status"] == "ACTIVE"

    def test_shelve_and_unshelve_of_the_vf_holder_leave_no_sova_port(self) -> None:
        """vm1 holds Sova's port and is shelved through Nova's API (offloaded: no host, its
        VF released in Nova's PCI tracker, the port kept as the server's). Meanwhile Nova
        places no vm1 on compute0, and the port is not taken for a leak. Unshelved (Nova
        claims a VF again and re-plugs the port, without the guest's bond), the actuator
        gives the port back: no Sova port left, the VF free."""
        st = wait(self.act, self.act.submit(AttachVF("vm1")))
        assert st.state is OpState.SUCCEEDED, st.detail
        assert self.holder() == ["vm1"]
        [port_id] = self.net.created
        server = self.vms["vm1"]
        self._shelve_server(server)
        inv = self.act.reconcile(self.sensed())
        assert not inv.vms["vm1"].running
        assert "vm1: sensed on compute0 but Nova places no such server here" in (
            self.act.discrepancies
        )
        assert port_id not in self.net.deleted
        assert self.neutron.show_port(port_id)["port"]["device_id"] == server["id"]
        self.assertPCIDeviceCounts("compute0", total=2, free=2)
        self._unshelve_server(server)
        notes = self.given_back("vm1")
        assert any("outlived Nova re-spawning the server" in n for n in notes), notes
        assert port_id in self.net.deleted
        self.assertPCIDeviceCounts("compute0", total=2, free=2)
        assert self.holder() == []
        assert self.api.get_server(server["id"])["status"] == "ACTIVE"

    def test_cold_migration_of_the_vf_holder_is_given_back_on_the_target(self) -> None:
        """vm1 holds Sova's port on compute0; an operator cold-migrates it through Nova's API
        to compute1 (a second PF with one VF) and confirms. Nova claims a VF there and moves
        the port's binding along, without the guest's bond. Once Nova places it on compute1,
        compute0's actuator grants it nothing; on compute1 the port is Sova's, made for compute0: that
        agent's actuator gives it back (bond on virtio first), leaving no Sova port and both
        hosts' VFs free."""
        host_info = fakelibvirt.HostInfo(cpu_nodes=2, cpu_sockets=1, cpu_cores=2, cpu_threads=2)
        self.start_compute(
            "compute1",
            host_info=host_info,
            pci_info=fakelibvirt.HostPCIDevicesInfo(num_pfs=1, num_vfs=1),
        )
        st = wait(self.act, self.act.submit(AttachVF("vm1")))
        assert st.state is OpState.SUCCEEDED, st.detail
        [port_id] = self.net.created
        server = self.vms["vm1"]
        # Nova's fake libvirt has no disks to copy (Nova's own SR-IOV tests stub this too).
        self.stub_out(
            "nova.virt.libvirt.driver.LibvirtDriver.migrate_disk_and_power_off",
            lambda *args, **kwargs: "{}",
        )
        self.api.post_server_action(server["id"], {"migrate": None})
        self._wait_for_state_change(server, "VERIFY_RESIZE")
        # VERIFY_RESIZE: Nova already places vm1 on compute1, so compute0's agent keeps
        # the domain it still senses out of every grant.
        inv = self.act.reconcile(self.sensed())
        assert not inv.vms["vm1"].running
        assert "vm1: sensed on compute0 but Nova places no such server here" in (
            self.act.discrepancies
        )
        self._confirm_resize(server)
        assert self.api.get_server(server["id"])["OS-EXT-SRV-ATTR:host"] == "compute1"
        port = self.neutron.show_port(port_id)["port"]
        assert port["binding:host_id"] == "compute1" and port["device_id"] == server["id"]
        self.assertPCIDeviceCounts("compute1", total=2, free=0)
        act1 = OpenStackActuator(
            self.conn,
            "compute1",
            network=self.neutron.network_2["id"],
            poll_s=0.2,
            detach_timeout_s=30,
        )
        host1 = Host("compute1", 8, 16 << 30, NIC("pf0", 10e9, vf_pool=1))
        notes: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            act1.reconcile(Inventory(host1, {"vm1": VMState(VM("vm1", 1, 512 << 20))}))
            notes += act1.discrepancies
            if any(n.startswith("vm1: given back") or "give-back failed" in n for n in notes):
                break
            time.sleep(0.2)
        assert any("made for compute0, brought here by Nova" in n for n in notes), notes
        assert any(n.startswith("vm1: given back") for n in notes), notes
        assert port_id in self.net.deleted
        self.assertPCIDeviceCounts("compute1", total=2, free=2)
        self.assertPCIDeviceCounts("compute0", total=2, free=2)


def test_sova_is_imported_from_this_checkout() -> None:
    """The tier's environments are shared by every checkout on the machine: the code under
    test must be this checkout's (scripts/openstack-envs.sh puts its src/ first on the path),
    never the one an earlier run installed."""
    import pathlib

    import sova

    here = pathlib.Path(__file__).resolve().parents[3] / "src"
    imported = pathlib.Path(sova.__file__).resolve()
    assert imported.is_relative_to(here), f"sova imported from {imported}, not from {here}"


class TestNovaMadeVMsGetAVFThroughARealNeutron(jh.JoinedRun):
    """One joined run on one compute (joined_harness.py): Nova's harness and Neutron's API
    server (real ML2 with openvswitch and sriovnicswitch, another process) talk HTTP, Nova
    through its own Neutron client. Two servers booted through Nova's API on the VLAN
    provider network (physnet2, VLAN 242) with virtio ports Neutron bound ``ovs``:
    ``bonded`` from an image with ``hw_qemu_guest_agent=yes``, ``plain`` from one without.
    Sova's LibvirtDriver reads the XML Nova generated (libvirt's test driver); its
    HostAgent (static-sriov, creation order, pool 1) grants the VF through Nova and the real
    Neutron, with one openstacksdk connection to both."""

    def setUp(self) -> None:
        super().setUp()
        images = {
            "plain": self.make_image("plain", {}),
            "bonded": self.make_image("bonded", {"hw_qemu_guest_agent": "yes"}),
        }
        # plain first: in creation order it would get the host's one VF, were it eligible.
        booted = {name: self.boot(name, images[name]) for name in ("plain", "bonded")}
        self.virtio = {name: port for name, (port, _) in booted.items()}
        self.servers = {name: server for name, (_, server) in booted.items()}
        self.domain = {n: s["OS-EXT-SRV-ATTR:instance_name"] for n, s in self.servers.items()}

    def test_agent_grants_the_vf_through_nova_and_neutron_and_takes_it_back(self) -> None:
        from sova.agent.config import ControllerConfig
        from sova.agent.loop import HostAgent

        neutron = self.conn.network
        bonded_id = self.servers["bonded"]["id"]
        # Nova bound the virtio ports through Neutron's ML2 (OVS agent on compute0).
        vport = neutron.get_port(self.virtio["bonded"].id)
        assert (vport.device_id, vport.binding_host_id) == (bonded_id, "compute0")
        assert vport.binding_vif_type == "ovs"

        hv, guest = self.hv["compute0"], self.guest["compute0"]
        drv = self.orchestrated("compute0")
        act = drv.actuator

        # Eligibility comes from Nova's XML only (agent channel + virtio NIC).
        inv = drv.inventory()
        plain, bonded = self.domain["plain"], self.domain["bonded"]
        assert set(inv.vms) == {plain, bonded}
        assert inv.vms[bonded].failover_ready
        assert not inv.vms[plain].failover_ready  # a hand-set default would say True
        vm_mac = next(m.get("address") for m in hv.xml[bonded].iter("mac"))
        assert vm_mac == vport.mac_address  # Nova's XML carries Neutron's MAC

        agent = HostAgent(drv, ControllerConfig(vf_policy="static-sriov"))
        agent.step()
        deadline = time.monotonic() + 60
        while agent.executor.in_flight and time.monotonic() < deadline:
            agent.poll()
            time.sleep(0.1)
        assert not agent.executor.in_flight
        assert sorted(drv.inventory().vf_holders) == [bonded]

        # In the real Neutron: Sova's direct port, bound hw_veb on VLAN 242 by sriovnicswitch
        # on compute0 when Nova attached it (Nova's PCI claim, its binding profile).
        [vf] = [p for p in neutron.ports(device_id=bonded_id) if p.id != vport.id]
        assert vf.name == "sova-vf-" + bonded and vf.binding_vnic_type == "direct"
        assert vf.network_id == self.provider_net.id
        assert (vf.binding_host_id, vf.binding_vif_type) == ("compute0", "hw_veb")
        assert str(vf.binding_vif_details["vlan"]) == "242"
        assert vf.binding_profile["physical_network"] == "physnet2"
        self.assertPCIDeviceCounts("compute0", total=2, free=0)
        [(what, dom, dev_xml)] = hv.events
        assert (what, dom) == ("attach", bonded) and "hostdev" in dev_xml
        assert vf.mac_address in dev_xml  # Nova plugged Neutron's port
        # Connectivity as the harness models it: the bond's active slave is the VF, whose
        # port may carry the VM's one address (the virtio port's) with port security on.
        assert guest.active[bonded] == vf.mac_address
        vm_ip = vport.fixed_ips[0]["ip_address"]
        assert vm_ip in [a["ip_address"] for a in vf.allowed_address_pairs]
        assert vf.is_port_security_enabled
        assert vf.fixed_ips == []  # no spare address taken from the subnet

        # Taken back: the bond is moved to virtio (confirmed) before Nova detaches; Nova
        # unbinds, Sova deletes the port; the virtio port stays bound with the VM's address.
        st = wait(act, drv.submit(DetachVF(bonded)))
        assert st.state is OpState.SUCCEEDED, st.detail
        assert guest.calls == [(bonded, "to_fast"), (bonded, "to_backup")]
        assert [e[0] for e in hv.events] == ["attach", "detach"]
        assert guest.active[bonded] == vport.mac_address
        assert [p.id for p in neutron.ports(device_id=bonded_id)] == [vport.id]
        assert neutron.find_port(vf.id, ignore_missing=True) is None
        after = neutron.get_port(vport.id)
        assert (after.binding_host_id, after.binding_vif_type) == ("compute0", "ovs")
        assert after.fixed_ips[0]["ip_address"] == vm_ip
        assert drv.inventory().vf_holders == frozenset()
        self.assertPCIDeviceCounts("compute0", total=2, free=2)

        # Given again, then the server is deleted through Nova's API: Nova unbinds and keeps
        # the port (it did not create it), with its address; Sova's sweep deletes it, in
        # the real Neutron, found by its tag.
        st = wait(act, drv.submit(AttachVF(bonded)))
        assert st.state is OpState.SUCCEEDED, st.detail
        [vf2] = [p for p in neutron.ports(device_id=bonded_id) if p.id != vport.id]
        self._delete_server({"id": bonded_id})
        left = neutron.get_port(vf2.id)
        assert left.device_id == "" and left.tags == ["sova-vf"]
        assert act.sweep_leaked_ports() == [vf2.id]
        assert neutron.find_port(vf2.id, ignore_missing=True) is None
        assert list(neutron.ports(tags="sova-vf")) == []


def test_unreachable_keystone_is_a_skipped_period_not_a_crash() -> None:
    """keystoneauth's own failure (nothing listens on the loopback port named as Keystone):
    the orchestrated driver's inventory raises the DriverError the agent skips a period on."""
    import socket

    from sova.driver.base import DriverError, MockDriver
    from sova.orchestrator.base import OrchestratedDriver

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conn = connection.Connection(
        auth={
            "auth_url": f"http://127.0.0.1:{port}/identity",
            "username": "sova",
            "password": "x",
            "project_name": "service",
            "user_domain_name": "Default",
            "project_domain_name": "Default",
        },
        api_timeout=2,
    )
    host = Host("cmp1", 8, 16 << 30, NIC("pf0", 10e9, vf_pool=1))
    sensed = Inventory(host, {"vm1": VMState(VM("vm1", 1, 512 << 20))})
    drv = OrchestratedDriver(
        MockDriver(lambda req: sensed if req.method == "inventory" else None),
        OpenStackActuator(conn, "cmp1"),
    )
    with pytest.raises(DriverError, match="inventory unavailable") as err:
        drv.inventory()
    from keystoneauth1 import exceptions as ksa

    assert isinstance(err.value.__cause__, ksa.ClientException), repr(err.value.__cause__)
