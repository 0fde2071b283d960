"""Nova's lifecycle operations on the bonded VF holder in the joined run (the OpenStack tier,
nova env; the harness is joined_harness.py): an operator stops and starts it, rebuilds it,
shelves it (offloaded) and unshelves it on the other compute, cold-migrates it, each through
Nova's API while Sova's agent side (its libvirt driver with the guest bond, and the
OpenStack actuator) holds the VF for it. After each: no Sova port left unbound or on a host
the VM is not on, Nova never unplugged a VF the guest's bond was on, Nova's PCI tracker
frees and claims the VFs on both hosts, and the VM gets the VF of the host it ends on again.

Run with ``scripts/openstack-envs.sh test nova``.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip(
    "nova.tests.functional.integrated_helpers",
    reason="needs the pinned nova environment: scripts/openstack-envs.sh test nova",
)

import joined_harness as jh

pytestmark = pytest.mark.openstack


class TestNovaLifecycleOfABondedVFHolderThroughARealNeutron(jh.BondedVFHolderHarness):
    """Stop/start, rebuild, shelve/unshelve, cold migration of the VF holder."""

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
        notes = self.given_back("compute0")
        assert any("outlived an operation of Nova's" in n for n in notes), notes
        self.assert_given_back_bond_first("compute0", [(self.domain, "to_fast")])
        again = self.grant("compute0")
        assert again.id != vf.id
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
        notes = self.given_back("compute0")
        assert any("outlived Nova re-spawning the server" in n for n in notes), notes
        self.assert_given_back_bond_first("compute0", [(self.domain, "to_fast")])
        again = self.grant("compute0")
        assert again.id != vf.id

    def test_shelved_vf_holder_keeps_its_port_and_is_given_back_where_unshelved(self) -> None:
        """Shelved (offloaded: no host, the domain undefined, its VF freed in Nova's PCI
        tracker) the VM is nowhere an agent could grant it anything, and Sova's port stays
        the server's (not swept as a leak: Nova re-plugs it at unshelve). Unshelved on
        compute1, Nova claims compute1's VF for the port made for compute0; compute1's
        agent gives it back, bond first, and grants its own VF."""
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
        self.api.post_server_action(self.server["id"], {"unshelve": {"host": "compute1"}})
        server = self._wait_for_state_change(self.server, "ACTIVE")
        assert server["OS-EXT-SRV-ATTR:host"] == "compute1"
        port = self.port_kept(vf)
        assert (port.binding_host_id, port.binding_vif_type) == ("compute1", "hw_veb")
        assert self.hostdevs("compute1") == [vf.mac_address]
        self.assertPCIDeviceCounts("compute1", total=2, free=0)
        notes = self.given_back("compute1")
        assert any("made for compute0, brought here by Nova" in n for n in notes), notes
        self.assert_given_back_bond_first("compute1", [])
        again = self.grant("compute1")
        assert again.id != vf.id

    def test_cold_migrated_vf_holder_is_given_back_on_the_target(self) -> None:
        """An operator cold-migrates the VM to compute1 and confirms: in VERIFY_RESIZE
        both agents stand back (compute0's domain is no server of its host any more); once
        confirmed, compute1's agent gives the carried port back, bond first, compute0's VF
        is free, and compute1's VF is granted."""
        vf = self.grant("compute0")
        self.api.post_server_action(self.server["id"], {"migrate": {"host": "compute1"}})
        server = self._wait_for_state_change(self.server, "VERIFY_RESIZE")
        assert server["OS-EXT-SRV-ATTR:host"] == "compute1"
        self.assert_withheld("compute1", "status VERIFY_RESIZE")
        inv0 = self.drv["compute0"].inventory()
        assert not inv0.vms[self.domain].running
        port = self.port_kept(vf)
        assert port.binding_host_id == "compute1"
        assert self.hostdevs("compute1") == [vf.mac_address]
        self._confirm_resize(server)
        self.assertPCIDeviceCounts("compute0", total=2, free=2)
        self.assertPCIDeviceCounts("compute1", total=2, free=0)
        notes = self.given_back("compute1")
        assert any("outlived an operation of Nova's" in n for n in notes), notes
        self.assert_given_back_bond_first("compute1", [])
        # Nova's source cleanup here (its disk copy stubbed) leaves compute0's domain
        # defined; compute0's agent never counts it as its server again.
        left = self.drv["compute0"].inventory().vms.get(self.domain)
        assert left is None or not left.running, left
        again = self.grant("compute1")
        assert again.id != vf.id
