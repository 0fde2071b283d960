"""Sova's Watcher strategy with the network side (the OpenStack tier, watcher env).

Each node's link use and each VM's share of it come from Sova's manager (``sova_url``, a
viewer token), here a stand-in answering ``GET /v1/cluster`` and ``/v1/cluster/history``
over loopback HTTP in the manager's JSON shape (tests/openstack/test_sova_loads.py checks
the parser against the manager's own schema). VF holders come from Neutron's ports bound on
each node, read from the in-memory cloud of the main suite (tests/openstack/fakecloud.py)
through the openstacksdk connection Watcher would make. CPU and RAM series come from the
datasource as in test_os_watcher.py (Watcher's scenario_1: five 40-vCPU nodes; hostname_0
holds INSTANCE_0, 10 vCPUs and 2 MB, and INSTANCE_1, 11 vCPUs and 3 MB).

Run with ``scripts/openstack-envs.sh test watcher``.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time
from typing import Any
from unittest import mock

import pytest

pytest.importorskip(
    "watcher.tests.unit",
    reason="needs the pinned watcher environment: scripts/openstack-envs.sh test watcher",
)

from oslo_config import cfg
from watcher import objects
from watcher.common import clients, utils
from watcher.tests.unit.db import base as db_base
from watcher.tests.unit.decision_engine.model import faker_cluster_state
from watcher.tests.unit.decision_engine.strategy.strategies.test_base import (
    TestBaseStrategy,
)

from sova.openstack import sova_loads
from sova.openstack.watcher_strategy import SovaHotspot
from sova.orchestrator.openstack_cloud import SOVA_TAG

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # tests/openstack
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from fakecloud import FakeCloud, Port, Server
from test_os_watcher import HOT, INSTANCE_0, SeriesDatasource, run_sova_audit, sova_audit

pytestmark = pytest.mark.openstack

HERE = pathlib.Path(__file__).resolve().parent

INSTANCE_1 = "d010ef1f-dc19-4982-9383-087498bfde03"
HOSTS = [f"hostname_{i}" for i in range(5)]
TOKEN = "viewer-token-0123456789abcdef"
COOL_CPU = dict.fromkeys(HOSTS, 0.30)
# Link use per report, oldest first: hostname_0 network-hot for its last five, the others cool.
NET_HOT = {
    "hostname_0": [0.30, 0.90, 0.92, 0.95, 0.93, 0.94],
    "hostname_1": [0.20] * 6,
    "hostname_2": [0.20] * 6,
    "hostname_3": [0.20] * 6,
    "hostname_4": [0.05] * 6,
}
# Over α in three of its last five reports (k of n holds), the newest two back at 0.30: the
# AR(1) forecast of the next report is below α = 0.75, so no hotspot.
NET_COOLING = {**NET_HOT, "hostname_0": [0.30, 0.90, 0.92, 0.95, 0.30, 0.30]}
# Each VM's share of its node's link, by the name Sova's agent reports (its UUID here).
VM_NET = {INSTANCE_0: 0.05, INSTANCE_1: 0.60}


class SovaManagerStandIn:
    """Sova's manager's two reads (tests/openstack/sova_manager_standin.py, a process of its
    own), answering a viewer token only; each attribute set here is its next answer."""

    def __init__(self, tmp: pathlib.Path) -> None:
        self._state = tmp / "sova-state.json"
        self.__dict__.update(net={}, vm_net={}, stale=set(), pinned={})
        self._save()
        ports = tmp / "sova-port"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(HERE.parent / "sova_manager_standin.py"),
                str(self._state),
                str(ports),
            ]
        )
        deadline = time.monotonic() + 30
        while not ports.exists() or not ports.read_text():
            assert time.monotonic() < deadline and self.proc.poll() is None, (
                "stand-in did not start"
            )
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{int(ports.read_text())}"

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name in ("net", "vm_net", "stale", "pinned"):
            self._save()

    def _save(self) -> None:
        state = {k: self.__dict__.get(k) for k in ("net", "vm_net", "pinned")}
        state |= {"stale": sorted(self.__dict__.get("stale", ())), "token": TOKEN}
        self._state.write_text(json.dumps(state))

    @property
    def asked(self) -> list[str]:
        path = self._state.with_suffix(".asked")
        return path.read_text().split() if path.exists() else []

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


class NetworkCase:
    """What every test here sets up: the manager stand-in, the cloud, the token file."""

    def set_up_network(self, case: Any, tmp: pathlib.Path) -> None:
        self.sova = SovaManagerStandIn(tmp)
        case.addCleanup(self.sova.close)
        self.sova.net = {h: list(s) for h, s in NET_HOT.items()}
        self.sova.vm_net = {"hostname_0": dict(VM_NET)}
        self.cloud = FakeCloud()
        for i, uuid in ((0, INSTANCE_0), (1, INSTANCE_1)):
            # A tenant's servers: Nova lists them to Watcher's admin with all_projects only.
            self.cloud.servers[uuid] = Server(
                uuid, f"INSTANCE_{i}", "hostname_0", "tenant", f"instance-0000000{i}"
            )
        p = mock.patch.object(clients, "get_sdk_connection", return_value=self.cloud, autospec=True)
        p.start()
        case.addCleanup(p.stop)
        self.token_file = tmp / "sova-viewer-token"
        self.token_file.write_text(TOKEN + "\n")

    def sova_config(self, **kw: Any) -> Any:
        """What Watcher's loader gives the strategy from watcher.conf (``kw`` overrides)."""
        opts = {"sova_url": self.sova.url, "sova_token_file": str(self.token_file)}
        opts |= {"sova_ca_file": None, "sova_timeout": 5.0}
        return mock.Mock(datasources=None, check_optimize_metadata=False, **(opts | kw))

    def vf_port(self, uuid: str, *, sova: bool) -> None:
        """A VF port bound to ``uuid`` on hostname_0: Sova's (tagged) or the tenant's own."""
        pid = f"vf-{uuid[:8]}"
        tags = [SOVA_TAG] if sova else []
        self.cloud.ports[pid] = Port(
            pid, pid, "net-data", "proj", uuid, "direct", "hostname_0", tags=tags
        )


