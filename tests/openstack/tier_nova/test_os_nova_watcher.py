"""Watcher's own applier against Nova's harness, next to Sova's actuator (the OpenStack tier,
nova env).

Nova's compute API, its Placement and its NeutronFixture's port listing are served on one
loopback socket (:func:`serve_for_watcher`); Watcher runs in another process on the watcher
environment's interpreter (tests/openstack/watcher_applier_process.py, via
``SOVA_WATCHER_PYTHON``), whose docstring lists what of Watcher is real: its DB, audit
handler, cluster-model builder, ``DefaultApplier`` and ``migrate`` action, talking to this
Nova with openstacksdk. Requests carry a token the server maps to the admin, as the
harness's other loopback tests do (:func:`test_os_nova.serve_nova_api`): Nova 34 has no
``noauth2`` pipeline left, and Keystone in front of Nova is test_os_nova_keystone.py's
subject; here what is under test is who moves the VM.

The hypervisor is Nova's ``FakeLiveMigrateDriver`` held by a gate: a live migration that
reaches the source's driver waits until the test opens it, so "while Watcher's migration
runs" is a state of Nova's compute manager, not a race. The lock both sides honour is Nova's
task state and status (docs/openstack.md#novas-own-operations): Sova's actuator stands back
from a server Nova is migrating; Watcher's ``migrate`` action fails when the server is not
``ACTIVE`` and is skipped when it is no longer on the plan's source node.

Run with ``scripts/openstack-envs.sh test nova``.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import threading
import time
import types
import urllib.parse
from typing import Any

import pytest

helpers = pytest.importorskip(
    "nova.tests.functional.integrated_helpers",
    reason="needs the pinned nova environment: scripts/openstack-envs.sh test nova",
)

from test_os_nova import FixtureNetwork, _UnderPytest, sdk, wait  # noqa: E402

from sova.driver.base import OpState  # noqa: E402
from sova.model import NIC, VM, Host, Inventory, Migrate, VMState  # noqa: E402
from sova.orchestrator.openstack import OpenStackActuator  # noqa: E402
from sova.orchestrator.openstack_cloud import SOVA_TAG  # noqa: E402

pytestmark = pytest.mark.openstack

OPENSTACK_TESTS = pathlib.Path(__file__).resolve().parents[1]
TOKEN = "admin:watcher"  # user "admin" in project "watcher": the server maps it to the admin
VIEWER = "viewer-token-0123456789abcdef"
# Link use per report, oldest first (Sova's manager's history): host1 network-hot over its
# last five, host3 the coldest.
NET_HOT = {"host1": [0.30, 0.90, 0.92, 0.95, 0.93, 0.94], "host2": [0.20] * 6, "host3": [0.05] * 6}
NET_COOLING = {**NET_HOT, "host1": [0.30, 0.90, 0.92, 0.95, 0.30, 0.30]}
WATCHER_TIMEOUT_S = 300  # one subprocess: Watcher's imports, its DB, an audit, the applier


def serve_for_watcher(test: Any) -> dict[str, str]:
    """Nova's compute API (the harness's paste app), its Placement (the harness's, reached
    through its in-process interception) and the NeutronFixture's ports, on one loopback
    socket; the base URL of each. One request at a time, as in serve_nova_api."""
    import requests
    from nova.api import wsgi

    nova = wsgi.Loader().load_app("osapi_compute")
    placement = test.placement.fixture.endpoint  # the harness's wsgi-intercept URL

    def ports(environ: dict[str, Any], start_response: Any) -> Any:
        """Neutron's version document and port listing (the only network read Watcher
        makes: Sova's strategy's VF holders), answered from the NeutronFixture."""
        if not environ["PATH_INFO"].rstrip("/").endswith("/ports"):
            self_url = f"{base}/network/v2.0/"
            body: Any = {"versions": [{"id": "v2.0", "status": "CURRENT"}]}
            body["versions"][0]["links"] = [{"rel": "self", "href": self_url}]
        else:
            query = dict(urllib.parse.parse_qsl(environ.get("QUERY_STRING", "")))
            body = {
                "ports": [
                    p
                    for p in test.neutron.list_ports(is_admin=True)["ports"]
                    if all(str(p.get(k)) == v for k, v in query.items())
                ]
            }
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps(body).encode()]

    def to_placement(environ: dict[str, Any], start_response: Any) -> Any:
        path = environ["PATH_INFO"][len("/placement") :]
        qs = environ.get("QUERY_STRING", "")
        headers = {
            k[5:].replace("_", "-").title(): v for k, v in environ.items() if k.startswith("HTTP_")
        }
        headers["X-Auth-Token"] = "admin"
        r = requests.get(f"{placement}{path}{'?' + qs if qs else ''}", headers=headers, timeout=30)
        start_response(f"{r.status_code} {r.reason}", [("Content-Type", "application/json")])
        return [r.content]

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        path = environ["PATH_INFO"]
        test.watcher_asked.append((environ["REQUEST_METHOD"], path))
        if path.startswith("/network"):
            return ports(environ, start_response)
        if path.startswith("/placement"):
            return to_placement(environ, start_response)
        user, _, project = environ.get("HTTP_X_AUTH_TOKEN", "").partition(":")
        roles = "reader,member,admin" if user == "admin" else "reader,member"
        environ.update(HTTP_X_AUTH_USER=user, HTTP_X_AUTH_PROJECT_ID=project, HTTP_X_ROLES=roles)
        return nova(environ, start_response)

    from wsgiref.simple_server import WSGIRequestHandler, make_server

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    httpd = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    test.addCleanup(httpd.server_close)
    test.addCleanup(httpd.shutdown)
    base = f"http://127.0.0.1:{httpd.server_port}"
    return {
        "nova": f"{base}/v2.1",
        "network": f"{base}/network",
        "placement": f"{base}/placement",
        "token": TOKEN,
    }


class WatcherProcess:
    """tests/openstack/watcher_applier_process.py on the watcher environment's interpreter,
    started at once; :meth:`result` waits for its JSON line (bounded), its stderr in every
    failure."""

    def __init__(self, python: str, job: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            [python, str(OPENSTACK_TESTS / "watcher_applier_process.py"), json.dumps(job)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def running(self) -> bool:
        return self.proc.poll() is None

    def result(self, timeout_s: float = WATCHER_TIMEOUT_S) -> list[list[list[str]]]:
        """Each plan's actions as [server, source, destination, final state]."""
        try:
            out, err = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(
                f"Watcher's process ran over {timeout_s} s:\n{err[-4000:]}"
            ) from None
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        assert self.proc.returncode == 0 and lines, (
            f"Watcher's process failed (exit {self.proc.returncode}):\n{err[-6000:]}"
        )
        return [plan["actions"] for plan in json.loads(lines[-1])["plans"]]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


