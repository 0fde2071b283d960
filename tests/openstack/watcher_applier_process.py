"""Watcher's applier (and, for a network-driven plan, its decision engine with Sova's strategy)
as a process of the watcher environment, against a Nova served over HTTP by the nova tier
(tests/openstack/tier_nova/test_os_nova_watcher.py). Nova 34 and Watcher 17 pin different
oslo/SQLAlchemy versions, so the two meet over HTTP, as Watcher meets Nova in a cloud.

    python watcher_applier_process.py JOB_JSON

``JOB_JSON`` names Nova's and Neutron's base URLs and the token (``nova``, ``network``,
``token``) and either one hand-written live migration (``plan``: ``server``, ``source``,
``destination``) or audit rounds (``rounds``: the Sova manager stand-in's ``net`` and
``vm_net`` for each, written to ``state_file`` before its audit; ``sova_url``,
``token_file``; ``cpu``, each node's CPU level). Prints one JSON line: for each plan, its
actions (resource, source, destination) and their final states after Watcher's applier ran.

Watcher runs on its own code throughout: Watcher's DB (its unit tests' SQLite fixture), the
one-shot audit handler, Watcher's ``NovaModelBuilder`` reading Nova's hypervisors and servers
(Placement is Nova's harness's, behind the same socket), ``DefaultApplier`` with its
taskflow engine and ``migrate`` action through ``NovaHelper``. Replaced: the openstacksdk
connection Watcher builds from watcher.conf (``clients.get_sdk_connection``; here a token
session to those URLs), Watcher's notifications (its RPC bus), and the CPU datasource
(test_os_watcher's ``SeriesDatasource`` at the job's CPU levels; the network series, which
drive the plan, come from Sova's manager stand-in).
"""

from __future__ import annotations

import json
import pathlib
import sys
import traceback
import unittest
from typing import Any
from unittest import mock

# Watcher's tests select the threading backend when imported first.
import watcher.tests.unit  # noqa: F401
from keystoneauth1 import session, token_endpoint
from watcher import objects
from watcher.applier import default as applier_default
from watcher.common import clients
from watcher.decision_engine.model.collector import nova as nova_collector
from watcher.tests.unit.db import base as db_base
from watcher.tests.unit.objects import utils as obj_utils

from openstack import connection

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "tier_watcher"))
from test_os_watcher import SeriesDatasource, run_sova_audit, sova_audit

JOB: dict[str, Any] = json.loads(sys.argv[1]) if __name__ == "__main__" else {}
OUT: dict[str, Any] = {"plans": []}


def nova_connection(*_: Any, **__: Any) -> Any:
    """What Watcher's ``clients.get_sdk_connection`` would build from watcher.conf: an
    openstacksdk connection to the cloud, here to the tier's Nova (and its Placement and
    Neutron) over loopback, on the token the server maps to an admin."""
    auth = token_endpoint.Token(JOB["nova"], JOB["token"])
    return connection.Connection(
        session=session.Session(auth=auth, timeout=30),
        compute_endpoint_override=JOB["nova"],
        network_endpoint_override=JOB["network"],
        placement_endpoint_override=JOB["placement"],
    )


class Run(db_base.DbTestCase):
    def runTest(self) -> None:
        # Watcher looks at the server every 0.1 s (its least), for up to 120 s.
        self.flags(migration_interval=0.1, migration_max_retries=1200, group="nova")
        p = mock.patch.object(clients, "get_sdk_connection", side_effect=nova_connection)
        p.start()
        self.addCleanup(p.stop)
        self.audit = sova_audit(self, ("audit", "action_plan", "action"))
        if "plan" in JOB:
            plan = obj_utils.create_test_action_plan(
                self.context, audit_id=self.audit.id, strategy_id=self.audit.strategy_id
            )
            job = JOB["plan"]
            obj_utils.create_test_action(
                self.context,
                action_plan_id=plan.id,
                action_type="migrate",
                input_parameters={
                    "resource_id": job["server"],
                    "migration_type": "live",
                    "source_node": job["source"],
                    "destination_node": job["destination"],
                },
            )
            self.apply(plan)
        for i, round_ in enumerate(JOB.get("rounds", ())):
            self.audit_and_apply(i, round_)

    def audit_and_apply(self, i: int, round_: dict[str, Any]) -> None:
        from sova.openstack.watcher_strategy import SovaHotspot

        state = pathlib.Path(JOB["state_file"])
        state.write_text(json.dumps({**json.loads(state.read_text()), **round_}))
        group = "watcher_strategies.sova_hotspot"
        if i == 0:
            from oslo_config import cfg

            cfg.CONF.register_opts(SovaHotspot.get_config_opts(), group=group)
        self.flags(sova_url=JOB["sova_url"], sova_token_file=JOB["token_file"], group=group)
        model = nova_collector.NovaModelBuilder().execute({})
        # Each node's CPU at the job's level, memory at 30 %, each VM at 20 % of its vCPUs.
        run_sova_audit(self, model, SeriesDatasource(model, JOB["cpu"], vm_cpu=20.0))
        plans = [p for p in objects.ActionPlan.list(self.context) if p.id not in self.seen()]
        [plan] = plans
        self.apply(plan)

    def seen(self) -> set[int]:
        return {p["id"] for p in OUT["plans"]}

    def apply(self, plan: Any) -> None:
        if objects.Action.list(self.context, filters={"action_plan_id": plan.id}):
            applier_default.DefaultApplier(self.context, mock.MagicMock()).execute(plan.uuid)
        actions = objects.Action.list(self.context, filters={"action_plan_id": plan.id})
        OUT["plans"].append(
            {
                "id": plan.id,
                "actions": [
                    [
                        a.input_parameters["resource_id"],
                        a.input_parameters["source_node"],
                        a.input_parameters["destination_node"],
                        str(a.state),
                    ]
                    for a in actions
                ],
            }
        )


def main() -> int:
    result = unittest.TestResult()
    Run().run(result)
    for _, trace in result.errors + result.failures:
        print(trace, file=sys.stderr)
    print(json.dumps(OUT), flush=True)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(1)
