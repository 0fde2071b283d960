"""Sova's Watcher strategy on Watcher's own fake cluster model (the OpenStack tier, watcher env).

Watcher's scenario_1 model (five 40-vCPU compute nodes) with a datasource whose series make
one node hot: the strategy must emit exactly the live migration Sova's Alg. 2 decides (the
largest-MF VM of the hot node to the coldest node it fits on), and none when every other
node would cross the threshold by receiving it (no cold spot, Sova Fig. 5 stage 2).

Run with ``scripts/openstack-envs.sh test watcher``.
"""

from __future__ import annotations

import datetime
from typing import Any
from unittest import mock

import pytest

# Watcher's tests select the threading backend when imported first (else eventlet is
# selected twice and oslo.service refuses).
pytest.importorskip(
    "watcher.tests.unit",
    reason="needs the pinned watcher environment: scripts/openstack-envs.sh test watcher",
)

from watcher import objects
from watcher.common import clients, utils
from watcher.decision_engine.audit import oneshot
from watcher.decision_engine.datasources import prometheus_base
from watcher.decision_engine.loading import default as loading
from watcher.decision_engine.model import element
from watcher.decision_engine.model.collector import manager as collector_manager
from watcher.decision_engine.strategy import strategies
from watcher.tests.unit.db import base as db_base
from watcher.tests.unit.decision_engine.model import faker_cluster_state
from watcher.tests.unit.decision_engine.strategy.strategies.test_base import (
    TestBaseStrategy,
)
from watcher.tests.unit.objects import utils as obj_utils

from sova.openstack.watcher_strategy import SovaHotspot

pytestmark = pytest.mark.openstack


def no_vf_ports(case: Any) -> None:
    """The strategy reads each node's VF ports from Neutron through Watcher's openstacksdk
    connection: a cloud whose ports hold no VF (test_watcher_network.py has VF holders)."""
    conn = mock.Mock()
    conn.network.ports.return_value = []
    p = mock.patch.object(clients, "get_sdk_connection", return_value=conn, autospec=True)
    p.start()
    case.addCleanup(p.stop)


def sova_audit(case: Any, notifications: tuple[str, ...] = ("audit", "action_plan")) -> Any:
    """In ``case``'s Watcher database (a ``DbTestCase``), a one-shot audit of the goal
    ``workload_balancing`` with Sova's strategy (n=5, k=3, alpha=0.75), its template and
    strategy rows; Watcher's ``notifications`` (its RPC bus) patched out until the test ends."""
    for name in notifications:
        p = mock.patch(f"watcher.notifications.{name}", autospec=True)
        p.start()
        case.addCleanup(p.stop)
    goal = obj_utils.create_test_goal(case.context, id=1, name="workload_balancing")
    strategy = obj_utils.create_test_strategy(case.context, name="sova_hotspot", goal_id=goal.id)
    template = obj_utils.create_test_audit_template(
        case.context, goal_id=goal.id, strategy_id=strategy.id
    )
    return obj_utils.create_test_audit(
        case.context,
        goal_id=goal.id,
        strategy_id=strategy.id,
        audit_template_id=template.id,
        goal=goal,
        parameters={"n": 5, "k": 3, "alpha": 0.75},
    )


def run_sova_audit(case: Any, model: Any, datasource: Any) -> None:
    """Watcher's one-shot audit handler on ``case.audit`` (:func:`sova_audit`): Sova's
    strategy sees ``model`` as the cluster and ``datasource`` as its metrics backend (in place
    of Watcher's collectors and Prometheus); the plan lands in Watcher's database."""
    with (
        mock.patch.object(collector_manager.CollectorManager, "get_cluster_model_collector"),
        mock.patch.object(SovaHotspot, "compute_model", new_callable=mock.PropertyMock) as m,
        mock.patch.object(SovaHotspot, "datasource_backend", new_callable=mock.PropertyMock) as d,
    ):
        m.return_value = model
        d.return_value = datasource
        oneshot.OneShotAuditHandler().execute(case.audit, case.context)


