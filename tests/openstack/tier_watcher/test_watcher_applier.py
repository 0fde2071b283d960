"""Sova's Watcher strategy's action plan run by Watcher's own applier, next to Sova's actuator,
both against one Nova stand-in (the OpenStack tier, watcher env).

What runs is Watcher's: the one-shot audit handler writes the action plan Sova's strategy
decides from a datasource whose series change period by period; Watcher's ``DefaultApplier``
loads its taskflow workflow engine and its ``migrate`` action, whose ``pre_condition`` and
``execute`` call Nova through Watcher's ``NovaHelper`` (the openstacksdk connection Watcher
would make is the stand-in: ``clients.get_sdk_connection`` is the one thing replaced). Sova's
``OpenStackActuator`` talks to the same stand-in. The stand-in is the in-memory cloud of the
main suite (``tests/openstack/fakecloud.py``: a live migration is a record that advances one
state per look, Nova's task state is taken while it runs and a second request meets 409) with
the server fields Watcher's ``Server``/``Hypervisor`` wrappers read; each look at a server is
one step of Nova's time.

The lock both honour is Nova's own: the task state and status Nova sets on the server for
the whole migration (docs/openstack.md#novas-own-operations). Watcher's applier skips a
migrate action whose instance is no longer on its source node and fails one whose instance
is not ``ACTIVE``; Sova's actuator refuses to act on a server Nova is operating on, and a
migration of a server Nova places on another host. Each test counts the live migrations the
cloud was asked for: one, whoever asked first.

Run with ``scripts/openstack-envs.sh test watcher``.
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest

pytest.importorskip(
    "watcher.tests.unit",
    reason="needs the pinned watcher environment: scripts/openstack-envs.sh test watcher",
)

from watcher import objects
from watcher.applier import default as applier_default
from watcher.common import base_helper
from watcher.tests.unit.db import base as db_base
from watcher.tests.unit.decision_engine.model import faker_cluster_state

from sova.driver.base import OpState, OpStatus
from sova.model import Migrate
from sova.orchestrator.openstack import OpenStackActuator

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # tests/openstack
from fakecloud import FakeCloud, FakeCloudError, FakeCloudTimeout, Server
from test_os_watcher import INSTANCE_0, SeriesDatasource, run_sova_audit, sova_audit

pytestmark = pytest.mark.openstack

HOSTS = [f"hostname_{i}" for i in range(5)]

# Per-period CPU of each node, oldest first (granularity 300 s; the audit's k = 3 of n = 5).
# hostname_0 heats up and stays hot over the last five periods; the others cool down, the
# coldest (hostname_4) being the target Sova's Alg. 2 picks for the largest-MF VM.
RISING = {
    "hostname_0": [0.30, 0.40, 0.55, 0.80, 0.88, 0.92, 0.95, 0.95],
    "hostname_1": [0.30, 0.30, 0.25, 0.25, 0.20, 0.20, 0.20, 0.20],
    "hostname_2": [0.30, 0.30, 0.25, 0.25, 0.20, 0.20, 0.20, 0.20],
    "hostname_3": [0.30, 0.30, 0.25, 0.25, 0.20, 0.20, 0.20, 0.20],
    "hostname_4": [0.30, 0.25, 0.20, 0.15, 0.10, 0.05, 0.05, 0.05],
}
# The same node hot in two periods only, then back: no hotspot (k = 3), no action.
SPIKE = {**RISING, "hostname_0": [0.30, 0.30, 0.30, 0.95, 0.95, 0.30, 0.30, 0.30]}
# Hot in three of the last five periods (k of n holds) but the newest two back at 0.30: the
# AR(1) forecast of the next period, fitted on those five, is below alpha = 0.75: no hotspot.
COOLING = {**RISING, "hostname_0": [0.30, 0.30, 0.90, 0.92, 0.95, 0.85, 0.30, 0.30]}


class NovaStandIn:
    """openstacksdk's ``Connection`` as Watcher's NovaHelper and Sova's actuator call it, over
    one :class:`FakeCloud` (see the module's docstring)."""

    def __init__(self, cloud: FakeCloud) -> None:
        self.cloud = cloud
        self.compute = _Compute(self)
        self.network = cloud.network
        self.placement = cloud.placement
        # Called once, at the first look at a server while Nova migrates it: what someone
        # else does in the middle of a migration.
        self.during_migration: Callable[[], None] | None = None

    def live_migrations(self) -> list[dict[str, Any]]:
        return [kw for call, kw in self.cloud.calls if call == "live_migrate_server"]


class _Compute:
    def __init__(self, nova: NovaStandIn) -> None:
        self.nova = nova
        self.c = nova.cloud

    def __getattr__(self, name: str) -> Any:  # what Sova's actuator calls besides
        return getattr(self.c.compute, name)

    def get_server(self, sid: str) -> Any:
        self.c.compute.migrations()  # Nova's time moves on between two looks
        s = self.c.servers[sid]
        if s.task_state is not None and self.nova.during_migration is not None:
            hook, self.nova.during_migration = self.nova.during_migration, None
            hook()
        return SimpleNamespace(
            **vars(s),
            created_at="2026-12-01T00:00:00Z",
            vm_state="active",
            power_state=1,
            flavor={"vcpus": 1, "ram": 512, "disk": 1},
            is_locked=False,
            metadata={},
            availability_zone="nova",
            pinned_availability_zone=None,
            image=SimpleNamespace(id="image-1"),
            hypervisor_hostname=s.compute_host,
        )

    def live_migrate_server(self, server: Any, host: str | None = None, **kw: Any) -> None:
        sid = server if isinstance(server, str) else server.id  # Watcher passes the id
        self.c.compute.live_migrate_server(self.c.servers[sid], host=host, **kw)

    def hypervisors(self, hypervisor_hostname_pattern: str = "", **_: Any) -> list[Any]:
        return [
            SimpleNamespace(
                id=f"00000000-0000-0000-0000-00000000000{i}",
                name=h,
                hypervisor_type="QEMU",
                state="up",
                status="enabled",
                vcpus=40,
                vcpus_used=0,
                memory_size=132 * 1024,
                memory_used=0,
                local_disk_size=250,
                local_disk_used=0,
                service_details={"host": h, "id": i, "disabled_reason": None},
                servers=[],
            )
            for i, h in enumerate(HOSTS)
            if hypervisor_hostname_pattern in h
        ]


class Clock:
    def __init__(self) -> None:
        self.t = 0.0
        self.on_sleep: Callable[[], None] | None = None

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s
        if self.on_sleep is not None:
            hook, self.on_sleep = self.on_sleep, None
            hook()


class TestWatchersApplierAndSovaMigrateEachVMOnce(db_base.DbTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.flags(migration_interval=0.1, group="nova")  # its least: Watcher polls quickly
        self.audit = sova_audit(self, ("audit", "action_plan", "action"))
        self.model = faker_cluster_state.FakerModelCollector().generate_scenario_1()
        self.cloud = FakeCloud()
        self.cloud.servers[INSTANCE_0] = Server(INSTANCE_0, "INSTANCE_0", "hostname_0")
        self.nova = NovaStandIn(self.cloud)
        p = mock.patch.object(
            base_helper.clients, "get_sdk_connection", return_value=self.nova, autospec=True
        )
        p.start()
        self.addCleanup(p.stop)
        self.clock = Clock()
        self.sova = OpenStackActuator(
            self.nova,
            "hostname_0",
            errors=(FakeCloudError,),
            timeouts=(FakeCloudTimeout,),
            spawn=lambda fn: fn(),  # inline: the op runs to its end inside submit()
            clock=self.clock,
            sleep=self.clock.sleep,
            poll_s=1.0,
        )

    # ------------------------------------------------------------------ helpers

    def audit_plan(self, cpu: dict[str, list[float]]) -> list[Any]:
        """Watcher's one-shot audit with Sova's strategy: the actions of the plan it wrote."""
        run_sova_audit(self, self.model, SeriesDatasource(self.model, dict(cpu)))
        [plan] = objects.ActionPlan.list(self.context)
        self.plan = plan
        return list(objects.Action.list(self.context, filters={"action_plan_id": plan.id}))

    def apply(self) -> str:
        """The plan through Watcher's applier; the migrate action's final state."""
        applier_default.DefaultApplier(self.context, mock.MagicMock()).execute(self.plan.uuid)
        [action] = objects.Action.list(self.context, filters={"action_plan_id": self.plan.id})
        return str(action.state)

    def sova_migrates(self, dst: str) -> OpStatus:
        return self.sova.poll(self.sova.submit(Migrate("INSTANCE_0", dst)))

    def on(self) -> str:
        return self.cloud.servers[INSTANCE_0].compute_host

    # ------------------------------------------------------------------ the plan

    def test_the_plan_follows_the_series(self) -> None:
        """Rising: one live migration to the coldest node; a two-period spike (k of n fails)
        and a node cooling after three hot periods (the forecast fails): none."""
        for cpu, moves in ((SPIKE, []), (COOLING, []), (RISING, ["hostname_4"])):
            for plan in objects.ActionPlan.list(self.context):
                plan.destroy()
            actions = self.audit_plan(cpu)
            got = [a.input_parameters["destination_node"] for a in actions]
            assert got == moves, (cpu["hostname_0"], got)
            assert all(a.action_type == "migrate" for a in actions)

    # ------------------------------------------------------------------ both sides

    def test_watchers_applier_migrates_and_sova_stands_back_meanwhile(self) -> None:
        [action] = self.audit_plan(RISING)
        assert action.input_parameters["source_node"] == "hostname_0"
        seen: list[OpStatus] = []
        self.nova.during_migration = lambda: seen.append(self.sova_migrates("hostname_3"))
        assert self.apply() == objects.action.State.SUCCEEDED
        [st] = seen
        assert st.state is OpState.FAILED
        assert st.detail == (
            "Nova is operating on INSTANCE_0 (task_state migrating): Sova stands back"
        )
        assert self.on() == "hostname_4"
        assert self.nova.live_migrations() == [{"host": "hostname_4", "force": False}]
        # Afterwards Sova's actuator on the source finds the server gone from its host.
        st = self.sova_migrates("hostname_3")
        assert st.state is OpState.FAILED and "not 'hostname_0'" in st.detail, st.detail
        assert len(self.nova.live_migrations()) == 1

    def test_sovas_migration_running_fails_watchers_action(self) -> None:
        self.audit_plan(RISING)
        states: list[str] = []
        # Sova's first wait for Nova's record: its migration runs; Watcher's applier now.
        self.clock.on_sleep = lambda: states.append(self.apply())
        st = self.sova_migrates("hostname_3")
        assert st.state is OpState.SUCCEEDED, st.detail
        # Watcher's pre-condition: live migration needs the instance ACTIVE (it is MIGRATING).
        assert states == [objects.action.State.FAILED]
        assert self.on() == "hostname_3"
        assert self.nova.live_migrations() == [{"host": "hostname_3", "force": False}]

    def test_sovas_migration_done_skips_watchers_action(self) -> None:
        self.audit_plan(RISING)
        st = self.sova_migrates("hostname_3")
        assert st.state is OpState.SUCCEEDED, st.detail
        # Watcher's pre-condition: the instance is no longer on the plan's source node.
        assert self.apply() == objects.action.State.SKIPPED
        assert self.on() == "hostname_3"
        assert len(self.nova.live_migrations()) == 1

    def test_an_operator_migration_running_fails_watchers_action_and_sova_stands_back(
        self,
    ) -> None:
        self.audit_plan(RISING)
        self.cloud.begin(INSTANCE_0, "live_migrate")
        assert self.apply() == objects.action.State.FAILED
        st = self.sova_migrates("hostname_3")
        assert st.state is OpState.FAILED and "Sova stands back" in st.detail
        assert self.nova.live_migrations() == []
        self.cloud.end(INSTANCE_0, "live_migrate", "hostname_2")
        assert self.on() == "hostname_2"