class TestNetworkSide(TestBaseStrategy, NetworkCase):
    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path: pathlib.Path) -> None:
        self.tmp = tmp_path

    def setUp(self) -> None:
        super().setUp()
        self.model = faker_cluster_state.FakerModelCollector().generate_scenario_1()
        self.m_c_model.return_value = self.model
        p = mock.patch.object(SovaHotspot, "datasource_backend", new_callable=mock.PropertyMock)
        self.m_ds = p.start()
        self.addCleanup(p.stop)

    def run_with(self, cpu: dict[str, Any], vm_cpu: float = 20.0, **params: Any) -> SovaHotspot:
        if not hasattr(self, "sova"):
            self.set_up_network(self, self.tmp)
        self.m_ds.return_value = SeriesDatasource(self.model, cpu, vm_cpu=vm_cpu)
        strategy = SovaHotspot(config=self.sova_config())
        strategy.input_parameters = utils.Struct(
            {"alpha": 0.75, "k": 3, "n": 5, "metric": "volume", "ceiling": None}
            | {"granularity": 300, **params}
        )
        strategy.execute()
        return strategy

    @staticmethod
    def moves(s: SovaHotspot) -> list[tuple[str, str, str]]:
        return [
            (a["input_parameters"]["resource_name"], a["input_parameters"]["source_node"])
            + (a["input_parameters"]["destination_node"],)
            for a in s.solution.actions
        ]

    def test_network_hot_node_with_cool_cpu_moves_its_network_heaviest_vm(self) -> None:
        # CPU 30 % everywhere (not hot); hostname_0's link at 0.90-0.95 in its last five
        # reports. The VMs at 20 % of their vCPUs: INSTANCE_0 (cpu 0.05, mem 2/132, net 0.05)
        # has volume 1/(0.95·0.985·0.95) = 1.125, per 2 MB 0.56; INSTANCE_1 (cpu 0.055,
        # mem 3/132, net 0.60) 1/(0.945·0.977·0.40) = 2.71, per 3 MB 0.90: it moves, to
        # hostname_4 (link 0.05 + 0.60 = 0.65 < α; coldest).
        s = self.run_with(COOL_CPU)
        assert self.moves(s) == [("INSTANCE_1", "hostname_0", "hostname_4")], s.signals
        assert s.signals["hostname_0"].flag
        assert self.sova.asked == ["/v1/cluster", "/v1/cluster/history"]

    def test_cpu_hot_node_moves_as_before_to_a_target_cold_on_the_network_too(self) -> None:
        # HOT: hostname_0 at 90 % CPU, its link cool. Without a network view INSTANCE_0 goes
        # to hostname_4 (CPU 5 %). Here hostname_4's link is at 0.70: with INSTANCE_0's 0.10
        # it would be over α, so the cold spot is hostname_1 (CPU 20 %, link 0.10, the
        # coldest of the rest).
        self.set_up_network(self, self.tmp)
        cool = [0.30] * 6
        self.sova.net = {
            "hostname_0": cool,
            "hostname_1": [0.10] * 6,
            "hostname_2": [0.15] * 6,
            "hostname_3": [0.15] * 6,
            "hostname_4": [0.70] * 6,
        }
        self.sova.vm_net = {"hostname_0": {INSTANCE_0: 0.10, INSTANCE_1: 0.05}}
        assert self.moves(self.run_with(HOT, vm_cpu=100.0)) == [
            ("INSTANCE_0", "hostname_0", "hostname_1")
        ]
        self.sova.net = {**self.sova.net, "hostname_4": [0.05] * 6}  # cool again: as before
        assert self.moves(self.run_with(HOT, vm_cpu=100.0)) == [
            ("INSTANCE_0", "hostname_0", "hostname_4")
        ]

    def test_a_link_that_turns_cool_gets_no_move(self) -> None:
        assert self.moves(self.run_with(COOL_CPU)) == [("INSTANCE_1", "hostname_0", "hostname_4")]
        self.sova.net = {h: list(s) for h, s in NET_COOLING.items()}
        s = self.run_with(COOL_CPU)
        assert self.moves(s) == []
        assert not s.signals["hostname_0"].flag

    def test_a_sova_vf_holder_is_not_moved_the_next_heaviest_is(self) -> None:
        # INSTANCE_1, the network-heaviest, holds Sova's VF: INSTANCE_0 (net 0.05) is the
        # only mover left, and any share of the hot link may move (the papers' rule).
        self.set_up_network(self, self.tmp)
        self.vf_port(INSTANCE_1, sova=True)
        assert self.moves(self.run_with(COOL_CPU)) == [("INSTANCE_0", "hostname_0", "hostname_4")]
        assert self.cloud.calls.count(("ports", {"binding:host_id": "hostname_0"})) == 1

    def test_a_tenants_vf_holder_is_not_moved_off_a_cpu_hotspot(self) -> None:
        # HOT without VF ports moves INSTANCE_0; with the tenant's own direct port on it,
        # INSTANCE_1 (11 vCPUs, fits hostname_4's 30 free) moves instead.
        self.set_up_network(self, self.tmp)
        self.sova.net = {h: [0.10] * 6 for h in HOSTS}
        self.sova.vm_net = {"hostname_0": {INSTANCE_0: 0.05, INSTANCE_1: 0.05}}
        assert self.moves(self.run_with(HOT, vm_cpu=100.0))[0][0] == "INSTANCE_0"
        self.vf_port(INSTANCE_0, sova=False)
        assert self.moves(self.run_with(HOT, vm_cpu=100.0)) == [
            ("INSTANCE_1", "hostname_0", "hostname_4")
        ]
        self.vf_port(INSTANCE_1, sova=True)
        assert self.moves(self.run_with(HOT, vm_cpu=100.0)) == []

    def test_vms_reported_by_their_libvirt_name_are_found_through_nova(self) -> None:
        # Sova's agents name a VM as libvirt does: instance-00000001 is INSTANCE_1 (Nova's
        # OS-EXT-SRV-ATTR:instance_name), found in one listing of hostname_0's servers.
        self.set_up_network(self, self.tmp)
        self.sova.vm_net = {"hostname_0": {"instance-00000000": 0.05, "instance-00000001": 0.6}}
        assert self.moves(self.run_with(COOL_CPU)) == [("INSTANCE_1", "hostname_0", "hostname_4")]
        listed = [kw for call, kw in self.cloud.calls if call == "servers"]
        assert listed == [{"compute_host": "hostname_0", "since": None}]

    def test_a_display_name_that_looks_like_a_libvirt_name_takes_no_vms_load(self) -> None:
        # INSTANCE_0's owner renames it "instance-00000001", INSTANCE_1's libvirt name: the
        # 0.6 of the link is still INSTANCE_1's (Nova's instance_name decides), so it moves.
        self.set_up_network(self, self.tmp)
        self.model.get_instance_by_uuid(INSTANCE_0).name = "instance-00000001"
        self.cloud.servers[INSTANCE_0].name = "instance-00000001"
        self.sova.vm_net = {"hostname_0": {"instance-00000000": 0.05, "instance-00000001": 0.6}}
        assert self.moves(self.run_with(COOL_CPU)) == [("INSTANCE_1", "hostname_0", "hostname_4")]

    def test_a_vm_operators_pinned_in_sova_is_not_moved(self) -> None:
        self.set_up_network(self, self.tmp)
        self.sova.pinned = {"hostname_0": [INSTANCE_1]}
        assert self.moves(self.run_with(COOL_CPU)) == [("INSTANCE_0", "hostname_0", "hostname_4")]

    def test_a_node_sova_sees_stale_or_not_at_all_is_neither_source_nor_target(self) -> None:
        # hostname_4 stale: the coldest left is hostname_1 (link 0.10 + 0.60 = 0.70 < α).
        self.set_up_network(self, self.tmp)
        self.sova.net = {**self.sova.net, "hostname_1": [0.10] * 6}
        self.sova.stale = {"hostname_4"}
        s = self.run_with(COOL_CPU)
        assert "hostname_4" not in s.signals
        assert self.moves(s) == [("INSTANCE_1", "hostname_0", "hostname_1")]
        self.sova.stale = {"hostname_0"}
        self.sova.net = {h: s for h, s in self.sova.net.items() if h != "hostname_4"}
        s = self.run_with(COOL_CPU)
        assert set(s.signals) == {"hostname_1", "hostname_2", "hostname_3"}
        assert self.moves(s) == []

    def test_an_unreadable_manager_fails_the_audit(self) -> None:
        self.set_up_network(self, self.tmp)
        self.token_file.write_text("not-the-viewer-token-000\n")
        with pytest.raises(OSError, match="401"):
            self.run_with(COOL_CPU)
        self.token_file.write_text(TOKEN)
        self.sova.close()
        with pytest.raises(OSError):
            self.run_with(COOL_CPU)

    def test_without_sova_url_network_counts_as_zero(self) -> None:
        self.set_up_network(self, self.tmp)
        self.m_ds.return_value = SeriesDatasource(self.model, COOL_CPU, vm_cpu=20.0)
        strategy = SovaHotspot(config=self.sova_config(sova_url=None))
        strategy.input_parameters = utils.Struct({"n": 5, "k": 3, "alpha": 0.75})
        strategy.execute()
        assert list(strategy.solution.actions) == []
        assert self.sova.asked == []

    def test_sova_url_without_a_token_file_is_refused_in_one_line(self) -> None:
        self.set_up_network(self, self.tmp)
        self.m_ds.return_value = SeriesDatasource(self.model, COOL_CPU)
        strategy = SovaHotspot(config=self.sova_config(sova_token_file=""))
        strategy.input_parameters = utils.Struct({"n": 5})
        with pytest.raises(ValueError, match="^sova_token_file: required with sova_url"):
            strategy.execute()

    def test_the_ca_file_and_the_clients_auth_group_are_the_configured_ones(self) -> None:
        # An https sova_url is verified against watcher.conf's sova_ca_file; Neutron and Nova
        # are asked through Watcher's [watcher_clients_auth] credentials.
        self.set_up_network(self, self.tmp)
        self.m_ds.return_value = SeriesDatasource(self.model, COOL_CPU, vm_cpu=20.0)
        strategy = SovaHotspot(config=self.sova_config(sova_ca_file="/etc/watcher/sova-ca.pem"))
        strategy.input_parameters = utils.Struct({"n": 5, "k": 3, "alpha": 0.75})
        with mock.patch.object(sova_loads, "read", wraps=sova_loads.read) as read:
            strategy.execute()
        [call] = read.call_args_list
        assert call.args == (self.sova.url, TOKEN)
        assert call.kwargs == {"timeout_s": 5.0, "ca_file": "/etc/watcher/sova-ca.pem"}
        clients.get_sdk_connection.assert_called_once_with("watcher_clients_auth")

    def test_watcher_registers_the_sova_options(self) -> None:
        names = {o.name: o for o in SovaHotspot.get_config_opts()}
        assert {"datasources", "sova_url", "sova_token_file", "sova_ca_file"} <= set(names)
        assert names["sova_timeout"].default == 5.0


