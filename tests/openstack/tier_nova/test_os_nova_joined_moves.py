"""The joined run with two hypervisors (the OpenStack tier, nova env): Nova's harness and
Neutron's real API server (ML2, an OVS and an SR-IOV agent record per compute), each
compute's domains held by its own libvirt test driver (joined_harness.py), and the
guest's bond answering Sova's scripts from the NICs its hypervisor holds. Nova evacuates and
resizes (confirmed, reverted) the VF holder: the bond is never left on a NIC that is gone,
no Sova port is left, and the VM gets the VF of the host it ends on.

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
from joined_harness import HOSTS

pytestmark = pytest.mark.openstack


class TestNovaMovesABondedVFHolderThroughARealNeutron(jh.BondedVFHolderHarness):
    """The VF holder moved by Nova: evacuated, resized (confirmed, reverted)."""

    def test_evacuated_vf_holder_ends_on_virtio_then_its_new_hosts_vf(self) -> None:
        """compute0 dies with the VM's bond on Sova's VF; Nova evacuates the VM to compute1
        and re-plugs the port there, in a guest whose bond Sova never set up. compute1's
        agent keeps it until compute0 is back (Nova's evacuation record ``completed``),
        then moves the bond to virtio, confirmed, before Nova unplugs the VF; the port is
        deleted in Neutron, both VFs are free, and the VM gets compute1's VF, bond on it."""
        vf0 = self.grant("compute0")
        self.assertPCIDeviceCounts("compute0", total=2, free=0)
        self.computes["compute0"].stop()
        self.api.put_service(self.computes["compute0"].service_ref.uuid, {"forced_down": True})
        server = self._evacuate_server(self.server, expected_host="compute1")
        self._start_server(server)
        # Nova re-plugged Sova's port on compute1 (bound hw_veb there, a VF claimed).
        [carried] = self.sova_ports()
        assert carried.id == vf0.id
        assert (carried.binding_host_id, carried.binding_vif_type) == ("compute1", "hw_veb")
        assert self.hostdevs("compute1") == [carried.mac_address]
        self.assertPCIDeviceCounts("compute1", total=2, free=0)

        inv = self.drv["compute1"].inventory()
        assert self.domain not in inv.vms
        notes = self.drv["compute1"].actuator.discrepancies
        assert any("(status done) from compute0" in n for n in notes), notes
        assert self.guest["compute1"].calls == []  # nothing asked of the new guest yet

        self.restart_compute_service("compute0")
        self.api.put_service(self.computes["compute0"].service_ref.uuid, {"forced_down": False})
        self.given_back("compute1")
        g1 = self.guest["compute1"]
        assert g1.calls == [(self.domain, "to_backup")]
        # The bond left the VF before Nova unplugged it: virtio is the active slave, the
        # hostdev interface is gone from the domain, the port from Neutron.
        assert [e[0] for e in self.hv["compute1"].events] == ["detach"]
        assert self.hostdevs("compute1") == []
        assert g1.active[self.domain] == self.vport.mac_address
        self.assert_bond_on_a_live_nic("compute1")
        assert self.sova_ports() == []
        self.assertPCIDeviceCounts("compute0", total=2, free=2)
        self.assertPCIDeviceCounts("compute1", total=2, free=2)

        vf1 = self.grant("compute1")
        assert vf1.id != vf0.id
        assert g1.calls == [(self.domain, "to_backup"), (self.domain, "to_fast")]
        self.assertPCIDeviceCounts("compute1", total=2, free=0)

    def resize(self) -> tuple[Any, dict[str, Any]]:
        """The VF holder resized to a bigger flavour: Nova places it on compute1
        (``VERIFY_RESIZE``) with Sova's port re-plugged there; neither agent acts."""
        vf0 = self.grant("compute0")
        flavor = self._create_flavor(name="sova-bigger", memory_mb=1024, vcpu=2, disk=1)
        server = self._resize_server(self.server, flavor)
        assert server["OS-EXT-SRV-ATTR:host"] == "compute1"
        [carried] = self.sova_ports()
        assert (carried.id, carried.binding_host_id) == (vf0.id, "compute1")
        assert self.hostdevs("compute1") == [vf0.mac_address]
        inv0, inv1 = (self.drv[h].inventory() for h in HOSTS)
        assert not inv0.vms[self.domain].running and self.domain not in inv1.vms
        notes = self.drv["compute1"].actuator.discrepancies
        assert any("status VERIFY_RESIZE" in n and "stands back" in n for n in notes), notes
        return vf0, server

    def test_resize_confirmed_ends_on_the_targets_vf_never_on_a_dead_one(self) -> None:
        vf0, server = self.resize()
        self._confirm_resize(server)
        self.given_back_then_granted_again("compute1", "outlived an operation of Nova's", [], vf0)

    def test_resize_reverted_ends_on_the_sources_vf_never_on_a_dead_one(self) -> None:
        """Reverted, the guest is booted anew on compute0 with Sova's port re-plugged and
        no bond state; compute0's agent knows it by Nova's new launch time."""
        vf0, server = self._revert(*self.resize())
        self.given_back_then_granted_again(
            "compute0", "outlived Nova re-spawning the server", [(self.domain, "to_fast")], vf0
        )

    def _revert(self, vf0: Any, server: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        server = self._revert_resize(server)
        assert server["OS-EXT-SRV-ATTR:host"] == "compute0"
        [carried] = self.sova_ports()
        assert (carried.id, carried.binding_host_id) == (vf0.id, "compute0")
        assert self.hostdevs("compute0") == [vf0.mac_address]
        assert self.domain not in self.guest["compute0"].active  # a new guest
        return vf0, server
