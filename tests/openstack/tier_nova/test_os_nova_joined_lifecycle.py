"""Nova's lifecycle operations on the bonded VF holder in the joined run (the OpenStack tier,
nova env; the harness is joined_harness.py): an operator stops and starts it, rebuilds it,
shelves it (offloaded) and unshelves it on the other compute or the same one, cold-migrates
it (confirmed, reverted), each through Nova's API while Sova's agent side (its libvirt driver
with the guest bond, and the OpenStack actuator) holds the VF for it. After each: no Sova port left unbound or on a host
the VM is not on, Nova never unplugged a VF the guest's bond was on, Nova's PCI tracker
frees and claims the VFs on both hosts, and the VM gets the VF of the host it ends on again.

Run with ``scripts/openstack-envs.sh test nova``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

pytest.importorskip(
    "nova.tests.functional.integrated_helpers",
    reason="needs the pinned nova environment: scripts/openstack-envs.sh test nova",
)

import joined_harness as jh

pytestmark = pytest.mark.openstack


class TestNovaLifecycleOfABondedVFHolderThroughARealNeutron(jh.BondedVFHolderHarness):
    """Stop/start, rebuild, shelve/unshelve (either compute), cold migration (confirmed,
    reverted) of the VF holder."""

    def assert_withheld(self, host: str, why: str) -> None:
        """``host``'s agent keeps the VM out of its inventory, its VF not free to grant."""
        inv = self.drv[host].inventory()
        assert self.domain not in inv.vms and inv.host.nic.vf_pool == 0, inv
        notes = self.drv[host].actuator.discrepancies
        assert f"{self.domain}: Nova is operating on it ({why}): Sova stands back" in notes, notes

    def port_kept(self, vf: Any) -> Any:
        """Sova's port of the VM, still the server's: the one Sova port in Neutron."""
        [port] = self.sova_ports()
        assert (port.id, port.device_id) == (vf.id, self.server["id"])
        return port

    def test_stopped_then_started_vf_holder_is_given_back_then_granted_again(self) -> None:
        """Stopped, the VM is withheld by compute0's agent and its VF stays claimed; started
        (Nova defines the domain anew, Sova's port re-plugged, the bond's state gone), the
        agent moves the bond to virtio, confirmed, before Nova unplugs the VF, deletes the
        port, and grants the VF again."""
        vf = self.grant("compute0")
        self._stop_server(self.server)
        self.assert_withheld("compute0", "status SHUTOFF")
        self.port_kept(vf)
        self.assertPCIDeviceCounts("compute0", total=2, free=0)
        self._start_server(self.server)
        assert self.hostdevs("compute0") == [vf.mac_address]
        assert self.domain not in self.guest["compute0"].active  # a new guest
        self.given_back_then_granted_again(
            "compute0", "outlived an operation of Nova's", [(self.domain, "to_fast")], vf
        )
        self.assertPCIDeviceCounts("compute0", total=2, free=0)
        self.assertPCIDeviceCounts("compute1", total=2, free=2)

    def test_rebuilt_vf_holder_is_given_back_then_granted_again(self) -> None:
        """Rebuilt between two periods of the agent (Nova's rebuild runs to its end inside
        the API call here), the guest is spawned anew with Sova's port re-plugged: Nova's
        new launch time tells the agent, which gives the port back, bond first."""
        vf = self.grant("compute0")
        self._rebuild_server(self.server, self.image)
        assert self.hostdevs("compute0") == [vf.mac_address]
        self.assertPCIDeviceCounts("compute0", total=2, free=0)
        self.given_back_then_granted_again(
            "compute0", "outlived Nova re-spawning the server", [(self.domain, "to_fast")], vf
        )

    def test_shelved_vf_holder_keeps_its_port_and_is_given_back_where_unshelved(self) -> None:
        """Shelved (offloaded: no host, the domain undefined, its VF freed in Nova's PCI
        tracker) the VM is nowhere an agent could grant it anything, and Sova's port stays
        the server's (not swept as a leak: Nova re-plugs it at unshelve). Unshelved on
        compute1, Nova claims compute1's VF for the port made for compute0; compute1's
        agent gives it back, bond first, and grants its own VF."""
        vf = self.shelve_then_unshelve_on("compute1")
        self.assertPCIDeviceCounts("compute0", total=2, free=2)
        self.given_back_then_granted_again(
            "compute1", "made for compute0, brought here by Nova", [], vf
        )

    def shelve_then_unshelve_on(self, host: str) -> Any:
        """The VF holder (granted compute0's VF) shelved, offloaded, then unshelved on
        ``host`` with Sova's port re-plugged there in a guest booted anew; returns the
        port. Shelved, neither agent sees the VM nor sweeps its port, which stays the
        server's, unbound, while compute0's VF is free in Nova's PCI tracker."""
        vf = self.grant("compute0")
        self._shelve_server(self.server)
        self.assertPCIDeviceCounts("compute0", total=2, free=2)
        assert self.hv["compute0"].xml.get(self.domain) is None
        port = self.port_kept(vf)
        assert not port.binding_host_id, port.binding_host_id
        for h in jh.HOSTS:
            assert self.domain not in self.drv[h].inventory().vms
            assert self.drv[h].actuator.sweep_leaked_ports() == []
        self.port_kept(vf)
        self.api.post_server_action(self.server["id"], {"unshelve": {"host": host}})
        server = self._wait_for_state_change(self.server, "ACTIVE")
        assert server["OS-EXT-SRV-ATTR:host"] == host
        port = self.port_kept(vf)
        assert (port.binding_host_id, port.binding_vif_type) == (host, "hw_veb")
        assert self.hostdevs(host) == [vf.mac_address]
        assert self.domain not in self.guest[host].active  # a new guest
        self.assertPCIDeviceCounts(host, total=2, free=0)
        return vf

    def test_shelved_vf_holder_unshelved_on_the_same_host_is_given_back_then_granted_again(
        self,
    ) -> None:
        """Unshelved where it was shelved from, the VM holds the port made for this very
        host, re-plugged by Nova in a guest whose bond Sova never set up: only Nova's new
        launch time tells compute0's agent, which gives the port back, bond first, and
        grants compute0's VF again. compute1 is never involved."""
        vf = self.shelve_then_unshelve_on("compute0")
        self.given_back_then_granted_again(
            "compute0", "outlived Nova re-spawning the server", [(self.domain, "to_fast")], vf
        )
        assert {u[0] for u in self.unplugs} == {"compute0"}
        self.assertPCIDeviceCounts("compute1", total=2, free=2)

    def cold_migrate(self) -> tuple[Any, dict[str, Any]]:
        """The VF holder (granted compute0's VF) cold-migrated by an operator to compute1
        (a resize to its own flavour): in VERIFY_RESIZE both agents stand back (compute0's
        domain is no server of its host any more), Sova's port re-plugged on compute1 with
        compute1's VF claimed. Returns the port and the server."""
        vf = self.grant("compute0")
        self.api.post_server_action(self.server["id"], {"migrate": {"host": "compute1"}})
        server = self._wait_for_state_change(self.server, "VERIFY_RESIZE")
        assert server["OS-EXT-SRV-ATTR:host"] == "compute1"
        self.assert_withheld("compute1", "status VERIFY_RESIZE")
        assert not self.drv["compute0"].inventory().vms[self.domain].running
        port = self.port_kept(vf)
        assert port.binding_host_id == "compute1"
        assert self.hostdevs("compute1") == [vf.mac_address]
        self.assertPCIDeviceCounts("compute1", total=2, free=0)
        return vf, server

    def test_cold_migrated_vf_holder_is_given_back_on_the_target(self) -> None:
        """Confirmed, compute1's agent gives the carried port back, bond first, compute0's
        VF is free, and compute1's VF is granted."""
        vf, server = self.cold_migrate()
        self._confirm_resize(server)
        self.assertPCIDeviceCounts("compute0", total=2, free=2)
        self.assertPCIDeviceCounts("compute1", total=2, free=0)
        self.given_back_then_granted_again("compute1", "outlived an operation of Nova's", [], vf)
        # Nova's source cleanup here (its disk copy stubbed) leaves compute0's domain
        # defined; compute0's agent never counts it as its server again.
        left = self.drv["compute0"].inventory().vms.get(self.domain)
        assert left is None or not left.running, left

    def test_cold_migration_reverted_ends_on_the_sources_vf_never_on_a_dead_one(self) -> None:
        """Reverted, Nova spawns the VM anew on compute0 with Sova's port re-plugged
        (compute0's VF claimed again, compute1's freed, its domain gone). Nova's new launch
        time tells compute0's agent, which gives the port back, bond first, and grants
        compute0's VF again."""
        vf, server = self.cold_migrate()
        server = self._revert_resize(server)
        assert server["OS-EXT-SRV-ATTR:host"] == "compute0"
        port = self.port_kept(vf)
        assert (port.binding_host_id, port.binding_vif_type) == ("compute0", "hw_veb")
        assert self.hostdevs("compute0") == [vf.mac_address]
        assert self.domain not in self.guest["compute0"].active  # a new guest
        assert self.hv["compute1"].xml.get(self.domain) is None
        self.assertPCIDeviceCounts("compute1", total=2, free=2)
        self.assertPCIDeviceCounts("compute0", total=2, free=0)
        self.given_back_then_granted_again(
            "compute0", "outlived Nova re-spawning the server", [(self.domain, "to_fast")], vf
        )
        assert self.domain not in self.drv["compute1"].inventory().vms

    def carry_live_migrations(self) -> None:
        """Nova's fake libvirt cannot migrate: the running guest is created on the target's
        hypervisor from Nova's destination XML, its memory (the bond's state) with it, and
        is gone from the source's."""
        from urllib.parse import urlparse

        def migrate(dom: Any, dconnuri: str, params: dict[str, Any], flags: int) -> None:
            src, dst, name = dom._connection.getHostname(), urlparse(dconnuri).netloc, dom.name()
            self.computes[dst].driver._host.get_connection().createXML(params["destination_xml"], 0)
            self.hv[dst].define(params["destination_xml"])
            if name in self.guest[src].active:
                self.guest[dst].active[name] = self.guest[src].active[name]
            # libvirt undefines the source once the guest runs on the target (Nova asks
            # for VIR_MIGRATE_UNDEFINE_SOURCE).
            jh.forget(self.hv[src], self.guest[src], name)
            dom.complete_job()

        held_xml = jh.fakelibvirt.Domain.XMLDesc

        def migratable_xml(dom: Any, flags: int) -> str:
            # libvirt's live XML gives each interface its guest PCI address, which Nova keeps
            # when it rewrites the interfaces for the target (Nova's XML has none).
            xml = held_xml(dom, flags)
            if not flags & jh.fakelibvirt.VIR_DOMAIN_XML_MIGRATABLE:
                return str(xml)
            root = jh.ET.fromstring(xml)
            for slot, iface in enumerate(root.iter("interface"), start=3):
                if iface.find("address") is None:
                    jh.ET.SubElement(
                        iface,
                        "address",
                        type="pci",
                        domain="0x0000",
                        bus="0x00",
                        slot=f"0x{slot:02x}",
                        function="0x0",
                    )
            return jh.ET.tostring(root, encoding="unicode")

        self.stub_out("nova.tests.fixtures.libvirt.Domain.migrateToURI3", migrate)
        self.stub_out("nova.tests.fixtures.libvirt.Domain.XMLDesc", migratable_xml)

    def wait_for_live_migration(self, timeout_s: float = 90.0) -> None:
        """Nova's live migration record of the VM ``completed`` (Nova's own wait gives up
        after 5 s; here each hot-unplug alone waits out the libvirt event fake libvirt never
        sends, and the machine is shared)."""
        deadline = time.monotonic() + timeout_s
        status = None
        while time.monotonic() < deadline:
            for m in self.api.api_get("/os-migrations").body["migrations"]:
                if m["instance_uuid"] == self.server["id"]:
                    status = m["status"]
            if status in ("completed", "failed", "error"):
                break
            time.sleep(0.5)
        assert status == "completed", status

    def test_operators_live_migration_never_unplugs_the_vf_under_the_bond(self) -> None:
        """An operator live-migrates the VM to compute1 through Nova's API. Nova hot-unplugs
        the VF from the running guest before the copy and plugs compute1's after it, with
        the same port. One period of compute0's agent runs while Nova prepares the target
        (pre-checks passed, nothing unplugged yet): it sees Nova's ``migrating`` task and
        moves the bond to virtio, so Nova's unplug never cuts the guest's traffic. On
        compute1 the carried port is given back (it was granted from compute0's pool) and
        compute1's VF granted."""
        from nova.compute import manager

        self.carry_live_migrations()
        vf = self.grant("compute0")
        real_pre = manager.ComputeManager.pre_live_migration
        periods: list[list[str]] = []

        def pre_live_migration(mgr: Any, *args: Any, **kwargs: Any) -> Any:
            self.drv["compute0"].inventory()
            periods.append(self.drv["compute0"].actuator.discrepancies)
            return real_pre(mgr, *args, **kwargs)

        self.stub_out("nova.compute.manager.ComputeManager.pre_live_migration", pre_live_migration)
        self.api.post_server_action(
            self.server["id"], {"os-migrateLive": {"host": "compute1", "block_migration": "auto"}}
        )
        self.wait_for_live_migration()
        server = self._wait_for_state_change(self.server, "ACTIVE")
        assert server["OS-EXT-SRV-ATTR:host"] == "compute1"
        [notes] = periods
        assert any("task_state migrating" in n for n in notes), notes
        # Nova unplugs it from the persistent then the live definition: two records.
        assert {u[:3] for u in self.unplugs} == {("compute0", self.domain, vf.mac_address)}
        self.assert_no_unplug_under_the_bond()
        assert self.guest["compute0"].calls == [
            (self.domain, "to_fast"),
            (self.domain, "to_backup"),
        ]
        port = self.port_kept(vf)
        assert (port.binding_host_id, port.binding_vif_type) == ("compute1", "hw_veb")
        assert self.hostdevs("compute1") == [vf.mac_address]
        assert self.hv["compute0"].xml.get(self.domain) is None
        self.assertPCIDeviceCounts("compute0", total=2, free=2)
        self.assertPCIDeviceCounts("compute1", total=2, free=0)
        self.given_back_then_granted_again(
            "compute1", "made for compute0, brought here by Nova", [], vf
        )