class SeriesDatasource:
    """A Watcher datasource backend answering from per-node CPU series, one value per
    granularity period, oldest first (a single level stands for a constant series), the newest
    ending at the query's end time."""

    def __init__(
        self, model: Any, cpu: dict[str, float | list[float]], vm_cpu: float = 100.0
    ) -> None:
        self.model, self.vm_cpu = model, vm_cpu
        self.cpu = {h: v if isinstance(v, list) else [v] * 8 for h, v in cpu.items()}

    def values(self, resource: Any, meter_name: str) -> list[float]:
        if meter_name == "host_cpu_usage":
            return [x * 100.0 for x in self.cpu[resource.hostname]]  # percent
        return [0.30 * resource.memory * 1024.0] * 8  # KiB: 30 % of the node's memory

    def statistic_series(
        self,
        resource: Any,
        resource_type: str,
        meter_name: str,
        start_time: Any,
        end_time: Any,
        granularity: int,
    ) -> dict[Any, float]:
        assert resource_type == "compute_node"
        values = self.values(resource, meter_name)
        stamps = [
            end_time - (len(values) - 1 - i) * datetime.timedelta(seconds=granularity)
            for i in range(len(values))
        ]
        return {t: v for t, v in zip(stamps, values, strict=True) if start_time < t <= end_time}

    def get_instance_cpu_usage(
        self, instance: Any, period: int, aggregate: str, granularity: int
    ) -> float:
        return self.vm_cpu


