"""Sova's Watcher strategy: the edges the mutation run (scripts/mutation-openstack.sh) found
no test for, on Watcher's scenario_1 model as in test_os_watcher.py. Each test here failed
on the mutant it is named for (the watcher env)."""

from __future__ import annotations

import pathlib
import statistics
import sys
import types
from typing import Any
from unittest import mock

import pytest

pytest.importorskip(
    "watcher.tests.unit",
    reason="needs the pinned watcher environment: scripts/openstack-envs.sh test watcher",
)

import jsonschema
from watcher.common import utils
from watcher.decision_engine.datasources import gnocchi
from watcher.decision_engine.model import element
from watcher.tests.unit.decision_engine.model import faker_cluster_state
from watcher.tests.unit.decision_engine.strategy.strategies.test_base import (
    TestBaseStrategy,
)

from sova.openstack.watcher_strategy import SovaHotspot

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from test_os_watcher import HOT, INSTANCE_0, MeansDatasource, SeriesDatasource, no_vf_ports

pytestmark = pytest.mark.openstack

INSTANCE_1 = "d010ef1f-dc19-4982-9383-087498bfde03"


class TestStrategyEdges(TestBaseStrategy):
    def setUp(self) -> None:
        super().setUp()
        self.model = faker_cluster_state.FakerModelCollector().generate_scenario_1()
        self.m_c_model.return_value = self.model
        p = mock.patch.object(SovaHotspot, "datasource_backend", new_callable=mock.PropertyMock)
        self.m_ds = p.start()
        self.addCleanup(p.stop)
        no_vf_ports(self)

    def run_with(self, ds: Any, config: Any = None, **params: Any) -> SovaHotspot:
        self.m_ds.return_value = ds
        if config is None:
            config = mock.Mock(datasources=None, check_optimize_metadata=False)
        strategy = SovaHotspot(config=config)
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

    def moves(self, s: SovaHotspot) -> list[tuple[str, str, str]]:
        return [
            (sig.vm, src, sig.target)
            for src, sig in sorted(s.signals.items())
            if sig.flag and sig.vm and sig.target
        ]

    def test_cpu_spread_after_the_audit_moves_the_vms_share_of_the_newest_period(self) -> None:
        # hostname_0's newest period is 0.85 (k = 3 of 5 over 0.75: hot). INSTANCE_0 at 100 %
        # of its 10 vCPUs on a 40-vCPU node is 0.25 of the node: 0.85 - 0.25 = 0.60 left, and
        # hostname_4 (40 vCPUs as well) goes from 0.05 to 0.30.
        cpu: dict[str, Any] = {**HOT, "hostname_0": [0.9, 0.9, 0.9, 0.9, 0.85]}
        s = self.run_with(SeriesDatasource(self.model, cpu))
        assert self.moves(s) == [(INSTANCE_0, "hostname_0", "hostname_4")]
        assert s.sd_before == pytest.approx(statistics.pstdev([0.85, 0.2, 0.2, 0.2, 0.05]))
        assert s.sd_after == pytest.approx(statistics.pstdev([0.60, 0.2, 0.2, 0.2, 0.30]))

    def test_a_vm_without_a_usage_figure_counts_as_idle(self) -> None:
        # Watcher's datasources answer None for an instance without samples: its CPU share
        # is 0, and moving an idle VM off a CPU hotspot relieves nothing, so it stays.
        # INSTANCE_1 is excluded, which leaves INSTANCE_0 the only candidate on hostname_0.
        class NoVmUsage(SeriesDatasource):
            def get_instance_cpu_usage(self, *a: Any, **kw: Any) -> Any:
                return None

        self.model.get_instance_by_uuid(INSTANCE_1).watcher_exclude = True
        assert self.run_with(SeriesDatasource(self.model, HOT)).migrations == 1
        s = self.run_with(NoVmUsage(self.model, HOT))
        assert s.migrations == 0
        assert not s.signals["hostname_0"].flag

    def test_a_node_over_full_cpu_counts_as_full(self) -> None:
        # A sample above 100 % (rounding across sockets) is capped at the node's capacity.
        s = self.run_with(SeriesDatasource(self.model, {**HOT, "hostname_0": 1.5}))
        assert s.sd_before == pytest.approx(statistics.pstdev([1.0, 0.2, 0.2, 0.2, 0.05]))

    def test_a_cluster_without_data_has_no_spread_and_no_move(self) -> None:
        class Empty(SeriesDatasource):
            def values(self, resource: Any, meter_name: str) -> list[float]:
                return []

        s = self.run_with(Empty(self.model, HOT))
        assert (s.migrations, s.sd_before, s.sd_after) == (0, 0.0, 0.0)
        assert isinstance(s.sd_before, float) and isinstance(s.sd_after, float)

    def test_the_audits_hotness_metric_ranks_the_cold_spots(self) -> None:
        # Every node is at 30 % RAM. hostname_4 at 30 % CPU is evenly loaded (skewness 0)
        # but carries more than the three nodes at 20 % (volume 1/(0.7·0.7) against
        # 1/(0.8·0.7)): skewness sends the VM there, volume to hostname_1 (first by name).
        cpu = {**HOT, "hostname_4": 0.30}
        volume = self.run_with(SeriesDatasource(self.model, cpu), metric="volume")
        skewness = self.run_with(SeriesDatasource(self.model, cpu), metric="skewness")
        assert self.moves(volume) == [(INSTANCE_0, "hostname_0", "hostname_1")]
        assert self.moves(skewness) == [(INSTANCE_0, "hostname_0", "hostname_4")]

    def test_meters_asked_are_the_declared_ones_and_watchers_datasources_map_them(self) -> None:
        # Watcher picks a datasource that maps every name in DATASOURCE_METRICS; a meter asked
        # under another name gets no data (here: none at all, so no report and no move).
        asked: set[str] = set()

        class Strict(SeriesDatasource):
            def values(self, resource: Any, meter_name: str) -> list[float]:
                asked.add(meter_name)
                if meter_name not in ("host_cpu_usage", "host_ram_usage"):
                    return []
                return super().values(resource, meter_name)

            def get_instance_cpu_usage(
                self, instance: Any, period: int, aggregate: str, granularity: int
            ) -> float:
                asked.add("instance_cpu_usage")
                # The VM's mean over one granularity period, as the hosts' periods.
                assert (period, aggregate, granularity) == (300, "mean", 300)
                return super().get_instance_cpu_usage(instance, period, aggregate, granularity)

        s = self.run_with(Strict(self.model, HOT))
        assert self.moves(s) == [(INSTANCE_0, "hostname_0", "hostname_4")]
        assert asked == set(SovaHotspot.DATASOURCE_METRICS)
        assert asked <= set(gnocchi.GnocchiHelper.METRIC_MAP)

    def test_a_disabled_or_down_node_is_no_target(self) -> None:
        cold = self.model.get_node_by_name("hostname_4")
        for status, state in (
            (element.ServiceState.DISABLED.value, element.ServiceState.ONLINE.value),
            (element.ServiceState.ENABLED.value, element.ServiceState.OFFLINE.value),
        ):
            cold.status, cold.state = status, state
            s = self.run_with(SeriesDatasource(self.model, HOT))
            assert "hostname_4" not in s.signals, (status, state)
            assert self.moves(s) == [(INSTANCE_0, "hostname_0", "hostname_1")], (status, state)

    def test_an_instance_whose_metadata_says_optimize_false_stays_when_the_audit_checks_it(
        self,
    ) -> None:
        self.model.get_instance_by_uuid(INSTANCE_0).metadata = {"optimize": "false"}
        for check, moved in ((True, INSTANCE_1), (False, INSTANCE_0)):
            config = types.SimpleNamespace(datasources=None, check_optimize_metadata=check)
            s = self.run_with(SeriesDatasource(self.model, HOT), config=config)
            assert [vm for vm, _, _ in self.moves(s)] == [moved], check

    def test_a_node_with_exactly_the_vms_size_free_is_a_target(self) -> None:
        # INSTANCE_0 is 10 vCPUs, 2 MB, 20 GB; hostname_4 has exactly that free, every other
        # node nothing (INSTANCE_1, 11 vCPUs, fits nowhere).
        inst = self.model.get_instance_by_uuid(INSTANCE_0)

        def free(node: Any) -> dict[str, int]:
            if node.hostname == "hostname_4":
                return {"vcpu": inst.vcpus, "memory": inst.memory, "disk": inst.disk}
            return {"vcpu": 0, "memory": 0, "disk": 0}

        with mock.patch.object(self.model, "get_node_free_resources", side_effect=free):
            s = self.run_with(SeriesDatasource(self.model, HOT))
        assert self.moves(s) == [(INSTANCE_0, "hostname_0", "hostname_4")]

    def test_a_negative_period_derived_from_inconsistent_means_is_zero(self) -> None:
        # Means of 90 % over the last period and 40 % over the last two give
        # 2·40 − 90 = −10 % for the older period (sparse samples in Prometheus do this).
        class Inconsistent(MeansDatasource):
            def statistic_aggregation(self, resource: Any, *a: Any, **kw: Any) -> float:
                return {300: 90.0, 600: 40.0}[kw["period"]]

        self.m_ds.return_value = Inconsistent(self.model, HOT)
        strategy = SovaHotspot(config=mock.Mock(datasources=None, check_optimize_metadata=False))
        strategy.input_parameters = utils.Struct({"granularity": 300})
        node = self.model.get_node_by_name("hostname_0")
        assert strategy._series(node, "host_cpu_usage", 2) == [0.0, 90.0]

    def test_the_schema_types_n_and_granularity_and_offers_skewness(self) -> None:
        check = utils.StrictDefaultValidatingDraft4Validator(SovaHotspot.get_schema()).validate
        check({"metric": "skewness"})
        for bad in ({"n": 2.5}, {"n": "5"}, {"granularity": 1.5}, {"granularity": "300"}):
            with pytest.raises(jsonschema.ValidationError):
                check(dict(bad))