class Gate:
    """FakeLiveMigrateDriver's live migration held until :meth:`open`: ``entered`` is set
    once a migration reached the source's driver (Nova's task state is ``migrating`` then)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()

    def live_migration(
        self,
        drv: Any,
        context: Any,
        instance: Any,
        dest: Any,
        post_method: Any,
        recover_method: Any,
        block_migration: bool = False,
        migrate_data: Any = None,
    ) -> None:
        self.entered.set()
        self.opened.wait(timeout=120)
        post_method(context, instance, dest, block_migration, migrate_data)

    def open(self) -> None:
        self.opened.set()


class _Harness(_UnderPytest, helpers.ProviderUsageBaseTestCase):
    """Three fake computes; vm1 on host1. Sova's actuator for host1 talks to Nova through the
    harness; Watcher through the loopback socket, from its own process."""

    compute_driver = "fake.FakeLiveMigrateDriver"

    def setUp(self) -> None:
        self.watcher_python = os.environ.get("SOVA_WATCHER_PYTHON", "")
        if not self.watcher_python or not pathlib.Path(self.watcher_python).exists():
            self.skipTest(  # testtools' skip: pytest.skip here reads as an error to it
                "needs the watcher environment's interpreter in SOVA_WATCHER_PYTHON "
                "(scripts/openstack-envs.sh test nova sets it)"
            )
        super().setUp()
        self.gate = Gate()
        gate = self.gate

        def live_migration(drv: Any, *args: Any, **kw: Any) -> None:
            gate.live_migration(drv, *args, **kw)

        self.stub_out("nova.virt.fake.FakeLiveMigrateDriver.live_migration", live_migration)
        for h in ("host1", "host2", "host3"):
            self._start_compute(h)
        # A test that fails with the gate shut would leave a migration in the driver for
        # its 120 s: open it before the computes stop.
        self.addCleanup(self.gate.open)
        self.conn = types.SimpleNamespace(
            compute=sdk(self.api_fixture.base_url, self.api.project_id).compute,
            network=FixtureNetwork(self.neutron),
        )
        self.server = self._create_server(name="vm1", host="host1", networks="none")
        self.watcher_asked: list[tuple[str, str]] = []  # (method, path) served to Watcher
        self.urls = serve_for_watcher(self)

    # ------------------------------------------------------------------ helpers

    def watcher(self, **job: Any) -> WatcherProcess:
        proc = WatcherProcess(self.watcher_python, {**self.urls, **job})
        self.addCleanup(proc.stop)
        return proc

    def plan(self, sid: str, source: str, destination: str) -> dict[str, Any]:
        return {"plan": {"server": sid, "source": source, "destination": destination}}

    def sova(self) -> OpenStackActuator:
        return OpenStackActuator(self.conn, "host1", poll_s=0.2, migration_timeout_s=120)

    def migrations(self, sid: str) -> list[tuple[str, str, str]]:
        """Nova's migration records of ``sid`` once all are closed (Nova frees the server a
        moment before it closes the record)."""
        deadline = time.monotonic() + 60
        while True:
            migs = [m for m in self.api.get_migrations() if m["instance_uuid"] == sid]
            done = all(m["status"] in ("completed", "error", "failed") for m in migs)
            if done or time.monotonic() > deadline:
                return [(m["migration_type"], m["status"], m["dest_compute"]) for m in migs]
            time.sleep(0.2)

    def actions_asked(self) -> list[str]:
        """The servers Watcher posted an action (a live migration here) for, in order."""
        return [
            path.split("/")[3]
            for method, path in self.watcher_asked
            if method == "POST" and path.endswith("/action")
        ]

    def host_of(self, sid: str) -> str:
        return str(self.api.get_server(sid)["OS-EXT-SRV-ATTR:host"])

    def until_entered(self, proc: WatcherProcess | None = None) -> None:
        deadline = time.monotonic() + WATCHER_TIMEOUT_S
        while not self.gate.entered.wait(0.2):
            if proc is not None and not proc.running():
                proc.result(0)  # its failure, with its stderr
                raise AssertionError("Watcher's process ended without migrating")
            assert time.monotonic() < deadline, "no live migration reached the hypervisor"


class TestWatchersApplierAgainstNova(_Harness):
    def test_watchers_applier_migrates_through_nova_and_sova_stands_back_meanwhile(
        self,
    ) -> None:
        sid = self.server["id"]
        proc = self.watcher(**self.plan(sid, "host1", "host3"))
        self.until_entered(proc)
        # Watcher's migration is in Nova's compute manager: Sova's actuator withholds vm1
        # from its agent and refuses its own migration before asking Nova.
        act = self.sova()
        host = Host("host1", 8, 16 << 30, NIC("pf0", 10e9, vf_pool=1))
        inv = act.reconcile(Inventory(host, {"vm1": VMState(VM("vm1", 1, 512 << 20))}))
        assert dict(inv.vms) == {}
        assert "vm1: Nova is operating on it (task_state migrating): Sova stands back" in (
            act.discrepancies
        )
        st = wait(act, act.submit(Migrate("vm1", "host2")))
        assert st.state is OpState.FAILED
        assert st.detail == "Nova is operating on vm1 (task_state migrating): Sova stands back"
        self.gate.open()
        assert proc.result() == [[[sid, "host1", "host3", "SUCCEEDED"]]]
        assert self.host_of(sid) == "host3"
        assert self.migrations(sid) == [("live-migration", "completed", "host3")]
        assert self.actions_asked() == [sid]
        # Afterwards the source's actuator finds the server gone from its host.
        st = wait(act, act.submit(Migrate("vm1", "host2")))
        assert st.state is OpState.FAILED and "not 'host1'" in st.detail, st.detail
        assert self.migrations(sid) == [("live-migration", "completed", "host3")]

    def test_sovas_migration_running_fails_watchers_action(self) -> None:
        sid = self.server["id"]
        act = self.sova()
        op = act.submit(Migrate("vm1", "host2"))
        self.until_entered()
        # Watcher's pre-condition: a live migration needs the server ACTIVE (it is MIGRATING).
        assert self.watcher(**self.plan(sid, "host1", "host3")).result() == [
            [[sid, "host1", "host3", "FAILED"]]
        ]
        self.gate.open()
        st = wait(act, op, timeout_s=120)
        assert st.state is OpState.SUCCEEDED, st.detail
        assert self.host_of(sid) == "host2"
        assert self.migrations(sid) == [("live-migration", "completed", "host2")]
        assert self.actions_asked() == []

    def test_sovas_migration_done_skips_watchers_action(self) -> None:
        sid = self.server["id"]
        self.gate.open()
        act = self.sova()
        st = wait(act, act.submit(Migrate("vm1", "host2")), timeout_s=120)
        assert st.state is OpState.SUCCEEDED, st.detail
        # Watcher's pre-condition: the server is no longer on the plan's source node.
        assert self.watcher(**self.plan(sid, "host1", "host3")).result() == [
            [[sid, "host1", "host3", "SKIPPED"]]
        ]
        assert self.host_of(sid) == "host2"
        assert self.migrations(sid) == [("live-migration", "completed", "host2")]
        assert self.actions_asked() == []

    def test_an_operators_migration_running_fails_watchers_action_and_sova_stands_back(
        self,
    ) -> None:
        sid = self.server["id"]
        # An operator's live migration through Nova's API (the harness's admin client).
        self.conn.compute.live_migrate_server(sid, host="host2", block_migration="auto")
        self.until_entered()
        assert self.watcher(**self.plan(sid, "host1", "host3")).result() == [
            [[sid, "host1", "host3", "FAILED"]]
        ]
        act = self.sova()
        st = wait(act, act.submit(Migrate("vm1", "host3")))
        assert st.state is OpState.FAILED and "Sova stands back" in st.detail, st.detail
        self.gate.open()
        assert self.migrations(sid) == [("live-migration", "completed", "host2")]
        assert self.host_of(sid) == "host2"
        assert self.actions_asked() == []


class SovaManager:
    """tests/openstack/sova_manager_standin.py (stdlib only: this interpreter runs it), its
    state file the Watcher process rewrites before each audit."""

    def __init__(self, tmp: pathlib.Path) -> None:
        self.state = tmp / "sova-state.json"
        self.state.write_text(
            json.dumps({"net": {}, "vm_net": {}, "pinned": {}, "stale": [], "token": VIEWER})
        )
        port_file = tmp / "sova-port"
        self.proc = subprocess.Popen(
            [sys.executable, str(OPENSTACK_TESTS / "sova_manager_standin.py")]
            + [str(self.state), str(port_file)]
        )
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text():
            assert self.proc.poll() is None and time.monotonic() < deadline, "no stand-in"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{int(port_file.read_text())}"
        self.token_file = tmp / "sova-viewer-token"
        self.token_file.write_text(VIEWER + "\n")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class TestNetworkDrivenPlanAgainstNova(_Harness):
    """Watcher's decision engine with Sova's strategy, its cluster model read from this Nova
    by Watcher's NovaModelBuilder, the link series from Sova's manager (stand-in); the plan
    run by Watcher's applier."""

    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path: pathlib.Path) -> None:
        self.tmp = tmp_path

    def setUp(self) -> None:
        super().setUp()
        self.gate.open()
        self.vm1 = self.server["id"]
        self.vm2 = self._create_server(name="vm2", host="host1", networks="none")["id"]
        self.sova_manager = SovaManager(self.tmp)
        self.addCleanup(self.sova_manager.stop)

    def audits(self, *rounds: dict[str, Any]) -> list[list[list[str]]]:
        """One audit per round (the stand-in's answers), each plan run by the applier."""
        # CPU at 30 % everywhere: only the link can make host1 hot. vm1 takes 0.05 of
        # host1's link, vm2 0.60.
        shares = {"host1": {self.vm1: 0.05, self.vm2: 0.60}}
        return self.watcher(
            rounds=[{"vm_net": shares, **r} for r in rounds],
            state_file=str(self.sova_manager.state),
            sova_url=self.sova_manager.url,
            token_file=str(self.sova_manager.token_file),
            cpu=dict.fromkeys(("host1", "host2", "host3"), 0.30),
        ).result()

    def test_the_network_hot_nodes_heaviest_vm_is_moved_by_nova_as_the_series_say(
        self,
    ) -> None:
        vm1, vm2 = self.vm1, self.vm2
        # Over alpha in three of its last five reports, the newest two back at 0.30: the
        # AR(1) forecast is below alpha = 0.75, no hotspot, an empty plan. Then hot: the
        # network-heaviest VM (vm2) goes to the coldest link that takes it (host3:
        # 0.05 + 0.60 = 0.65 < alpha; host2 would be 0.20 + 0.60 = 0.80).
        assert self.audits({"net": NET_COOLING}, {"net": NET_HOT}) == [
            [],
            [[vm2, "host1", "host3", "SUCCEEDED"]],
        ]
        assert self.host_of(vm2) == "host3"
        assert self.host_of(vm1) == "host1"
        assert self.migrations(vm2) == [("live-migration", "completed", "host3")]
        assert self.migrations(vm1) == []
        # Watcher's model came from this Nova and its Placement, the VF holders from the
        # ports listing; its applier asked Nova for one live migration, vm2's.
        asked = set(self.watcher_asked)
        assert {("GET", "/v2.1/os-hypervisors/detail"), ("GET", "/v2.1/servers/detail")} <= asked
        assert ("GET", "/network/v2.0/ports") in asked
        for h in ("host1", "host2", "host3"):
            rp = self._get_provider_uuid_by_host(h)
            assert ("GET", f"/placement/resource_providers/{rp}/inventories") in asked
        assert self.actions_asked() == [vm2]

    def test_a_vf_holder_on_the_hot_node_stays_the_next_heaviest_vm_moves(self) -> None:
        # vm2 holds Sova's VF (a tagged direct port bound on host1, in Neutron's listing):
        # Watcher's plan leaves it and moves vm1, whose share of the link is all that moves.
        self.neutron._ports["5460ee0c-0000-4000-8000-0000000005fa"] = {
            "id": "5460ee0c-0000-4000-8000-0000000005fa",
            "name": "sova-vf-vm2",
            "network_id": self.neutron.network_1["id"],
            "device_id": self.vm2,
            "binding:host_id": "host1",
            "binding:vnic_type": "direct",
            "tags": [SOVA_TAG],
        }
        assert self.audits({"net": NET_HOT}) == [[[self.vm1, "host1", "host3", "SUCCEEDED"]]]
        assert self.host_of(self.vm1) == "host3"
        assert self.host_of(self.vm2) == "host1"
        assert self.migrations(self.vm1) == [("live-migration", "completed", "host3")]
        assert self.migrations(self.vm2) == []