class MeansDatasource(SeriesDatasource):
    """A datasource like Watcher's Prometheus, Aetos and Grafana ones: no series (their real
    ``statistic_series``, which raises), only the mean over the last ``period`` seconds."""

    statistic_series = prometheus_base.PrometheusBase.statistic_series

    def statistic_aggregation(
        self,
        resource: Any,
        resource_type: str,
        meter_name: str,
        period: int,
        aggregate: str,
        granularity: int,
    ) -> float:
        assert aggregate == "mean" and resource_type == "compute_node"
        newest = self.values(resource, meter_name)[-(period // granularity) :]
        return sum(newest) / len(newest)


HOT = {
    "hostname_0": 0.90,
    "hostname_1": 0.20,
    "hostname_2": 0.20,
    "hostname_3": 0.20,
    "hostname_4": 0.05,
}
INSTANCE_0 = "d000ef1f-dc19-4982-9383-087498bfde03"


class TestSovaHotspotStrategy(TestBaseStrategy):
    def setUp(self) -> None:
        super().setUp()
        self.model = faker_cluster_state.FakerModelCollector().generate_scenario_1()
        self.m_c_model.return_value = self.model
        p = mock.patch.object(SovaHotspot, "datasource_backend", new_callable=mock.PropertyMock)
        self.m_ds = p.start()
        self.addCleanup(p.stop)
        no_vf_ports(self)
        self.strategy = SovaHotspot(
            config=mock.Mock(datasources=None, check_optimize_metadata=False)
        )
        self.strategy.input_parameters = utils.Struct(
            {"alpha": 0.75, "k": 3, "n": 5, "metric": "volume", "ceiling": None, "granularity": 300}
        )

    def run_with(
        self,
        cpu: dict[str, float | list[float]] | dict[str, float],
        ds: type[SeriesDatasource] = SeriesDatasource,
    ) -> list[dict[str, Any]]:
        self.m_ds.return_value = ds(self.model, cpu)
        params = self.strategy.input_parameters
        # A fresh strategy per audit, as Watcher makes one: a solution accumulates actions.
        self.strategy = SovaHotspot(config=self.strategy.config)
        self.strategy.input_parameters = params
        self.solution = self.strategy.execute()
        return list(self.solution.actions)

    def moved(self, actions: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        return [
            (
                a["input_parameters"]["resource_name"],
                a["input_parameters"]["source_node"],
                a["input_parameters"]["destination_node"],
            )
            for a in actions
        ]

    def test_prometheus_datasource_without_series_gives_the_same_migration(self) -> None:
        # Constant levels: each mean over 1..5 periods is the level, and so is each value
        # recovered from them (i·M(i) − (i−1)·M(i−1)).
        gnocchi = self.moved(self.run_with(HOT))
        assert self.moved(self.run_with(HOT, MeansDatasource)) == gnocchi
        assert gnocchi == [("INSTANCE_0", "hostname_0", "hostname_4")]

    def test_series_recovered_from_prometheus_means_is_the_nodes_series(self) -> None:
        # Means over the newest 1..5 periods of (20, 50, 90, 30, 70) %: 70, 50, 63.3, 60, 52;
        # i·M(i) − (i−1)·M(i−1) gives back 70, 30, 90, 50, 20, newest first.
        cpu: dict[str, float | list[float]] = {**HOT, "hostname_0": [0.2, 0.5, 0.9, 0.3, 0.7]}
        node = self.model.get_node_by_name("hostname_0")
        for ds in (SeriesDatasource, MeansDatasource):
            self.m_ds.return_value = ds(self.model, cpu)
            got = self.strategy._series(node, "host_cpu_usage", 5)
            assert got == pytest.approx([20.0, 50.0, 90.0, 30.0, 70.0]), (ds.__name__, got)

    def test_a_node_hot_in_its_last_period_only_is_not_a_hotspot_from_means_either(self) -> None:
        # (20, 20, 20, 20, 95) %: one period over α of the last five, k = 3: not hot. The
        # means over 1..5 periods (95, 57.5, 45, 38.75, 35) are not the series; taking the
        # newest mean for every period would make the node hot five times over.
        cpu: dict[str, float | list[float]] = {**HOT, "hostname_0": [0.2, 0.2, 0.2, 0.2, 0.95]}
        assert self.moved(self.run_with(cpu, MeansDatasource)) == []
        assert self.moved(self.run_with(cpu)) == []
        assert not self.strategy.signals["hostname_0"].flag
        # The same node over α for its last four periods (AR(1) forecast 0.816) is one.
        cpu["hostname_0"] = [0.5, 0.9, 0.9, 0.9, 0.9]
        assert self.moved(self.run_with(cpu, MeansDatasource)) == [
            ("INSTANCE_0", "hostname_0", "hostname_4")
        ]

    def test_watcher_fills_and_checks_the_parameters_by_the_strategys_schema(self) -> None:
        # Watcher's API validates an audit's parameters with this validator (defaults filled).
        import jsonschema

        check = utils.StrictDefaultValidatingDraft4Validator(SovaHotspot.get_schema()).validate
        params: dict[str, Any] = {}
        check(params)
        assert params == {
            "alpha": 0.75,
            "k": 3,
            "n": 5,
            "metric": "volume",
            "ceiling": None,
            "granularity": 300,
        }
        check({"alpha": 1, "k": 1, "n": 1, "ceiling": 0.5, "granularity": 1})  # the bounds
        for bad in (
            {"alpha": 1.5},
            {"alpha": -0.1},
            {"alpha": "hot"},
            {"k": 0},
            {"k": 1.5},
            {"n": 0},
            {"metric": "cpu"},
            {"ceiling": "low"},
            {"granularity": 0},
        ):
            with pytest.raises(jsonschema.ValidationError):
                check(dict(bad))

    def test_a_ceiling_no_node_would_stay_below_means_no_migration(self) -> None:
        assert self.moved(self.run_with(HOT)) == [("INSTANCE_0", "hostname_0", "hostname_4")]
        self.strategy.input_parameters["ceiling"] = 0.06  # hostname_4 is at 0.05 before
        assert self.moved(self.run_with(HOT)) == []
        assert "no cold spot" in self.strategy.signals["hostname_0"].reason
        self.strategy.input_parameters["ceiling"] = None  # no ceiling: alpha bounds the target
        self.strategy.input_parameters["alpha"] = None  # unset: the schema's default
        assert self.moved(self.run_with(HOT)) == [("INSTANCE_0", "hostname_0", "hostname_4")]

    def test_a_prometheus_history_shorter_than_n_periods_gives_a_shorter_series(self) -> None:
        # Three periods of data: the means over 4 and 5 periods are empty (None, or NaN from
        # Prometheus): the series stops there instead of inventing values.
        class Short(MeansDatasource):
            def statistic_aggregation(self, resource: Any, *a: Any, **kw: Any) -> Any:
                if kw["period"] > 3 * kw["granularity"]:
                    return None if resource.hostname == "hostname_0" else float("nan")
                return super().statistic_aggregation(resource, *a, **kw)

        cpu: dict[str, float | list[float]] = {**HOT, "hostname_0": [0.2, 0.5, 0.9, 0.3, 0.7]}
        self.m_ds.return_value = Short(self.model, cpu)
        for name, want in (("hostname_0", [90.0, 30.0, 70.0]), ("hostname_1", [20.0] * 3)):
            got = self.strategy._series(self.model.get_node_by_name(name), "host_cpu_usage", 5)
            assert got == pytest.approx(want), (name, got)

    def test_efficacy_indicators_say_what_the_plan_changes(self) -> None:
        self.run_with(HOT)
        ind = {i["name"]: i["value"] for i in self.solution.efficacy_indicators}
        assert ind["instance_migrations_count"] == 1
        assert ind["instances_count"] == len(self.model.get_all_instances())
        # CPU spread of (0.9, 0.2, 0.2, 0.2, 0.05) before; INSTANCE_0's share moved after.
        assert ind["standard_deviation_after_audit"] < ind["standard_deviation_before_audit"]
        [glob] = self.solution.global_efficacy
        assert glob["value"] == 100.0 / len(self.model.get_all_instances())

    def test_excluded_and_inactive_instances_are_never_moved(self) -> None:
        inst0 = self.model.get_instance_by_uuid(INSTANCE_0)
        inst0.watcher_exclude = True
        assert ("INSTANCE_0", "hostname_0", "hostname_4") not in self.moved(self.run_with(HOT))
        inst0.watcher_exclude = False
        inst0.state = element.InstanceState.STOPPED.value
        assert ("INSTANCE_0", "hostname_0", "hostname_4") not in self.moved(self.run_with(HOT))
        inst0.state = element.InstanceState.ACTIVE.value
        assert self.moved(self.run_with(HOT)) == [("INSTANCE_0", "hostname_0", "hostname_4")]

    def test_a_node_the_vm_does_not_fit_is_no_target(self) -> None:
        # hostname_4, the coldest, has its vCPUs all allocated: INSTANCE_0 (10 vCPUs) cannot go.
        cold = self.model.get_node_by_name("hostname_4")
        used = self.model.get_node_used_resources(cold)["vcpu"]
        cold.vcpus = used + 5  # 5 free < 10
        self.model._node_resource_cache.clear()
        moves = self.moved(self.run_with(HOT))
        assert moves and all(dst != "hostname_4" for _, _, dst in moves), moves

    def test_hot_node_gets_one_live_migration_to_the_coldest_node(self) -> None:
        actions = self.run_with(
            {
                "hostname_0": 0.90,
                "hostname_1": 0.20,
                "hostname_2": 0.20,
                "hostname_3": 0.20,
                "hostname_4": 0.05,
            }
        )
        assert len(actions) == 1, actions
        [a] = actions
        assert a["action_type"] == "migrate"
        # INSTANCE_0 (10 vCPU, 2 MB) relieves more per byte than INSTANCE_1 (11 vCPU, 3 MB).
        assert a["input_parameters"] == {
            "resource_id": "d000ef1f-dc19-4982-9383-087498bfde03",
            "migration_type": "live",
            "source_node": "hostname_0",
            "destination_node": "hostname_4",
            "resource_name": "INSTANCE_0",
        }
        assert self.strategy.signals["hostname_0"].flag

    def test_no_migration_without_a_cold_spot(self) -> None:
        # Every other node is at 60 % CPU: receiving the VM's 25 % would put it above α.
        actions = self.run_with(
            {
                "hostname_0": 0.90,
                "hostname_1": 0.60,
                "hostname_2": 0.60,
                "hostname_3": 0.60,
                "hostname_4": 0.60,
            }
        )
        assert actions == []
        sig = self.strategy.signals["hostname_0"]
        assert not sig.flag and "no cold spot" in sig.reason

    def test_no_migration_when_nothing_is_hot(self) -> None:
        assert self.run_with({f"hostname_{i}": 0.30 for i in range(5)}) == []

    def test_watcher_loads_the_strategy_by_its_entry_point(self) -> None:
        cls = loading.DefaultStrategyLoader().list_available()["sova_hotspot"]
        assert cls is SovaHotspot
        assert issubclass(cls, strategies.base.WorkloadStabilizationBaseStrategy)
        assert cls.get_goal_name() == "workload_balancing"


def test_sova_is_imported_from_this_checkout() -> None:
    """The tier's environments are shared by every checkout on the machine: the code under
    test must be this checkout's (scripts/openstack-envs.sh puts its src/ first on the path),
    never the one an earlier run installed."""
    import pathlib

    import sova

    here = pathlib.Path(__file__).resolve().parents[3] / "src"
    imported = pathlib.Path(sova.__file__).resolve()
    assert imported.is_relative_to(here), f"sova imported from {imported}, not from {here}"


class TestAuditThroughWatchersDecisionEngine(db_base.DbTestCase):
    """A one-shot audit with goal workload_balancing and strategy sova_hotspot, run by
    Watcher's own audit handler (strategy loaded by its entry point, planner, action plan
    and efficacy written to Watcher's database)."""

    def setUp(self) -> None:
        super().setUp()
        self.audit = sova_audit(self)
        self.model = faker_cluster_state.FakerModelCollector().generate_scenario_1()
        no_vf_ports(self)

    def test_audit_yields_an_action_plan_with_the_expected_migrate(self) -> None:
        ds = SeriesDatasource(self.model, HOT)
        run_sova_audit(self, self.model, ds)
        [plan] = objects.ActionPlan.list(self.context)
        actions = objects.Action.list(self.context, filters={"action_plan_id": plan.id})
        assert [(a.action_type, a.input_parameters) for a in actions] == [
            (
                "migrate",
                {
                    "resource_id": INSTANCE_0,
                    "migration_type": "live",
                    "source_node": "hostname_0",
                    "destination_node": "hostname_4",
                    "resource_name": "INSTANCE_0",
                },
            )
        ]
        [glob] = plan.global_efficacy
        assert glob["name"] == "live_migrations_count" and glob["value"] > 0