class TestNetworkAuditThroughWatchersDecisionEngine(db_base.DbTestCase, NetworkCase):
    """Watcher's one-shot audit handler with Sova's strategy, the series changing between
    audits: the action plans it writes follow the link's series."""

    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path: pathlib.Path) -> None:
        self.tmp = tmp_path

    def setUp(self) -> None:
        super().setUp()
        self.audit = sova_audit(self)
        self.model = faker_cluster_state.FakerModelCollector().generate_scenario_1()

    def audit_plan(self) -> list[tuple[str, str, str]]:
        for action in objects.Action.list(self.context):
            action.destroy()
        for plan in objects.ActionPlan.list(self.context):
            plan.destroy()
        run_sova_audit(self, self.model, SeriesDatasource(self.model, COOL_CPU, vm_cpu=20.0))
        [plan] = objects.ActionPlan.list(self.context)
        actions = objects.Action.list(self.context, filters={"action_plan_id": plan.id})
        return [
            (
                a.input_parameters["resource_name"],
                a.input_parameters["source_node"],
                a.input_parameters["destination_node"],
            )
            for a in actions
        ]

    def test_the_plan_follows_the_links_series(self) -> None:
        self.set_up_network(self, self.tmp)
        # watcher.conf's [watcher_strategies.sova_hotspot], which Watcher's loader reads.
        group = "watcher_strategies.sova_hotspot"
        cfg.CONF.register_opts(SovaHotspot.get_config_opts(), group=group)
        self.flags(sova_url=self.sova.url, sova_token_file=str(self.token_file), group=group)
        assert self.audit_plan() == [("INSTANCE_1", "hostname_0", "hostname_4")]
        self.sova.net = {h: list(s) for h, s in NET_COOLING.items()}
        assert self.audit_plan() == []
        self.sova.net = {h: list(s) for h, s in NET_HOT.items()}
        self.vf_port(INSTANCE_1, sova=True)
        assert self.audit_plan() == [("INSTANCE_0", "hostname_0", "hostname_4")]
