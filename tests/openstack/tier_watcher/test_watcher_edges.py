"""Sova's Watcher strategy: the edges the mutation run (scripts/mutation-openstack.sh) found
no test for, on Watcher's scenario_1 model as in test_os_watcher.py. Each test here failed
on the mutant it is named for (the watcher env)."""

from __future__ import annotations

import pathlib
import statistics
import sys
from typing import Any
from unittest import mock

import pytest

pytest.importorskip(
    "watcher.tests.unit",
    reason="needs the pinned watcher environment: scripts/openstack-envs.sh test watcher",
)

from watcher.common import utils
from watcher.tests.unit.decision_engine.model import faker_cluster_state
from watcher.tests.unit.decision_engine.strategy.strategies.test_base import (
    TestBaseStrategy,
)

from sova.openstack.watcher_strategy import SovaHotspot

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from test_os_watcher import HOT, SeriesDatasource

pytestmark = pytest.mark.openstack


class TestStrategyEdges(TestBaseStrategy):
    def setUp(self) -> None:
        super().setUp()
        self.model = faker_cluster_state.FakerModelCollector().generate_scenario_1()
        self.m_c_model.return_value = self.model
        p = mock.patch.object(SovaHotspot, "datasource_backend", new_callable=mock.PropertyMock)
        self.m_ds = p.start()
        self.addCleanup(p.stop)

    def run_with(self, ds: Any, **params: Any) -> SovaHotspot:
        self.m_ds.return_value = ds
        strategy = SovaHotspot(config=mock.Mock(datasources=None, check_optimize_metadata=False))
        strategy.input_parameters = utils.Struct(
            {
                "alpha": 0.75,
                "k": 3,
                "n": 5,
                "metric": "volume",
                "ceiling": None,
                "granularity": 300,
                **params,
            }
        )
        strategy.execute()
        return strategy

    def test_cpu_spread_before_the_audit_is_the_nodes_population_stdev(self) -> None:
        s = self.run_with(SeriesDatasource(self.model, HOT))
        assert s.sd_before == pytest.approx(statistics.pstdev(HOT.values()))

    def test_an_audits_alpha_is_the_threshold_used(self) -> None:
        # hostname_0 at 0.90: hot below alpha 0.90 (the default 0.75 too), not at 0.95.
        assert self.run_with(SeriesDatasource(self.model, HOT), alpha=0.85).migrations == 1
        assert self.run_with(SeriesDatasource(self.model, HOT), alpha=0.95).migrations == 0

    def test_a_node_without_cpu_data_is_neither_source_nor_target(self) -> None:
        # The coldest node has RAM data but no CPU series: it is no target, so the VM goes
        # to the next coldest (0.20; hostname_1 first by name).
        class NoCpu(SeriesDatasource):
            def values(self, resource: Any, meter_name: str) -> list[float]:
                if resource.hostname == "hostname_4" and meter_name == "host_cpu_usage":
                    return []
                return super().values(resource, meter_name)

        s = self.run_with(NoCpu(self.model, HOT))
        assert "hostname_4" not in s.signals
        assert s.signals["hostname_0"].target not in (None, "hostname_4")
