"""Sova's ports under ML2/OVN: Neutron's ``ovn`` and ``sriovnicswitch`` mechanism drivers against
real OVN northbound and southbound databases (neutron env).

Two ``ovsdb-server`` processes serve the ``OVN_Northbound`` and ``OVN_Southbound`` schemas
Debian's ``ovn-central`` ships, on unix sockets in a temporary directory, and ``ovn-northd``
turns the northbound into the southbound's logical flows, as Neutron's own functional tests
run them (their fixtures are reused); Neutron's database is SQLite. The chassis are southbound
rows (no ``ovn-controller``, no VF: the data path is not run here): ``cmp1`` the compute host
with the SR-IOV agent, ``gw1`` a gateway chassis (``ovn-cms-options=enable-chassis-as-gw``)
mapping the VLAN's physnet. What is asserted is what the northbound database holds for the
ports Sova creates, binds and deletes through Neutron's HTTP API, the logical flows that make
the agent refuse the fast path on ML2/OVN, and that refusal (docs/openstack.md#ml2ovn).

Run with ``scripts/openstack-envs.sh test neutron``; skipped, saying why, where the OVN
binaries or schemas are missing (``apt-get install ovn-central``).
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

plugin_tests = pytest.importorskip(
    "neutron.tests.unit.plugins.ml2.test_plugin",
    reason="needs the pinned neutron environment: scripts/openstack-envs.sh test neutron",
)

OVN_TOOLS = ("ovsdb-server", "ovsdb-tool", "ovs-appctl", "ovn-northd", "ovn-sbctl")
OVN_SHARE = Path("/usr/share/ovn")
_missing = [t for t in OVN_TOOLS if shutil.which(t) is None] + [
    str(OVN_SHARE / s)
    for s in ("ovn-nb.ovsschema", "ovn-sb.ovsschema")
    if not (OVN_SHARE / s).is_file()
]
if _missing:
    pytest.skip(
        f"ML2/OVN tier needs {', '.join(_missing)} (Debian: apt-get install ovn-central)",
        allow_module_level=True,
    )

from neutron.tests.common import helpers  # noqa: E402
from neutron.tests.functional import base as functional  # noqa: E402
from test_os_neutron import (  # noqa: E402
    NovaPortSide,
    sdk_client,
    serve_neutron_api,
    vlan_network,
)

from sova.orchestrator.openstack_cloud import PORT_PREFIX, SOVA_TAG, vf_port_attrs  # noqa: E402

pytestmark = pytest.mark.openstack

OVN = functional.TestOVNFunctionalBase


class TestSovaPortsOnOvn(plugin_tests.Ml2PluginV2TestCase):
    """Neutron's ML2 with ``ovn,sriovnicswitch`` (the mechanism drivers of an SR-IOV cloud on
    OVN), the OVN L3 plugin, port security, on real OVN databases."""

    _mechanism_drivers = ["logger", "ovn", "sriovnicswitch"]
    l3_plugin = OVN.l3_plugin
    # Neutron's functional OVN base needs MySQL; its OVN parts (servers, IDLs, northd, fake
    # chassis) do not, and are borrowed as they are.
    OVS_DISTRIBUTION, OVN_DISTRIBUTION = OVN.OVS_DISTRIBUTION, OVN.OVN_DISTRIBUTION
    OVN_SCHEMA_FILES = OVN.OVN_SCHEMA_FILES
    _counter = 0
    preSetUp = OVN.preSetUp
    _get_install_share_path = OVN._get_install_share_path
    _start_ovsdb_server = OVN._start_ovsdb_server
    _start_idls = OVN._start_idls
    _start_ovn_northd = OVN._start_ovn_northd
    _ovsdb_protocol = OVN._ovsdb_protocol
    get_ovsdb_server_protocol = OVN.get_ovsdb_server_protocol
    stop = OVN.stop
    add_fake_chassis = OVN.add_fake_chassis
    _reset_agent_cache_singleton = OVN._reset_agent_cache_singleton
    _reset_ovn_client_placement_extension = OVN._reset_ovn_client_placement_extension

    def get_additional_service_plugins(self) -> dict[str, str]:
        # As deployed: the tag plugin (Sova's mark), and the revision and segments plugins
        # the OVN driver relies on.
        return {
            "tag": "tag",
            "revision_plugin_name": "revisions",
            "segments": "neutron.services.segments.plugin.Plugin",
        }

    def _setup_database_fixtures(self) -> None:
        """Neutron's database as a SQLite file (the unit tests' is one in-memory connection):
        the OVN driver's event thread reads it while the API thread writes, each on a
        connection of its own, as they would on a server."""
        import sqlalchemy
        from neutron_lib import fixture as lib_fixtures

        engine = sqlalchemy.create_engine(
            f"sqlite:///{self.temp_dir}/neutron.sqlite",
            connect_args={"check_same_thread": False, "timeout": 30},
        )

        class FileSqlFixture(lib_fixtures.SqlFixture):
            def _init_resources(self) -> None:
                self.engine = engine
                self._generate_schema(engine)

        self.engine = self.useFixture(FileSqlFixture()).engine

    def setUp(self) -> None:
        from unittest import mock

        from neutron.common import wsgi_utils
        from neutron.conf.plugins.ml2.drivers.ovn import ovn_conf
        from oslo_config import cfg

        cfg.CONF.set_override("extension_drivers", ["port_security"], group="ml2")
        # OVN's tenant networks are Geneve, whose header OVN needs 38 bytes of.
        cfg.CONF.set_override("project_network_types", ["geneve"], group="ml2")
        cfg.CONF.set_override("vni_ranges", ["1:500"], group="ml2_type_geneve")
        cfg.CONF.set_override("max_header_size", 38, group="ml2_type_geneve")
        ovn_conf.register_opts()
        mock.patch.object(wsgi_utils, "get_api_worker_count", return_value=1).start()
        self.maintenance_worker = False
        self.ovn_northd_mgr = None
        super().setUp()  # preSetUp: the NB and SB ovsdb-servers
        self.mech_driver = self.plugin.mechanism_manager.mech_drivers["ovn"].obj
        # The maintenance thread and hash-ring health checks are periodic fixes of drift;
        # nothing here drifts, and they would outlive the test.
        for name in ("MaintenanceThread", "HashRingHealthCheckPeriodics"):
            mock.patch(
                f"neutron.plugins.ml2.drivers.ovn.mech_driver.ovsdb.maintenance.{name}"
            ).start()
        # The IDL thread's hash-ring heartbeat (every 15 s) is a database write. On SQLite,
        # one writer at a time, it would wait for an API request's transaction that is itself
        # waiting for that thread (an OVSDB liveness check in sriovnicswitch's precommit): 30 s
        # of deadlock, then a 500. MySQL's row locks do not meet; here it runs beside the IDL.
        from neutron.db import ovn_hash_ring_db

        touch = ovn_hash_ring_db.touch_node

        def touch_aside(ctx: Any, node_uuid: str) -> None:
            threading.Thread(target=touch, args=(ctx, node_uuid), daemon=True).start()

        mock.patch.object(ovn_hash_ring_db, "touch_node", touch_aside).start()
        self._start_idls()
        self._start_ovn_northd()
        self.addCleanup(self._reset_agent_cache_singleton)
        self.addCleanup(self._reset_ovn_client_placement_extension)
        helpers.register_sriovnicswitch_agent(host="cmp1", device_mappings={"physnet1": ["ens1f0"]})
        # No availability zones: a network without AZ hints takes only chassis without any.
        self.add_fake_chassis("cmp1", physical_nets=["physnet1"], name="cmp1", azs=[])
        self.add_fake_chassis(
            "gw1", physical_nets=["physnet1"], name="gw1", azs=[], enable_chassis_as_gw=True
        )
        url = serve_neutron_api(self)
        self.sdk = sdk_client(url, "sova", "admin,member,reader")
        self.nova_sdk = sdk_client(url, "nova", "admin,service")
        self.tenant_sdk = sdk_client(url, "tenant", "member,reader", self._project_id)

    # ------------------------------------------------------------------ the databases

    def lsp(self, port_id: str) -> Any:
        """The port's Logical_Switch_Port row in the northbound database, or None."""
        return self.nb_api.lookup("Logical_Switch_Port", port_id, default=None)

    def nb_show(self, port_id: str) -> dict[str, Any]:
        row = self.lsp(port_id)
        hcg = row.ha_chassis_group[0] if row.ha_chassis_group else None
        return {
            "type": row.type,
            "addresses": list(row.addresses),
            "port_security": list(row.port_security),
            "options": dict(row.options),
            "ha_chassis_group": None
            if hcg is None
            else {
                "name": hcg.name,
                "chassis": sorted((c.chassis_name, c.priority) for c in hcg.ha_chassis),
            },
        }

    def vlan_network_with_server(self, sid: str) -> tuple[Any, Any]:
        """A VLAN provider network with a subnet, and a server's virtio port on it, bound by
        Nova's side on ``cmp1`` (the OVN driver binds it: cmp1 is a chassis)."""
        net = vlan_network(self.sdk, self._project_id, cidr="192.0.2.0/24")
        virtio = self.sdk.create_port(network_id=net.id, project_id=self._project_id)
        virtio = self.nova_sdk.update_port(
            virtio.id,
            **{"binding:host_id": "cmp1", "device_id": sid, "device_owner": "compute:nova"},
        )
        assert virtio.binding_vif_type == "ovs", virtio.binding_vif_type
        return net, virtio

    def actuator(self, nova: NovaPortSide, network: str | None = None) -> Any:
        from sova.orchestrator.openstack import OpenStackActuator

        conn = SimpleNamespace(network=self.sdk, compute=nova)
        return OpenStackActuator(conn, "cmp1", network=network, spawn=lambda fn: fn(), poll_s=0.05)

    def sova_port_bound(self, net: Any, virtio: Any, sid: str, nova: NovaPortSide) -> Any:
        """Sova's VF port for ``vm1`` made with the actuator's own calls (create with
        :func:`vf_port_attrs` and the virtio port's address, then its tag), attached by
        Nova's side: what the agent would have made before it refused ML2/OVN."""
        ip = virtio.fixed_ips[0]["ip_address"]
        port = self.sdk.create_port(
            **vf_port_attrs("vm1", net.id, self._project_id, (ip,), host="cmp1")
        )
        self.sdk.add_tag(port, SOVA_TAG)
        nova.create_server_interface(nova.by_name["vm1"], port.id)
        return self.sdk.get_port(port.id)

    def logical_flows(self, *needles: str) -> list[str]:
        """ovn-northd's southbound logical flows mentioning every one of ``needles``."""
        sb = self.ovsdb_server_mgr.get_ovsdb_connection_path("sb")
        out = subprocess.run(
            ["ovn-sbctl", f"--db={sb}", "--timeout=10", "lflow-list"],
            capture_output=True,
            text=True,
            check=True,
            timeout=20,
        ).stdout
        return [" ".join(f.split()) for f in out.splitlines() if all(n in f for n in needles)]

    # ------------------------------------------------------------------ tests

    def test_sova_vf_port_is_an_external_lsp_carrying_the_pair_until_sova_deletes_it(
        self,
    ) -> None:
        from sova.driver.base import OpState
        from sova.model import NIC, VM, DetachVF, Host, Inventory, VMState

        sid = "9a1c5c8e-0000-4000-8000-0000000000a1"
        net, virtio = self.vlan_network_with_server(sid)
        ip = virtio.fixed_ips[0]["ip_address"]
        nova = NovaPortSide(self.nova_sdk, "cmp1", {"vm1": sid}, self._project_id)
        port = self.sova_port_bound(net, virtio, sid, nova)
        # Under OVN the VF port is still bound by sriovnicswitch (OVN binds no direct port
        # without the switchdev capability), hw_veb on the VLAN.
        assert port.tags == [SOVA_TAG] and port.name == PORT_PREFIX + "vm1"
        assert port.binding_host_id == "cmp1" and port.binding_vif_type == "hw_veb"
        assert port.binding_vif_details["bound_drivers"] == {"0": "sriovnicswitch"}
        assert str(port.binding_vif_details["vlan"]) == "42"
        nb = self.nb_show(port.id)
        print(f"NB Logical_Switch_Port of Sova's VF port {port.id}: {nb}")
        # OVN's own view: an external port, its MAC only as address (no fixed IP), its port
        # security the VF's MAC with the virtio port's IP (the allowed-address pair), and
        # answered (ARP, DHCP, metadata) from the network's HA chassis group: the gateway
        # chassis mapping physnet1, never the compute host.
        assert nb["type"] == "external"
        assert nb["addresses"] == [port.mac_address]
        assert nb["port_security"] == [f"{port.mac_address} {ip}"]
        assert nb["ha_chassis_group"] == {"name": f"neutron-{net.id}", "chassis": [("gw1", 32767)]}
        # The virtio port stays an ordinary VIF bound to cmp1, with its own MAC and IP.
        vnb = self.nb_show(virtio.id)
        assert vnb["type"] == "" and vnb["addresses"] == [f"{virtio.mac_address} {ip}"]
        assert vnb["options"].get("requested-chassis") == "cmp1"

        act = self.actuator(nova)
        sensed = Inventory(
            Host("cmp1", 8, 16 << 30, NIC("pf0", 10e9, vf_pool=1)),
            {"vm1": VMState(VM("vm1", 1, 512 << 20))},
        )
        assert act.reconcile(sensed).vf_holders == frozenset({"vm1"})
        st = act.poll(act.submit(DetachVF("vm1")))
        assert st.state is OpState.SUCCEEDED, st.detail
        assert nova.calls == [("attach", port.id), ("detach", port.id)]
        assert [p.id for p in self.sdk.ports(network_id=net.id)] == [virtio.id]
        assert self.lsp(port.id) is None  # OVN's row went with Neutron's port
        assert self.lsp(virtio.id) is not None
        assert act.reconcile(sensed).vf_holders == frozenset()

    def test_agent_refuses_the_fast_path_where_ovn_pins_the_address_to_the_virtio_mac(
        self,
    ) -> None:
        """Why Sova refuses ML2/OVN, from ovn-northd's own flows: the logical switch answers
        ARP for the guest's address with the virtio port's MAC (to every OVN port but the
        localnet one), and a Neutron router on the subnet resolves it to that MAC statically.
        Under the bond's VF (``fail_over_mac=active``) frames to the virtio MAC reach the
        inactive slave, which drops them. So the agent's attach fails with one line and
        makes no port: the network holds the virtio, localnet and router LSPs only."""
        from neutron.common import utils as n_utils

        from sova.driver.base import OpState
        from sova.model import AttachVF

        sid = "9a1c5c8e-0000-4000-8000-0000000000a2"
        net, virtio = self.vlan_network_with_server(sid)
        ip, mac = virtio.fixed_ips[0]["ip_address"], virtio.mac_address
        [subnet] = list(self.sdk.subnets(network_id=net.id))
        router = self.sdk.create_router(name="r1", project_id=self._project_id)
        self.sdk.add_interface_to_router(router, subnet_id=subnet.id)
        n_utils.wait_until_true(
            lambda: bool(self.logical_flows("lr_in_arp_resolve", f"== {ip})")), timeout=20
        )
        arp = self.logical_flows("ls_in_arp_rsp", f"arp.tpa == {ip} && arp.op == 1)")
        print("northd's ARP flows for the guest:", *arp, sep="\n  ")
        assert len(arp) == 1 and f"eth.src = {mac};" in arp[0], arp
        [resolve] = self.logical_flows("lr_in_arp_resolve", f"== {ip})")
        print("northd's router resolution:", resolve)
        assert f"eth.dst = {mac};" in resolve

        nova = NovaPortSide(self.nova_sdk, "cmp1", {"vm1": sid}, self._project_id)
        act = self.actuator(nova)
        st = act.poll(act.submit(AttachVF("vm1")))
        assert st.state is OpState.FAILED
        assert st.detail == (
            f"vm1's virtio port {virtio.id} is bound by ML2/OVN, which answers ARP for the "
            "guest's address with the virtio port's MAC: traffic would not follow the bond to "
            "a VF (docs/openstack.md#ml2ovn)"
        )
        assert nova.calls == []
        lsps = self.nb_api.ls_get(f"neutron-{net.id}").execute(check_error=True).ports
        assert sorted(p.type for p in lsps) == ["", "localnet", "router"]  # no external one

    def test_tenants_direct_port_and_its_lsp_untouched_by_reconcile_sweep_and_revoke(self) -> None:
        """A tenant's own direct port on the same network and host (its own name like Sova's,
        bound hw_veb by Nova's side) next to a Sova port Nova left unbound: Sova's reconcile
        counts the tenant's VF out of its pool and sweeps only its own leaked port (and OVN's
        row for it), a revoke of the tenant's VM refuses, and the tenant's port and its
        external LSP stay as they were."""
        from sova.driver.base import OpState
        from sova.model import NIC, VM, DetachVF, Host, Inventory, NicKind, VMState

        sid = "9a1c5c8e-0000-4000-8000-0000000000a3"
        net, virtio = self.vlan_network_with_server(sid)
        theirs = self.tenant_sdk.create_port(
            network_id=net.id, name=PORT_PREFIX + "vm3", binding_vnic_type="direct"
        )
        nova = NovaPortSide(self.nova_sdk, "cmp1", {"vm3": sid}, self._project_id)
        nova.create_server_interface(nova.by_name["vm3"], theirs.id)
        leaked = self.sdk.create_port(
            **vf_port_attrs("gone", net.id, self._project_id, host="cmp1")
        )
        self.sdk.add_tag(leaked, SOVA_TAG)
        before = self.nb_show(theirs.id)
        assert before["type"] == "external" and self.nb_show(leaked.id)["type"] == "external"

        act = self.actuator(nova)
        sensed = Inventory(
            Host("cmp1", 8, 16 << 30, NIC("pf0", 10e9, vf_pool=4)),
            {"vm3": VMState(VM("vm3", 1, 512 << 20), nic=NicKind.VF)},
        )
        inv = act.reconcile(sensed)  # its first period sweeps
        assert inv.host.nic.vf_pool == 3  # 4 VFs - the tenant's 1
        assert inv.vf_holders == frozenset()
        assert f"leaked Sova port {leaked.id} deleted" in act.discrepancies
        assert self.lsp(leaked.id) is None
        st = act.poll(act.submit(DetachVF("vm3")))
        assert st.state is OpState.FAILED and "not Sova's" in st.detail, st.detail
        assert act.sweep_leaked_ports() == []
        assert nova.calls == [("attach", theirs.id)]
        kept = self.sdk.get_port(theirs.id)
        assert kept.device_id == sid and kept.binding_vif_type == "hw_veb"
        assert self.nb_show(theirs.id) == before
        assert {p.id for p in self.sdk.ports(network_id=net.id)} == {virtio.id, theirs.id}
