"""Sova's Watcher strategy on Watcher's own fake cluster model (the OpenStack tier, watcher env).

Watcher's scenario_1 model (five 40-vCPU compute nodes) with a datasource whose series make
one node hot: the strategy must emit exactly the live migration Sova's Alg. 2 decides (the
largest-MF VM of the hot node to the coldest node it fits on), and none when every other
node would cross the threshold by receiving it (no cold spot, Sova Fig. 5 stage 2).

Run with ``scripts/openstack-envs.sh test watcher``.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

# Watcher's tests select the threading backend when imported first (else eventlet is
# selected twice and oslo.service refuses).
pytest.importorskip(
    "watcher.tests.unit",
    reason="needs the pinned watcher environment: scripts/openstack-envs.sh test watcher",
)

from watcher.common import utils  # noqa: E402
from watcher.decision_engine.loading import default as loading  # noqa: E402
from watcher.decision_engine.strategy import strategies  # noqa: E402
from watcher.tests.unit.decision_engine.model import faker_cluster_state  # noqa: E402
from watcher.tests.unit.decision_engine.strategy.strategies.test_base import (  # noqa: E402
    TestBaseStrategy,
)

from sova.openstack.watcher_strategy import SovaHotspot  # noqa: E402

pytestmark = pytest.mark.openstack


class SeriesDatasource:
    """A Watcher datasource backend answering from per-node utilisation levels."""

    def __init__(self, model: Any, cpu: dict[str, float], vm_cpu: float = 100.0) -> None:
        self.model, self.cpu, self.vm_cpu = model, cpu, vm_cpu

    def statistic_series(
        self,
        resource: Any,
        resource_type: str,
        meter_name: str,
        start_time: Any,
        end_time: Any,
        granularity: int,
    ) -> dict[int, float]:
        assert resource_type == "compute_node"
        if meter_name == "host_cpu_usage":
            level = self.cpu[resource.hostname] * 100.0  # percent
        else:
            level = 0.30 * resource.memory * 1024.0  # KiB: 30 % of the node's memory
        return {t: level for t in range(5)}

    def get_instance_cpu_usage(
        self, instance: Any, period: int, aggregate: str, granularity: int
    ) -> float:
        return self.vm_cpu


class TestSovaHotspotStrategy(TestBaseStrategy):
    def setUp(self) -> None:
        super().setUp()
        self.model = faker_cluster_state.FakerModelCollector().generate_scenario_1()
        self.m_c_model.return_value = self.model
        p = mock.patch.object(SovaHotspot, "datasource_backend", new_callable=mock.PropertyMock)
        self.m_ds = p.start()
        self.addCleanup(p.stop)
        self.strategy = SovaHotspot(config=mock.Mock(datasources=None))
        self.strategy.input_parameters = utils.Struct(
            {"alpha": 0.75, "k": 3, "n": 5, "metric": "volume", "ceiling": None, "granularity": 300}
        )

    def run_with(self, cpu: dict[str, float]) -> list[dict[str, Any]]:
        self.m_ds.return_value = SeriesDatasource(self.model, cpu)
        solution = self.strategy.execute()
        return list(solution.actions)

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
