"""The orchestrator seam and the openstack actuator, against an in-memory cloud (main venv).

The same actuator runs against Nova, Neutron and Watcher themselves in the OpenStack tier
(tests/openstack/<stack>/, scripts/openstack-envs.sh).
"""

from __future__ import annotations

from typing import Any

import pytest
from fakecloud import RP, FakeCloud, FakeCloudError, FakeCloudTimeout, Inv

from sova.agent.config import ControllerConfig, SchedulerSpec
from sova.agent.executor import Executor
from sova.driver.base import DriverError, DriverRequest, MockDriver, OpState, OpStatus
from sova.manager.daemons.config import ConfigError, load_agent_settings, load_manager_settings
from sova.model import (
    NIC,
    VM,
    AttachVF,
    DetachVF,
    Host,
    Inventory,
    Migrate,
    NicKind,
    SetVFRate,
    VMState,
)
from sova.orchestrator.base import OrchestratedDriver
from sova.orchestrator.libvirt import DriverActuator
from sova.orchestrator.openstack import OpenStackActuator, connect
from sova.orchestrator.openstack_cloud import PORT_PREFIX, SOVA_TAG, is_vf_exhausted
from sova.orchestrator.settings import OrchestratorSettings, orchestrate


def _papers_sova() -> ControllerConfig:
    """The sova VF policy with the papers' scheduler: these seam tests pin which VM the
    agent picks with loads written for that ranking (web, network-bound and I/O-light,
    over batch, CPU-bound; db next). The default scheduler's top-sender and cost-benefit
    rules (docs/design.md#vf-cost-benefit) would keep a VF from a VM virtio carries."""
    return ControllerConfig(
        vf_policy="sova", scheduler=SchedulerSpec(top_senders=False, cost_benefit=False)
    )


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def actuator(cloud: FakeCloud, host: str = "cmp1", **kw: Any) -> OpenStackActuator:
    clock = Clock()
    return OpenStackActuator(
        cloud,
        host,
        errors=(FakeCloudError,),
        timeouts=(FakeCloudTimeout,),
        spawn=lambda fn: fn(),  # inline: the op runs to its end inside submit()
        clock=clock,
        sleep=clock.sleep,
        **{"poll_s": 1.0, **kw},
    )


def sensed(host: str, *vms: str, vf: tuple[str, ...] = (), pool: int = 2) -> Inventory:
    h = Host(host, 8, 16 << 30, NIC("pf0", 10e9, pool))
    return Inventory(
        h,
        {v: VMState(VM(v, 2, 1 << 30), nic=NicKind.VF if v in vf else NicKind.VIRTIO) for v in vms},
    )


def run(act: OpenStackActuator, action: Any) -> OpStatus:
    return act.poll(act.submit(action))


# --------------------------------------------------------------------------- migration


def test_live_migration_goes_through_nova_to_the_chosen_host() -> None:
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud)
    st = run(act, Migrate("vm1", "cmp3"))
    assert st.state is OpState.SUCCEEDED, st.detail
    assert "completed" in st.detail
    assert cloud.servers["uuid-vm1"].compute_host == "cmp3"
    # A host and no force: Nova's scheduler still validates Sova's choice.
    assert ("live_migrate_server", {"host": "cmp3", "force": False}) in cloud.calls


def test_refused_target_leaves_the_server_on_its_source_and_reports_failure() -> None:
    cloud = FakeCloud(refusing={"cmp2"})
    cloud.add_server("vm1", "cmp1")
    st = run(actuator(cloud), Migrate("vm1", "cmp2"))
    assert st.state is OpState.FAILED
    assert "error" in st.detail and "'cmp1'" in st.detail
    assert cloud.servers["uuid-vm1"].compute_host == "cmp1"


@pytest.mark.parametrize(
    ("end", "state"),
    [
        ("completed", OpState.SUCCEEDED),
        ("done", OpState.SUCCEEDED),
        ("failed", OpState.FAILED),
        ("error", OpState.FAILED),
        ("cancelled", OpState.FAILED),
        ("aborted", OpState.FAILED),
    ],
)
def test_each_final_status_of_novas_record_is_the_outcome(end: str, state: OpState) -> None:
    cloud = FakeCloud(ends={"cmp3": end})
    cloud.add_server("vm1", "cmp1")
    st = run(actuator(cloud), Migrate("vm1", "cmp3"))
    assert st.state is state and end in st.detail, st.detail
    # Succeeded: the server is on the target; failed: Nova rolled it back to its source.
    on = "cmp3" if state is OpState.SUCCEEDED else "cmp1"
    assert cloud.servers["uuid-vm1"].compute_host == on
    # Taken as the end when Nova's record says so, not left to the timeout and an abort.
    assert not [c for c, _ in cloud.calls if c == "abort_server_migration"]


def test_port_tag_and_name_are_the_ones_the_operators_guide_names() -> None:
    # Operators list, clean up and uninstall by these (docs/openstack.md#who-owns-a-port).
    import pathlib

    guide = (pathlib.Path(__file__).parents[2] / "docs" / "openstack.md").read_text()
    assert f"openstack port list --tags {SOVA_TAG}" in guide
    assert f"named `{PORT_PREFIX}<vm>`" in guide


def test_completed_migration_whose_server_is_not_on_the_target_is_a_failure() -> None:
    # Nova's record says completed but the server's host is not the one Sova chose: the
    # record alone is not the outcome, the server's host is.
    cloud = FakeCloud(lands_on={"cmp3": "cmp1"})
    cloud.add_server("vm1", "cmp1")
    st = run(actuator(cloud), Migrate("vm1", "cmp3"))
    assert st.state is OpState.FAILED
    assert "completed but the server is on 'cmp1', not 'cmp3'" in st.detail, st.detail


def test_migration_past_its_timeout_is_aborted_and_reported() -> None:
    cloud = FakeCloud(migration_steps=10_000)
    cloud.add_server("vm1", "cmp1")
    st = run(actuator(cloud, migration_timeout_s=30.0), Migrate("vm1", "cmp2"))
    assert st.state is OpState.FAILED
    # Followed to Nova's record: cancelled, and the server back on its source.
    assert "timed out after 30s, abort confirmed" in st.detail, st.detail
    assert "cancelled" in st.detail and "server on 'cmp1'" in st.detail
    assert any(c[0] == "abort_server_migration" for c in cloud.calls)
    assert cloud.servers["uuid-vm1"].compute_host == "cmp1"
    assert cloud.servers["uuid-vm1"].task_state is None


def test_abort_nova_never_carries_out_is_reported_unconfirmed() -> None:
    cloud = FakeCloud(migration_steps=10_000, abort_looks=None)
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud, migration_timeout_s=30.0, abort_timeout_s=20.0)
    st = run(act, Migrate("vm1", "cmp2"))
    assert st.state is OpState.FAILED
    assert "abort not confirmed" in st.detail and "still running 20s later" in st.detail
    assert cloud.servers["uuid-vm1"].task_state == "migrating"  # as Nova still says


def test_migration_that_ends_before_the_abort_takes_is_a_success() -> None:
    # Timeout at 30 polls; the migration completes 3 looks after the abort was accepted.
    cloud = FakeCloud(migration_steps=34, abort_looks=5)
    cloud.add_server("vm1", "cmp1")
    st = run(actuator(cloud, migration_timeout_s=30.0), Migrate("vm1", "cmp2"))
    assert st.state is OpState.SUCCEEDED, st.detail
    assert "ended before the abort" in st.detail
    assert any(c[0] == "abort_server_migration" for c in cloud.calls)
    assert cloud.servers["uuid-vm1"].compute_host == "cmp2"  # a false failure would hide this


def test_migration_whose_answer_outlasts_the_api_timeout_is_followed_not_failed() -> None:
    """Nova answers os-migrateLive (below 2.34) only after the target's pre-checks: a slow
    pre-check outlasts the client's timeout while the migration goes on, and record polls of
    a busy API may time out too. Neither is the migration's outcome."""
    cloud = FakeCloud(migrate_answer_late=True, unanswered_polls=2)
    cloud.add_server("vm1", "cmp1")
    st = run(actuator(cloud), Migrate("vm1", "cmp3"))
    assert st.state is OpState.SUCCEEDED, st.detail
    assert "completed" in st.detail and "Nova's answer timed out" in st.detail
    assert cloud.servers["uuid-vm1"].compute_host == "cmp3"
    assert cloud.unanswered_polls == 0  # the polls did time out


def test_unanswered_migration_that_never_started_is_a_failure() -> None:
    cloud = FakeCloud(migrate_answer_late=True, refusing={"cmp2"}, migration_steps=1)
    cloud.add_server("vm1", "cmp1")
    st = run(actuator(cloud), Migrate("vm1", "cmp2"))
    assert st.state is OpState.FAILED
    assert "error" in st.detail and "server on 'cmp1'" in st.detail, st.detail


def test_migration_of_a_server_nova_places_elsewhere_is_refused() -> None:
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp2")
    st = run(actuator(cloud), Migrate("vm1", "cmp3"))
    assert st.state is OpState.FAILED and "no server 'vm1' on cmp1" in st.detail
    assert not any(c[0] == "live_migrate_server" for c in cloud.calls)


# --------------------------------------------------------------------------- fast path


def test_vf_is_a_direct_port_attached_through_nova_and_moves_between_vms() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1")
    cloud.add_server("vm2", "cmp1")
    act = actuator(cloud)
    st = run(act, AttachVF("vm1"))
    assert st.state is OpState.SUCCEEDED, st.detail
    created = [a for c, a in cloud.calls if c == "create_port"]
    assert created[0]["binding_vnic_type"] == "direct"
    assert created[0]["network_id"] == "net-data" and created[0]["project_id"] == "proj"
    assert cloud.bound_vfs("cmp1") == 1
    # The ranking changed: the VF goes from vm1 to vm2 (detach, then attach).
    assert run(act, DetachVF("vm1")).state is OpState.SUCCEEDED
    assert not [p for p in cloud.ports.values() if p.binding_vnic_type == "direct"]
    assert run(act, AttachVF("vm2")).state is OpState.SUCCEEDED
    holder = [p.device_id for p in cloud.ports.values() if p.binding_vnic_type == "direct"]
    assert holder == ["uuid-vm2"]


def test_sova_port_is_tagged_before_nova_attaches_it() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1")
    assert run(actuator(cloud), AttachVF("vm1")).state is OpState.SUCCEEDED
    [port] = [p for p in cloud.ports.values() if p.binding_vnic_type == "direct"]
    assert port.tags == [SOVA_TAG]
    order = [
        c for c, _ in cloud.calls if c in ("create_port", "add_tag", "create_server_interface")
    ]
    assert order == ["create_port", "add_tag", "create_server_interface"]


def test_port_neutron_refuses_to_tag_is_deleted_never_attached() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1")

    def refuse(port: Any, tag: str) -> Any:
        raise FakeCloudError("403 Forbidden: update_ports_tags")

    cloud.network.add_tag = refuse  # type: ignore[method-assign]
    st = run(actuator(cloud), AttachVF("vm1"))
    assert st.state is OpState.FAILED and "tag" in st.detail and "port deleted" in st.detail
    assert not [p for p in cloud.ports.values() if p.binding_vnic_type == "direct"]
    assert not [c for c, _ in cloud.calls if c == "create_server_interface"]


def test_no_vf_left_is_a_reported_outcome_and_leaks_no_port() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1")
    cloud.add_server("vm2", "cmp1")
    act = actuator(cloud)
    assert run(act, AttachVF("vm1")).state is OpState.SUCCEEDED
    st = run(act, AttachVF("vm2"))
    assert st.state is OpState.FAILED
    assert st.detail.startswith("no VF left on cmp1 for vm2")
    assert [p.device_id for p in cloud.ports.values() if p.binding_vnic_type == "direct"] == [
        "uuid-vm1"
    ]


def test_attach_is_idempotent_and_detach_waits_for_nova() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 2}, detach_looks=3)
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud)
    run(act, AttachVF("vm1"))
    again = run(act, AttachVF("vm1"))
    assert again.state is OpState.SUCCEEDED and "already holds" in again.detail
    assert len([c for c, _ in cloud.calls if c == "create_port"]) == 1
    st = run(act, DetachVF("vm1"))
    assert st.state is OpState.SUCCEEDED
    # The port is deleted only after Nova stopped listing it as an interface.
    order = [c for c, _ in cloud.calls if c in ("delete_server_interface", "delete_port")]
    assert order == ["delete_server_interface", "delete_port"]


def test_unconfirmed_detach_keeps_the_port_and_fails() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 1}, detach_looks=10_000)
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud, detach_timeout_s=5.0)
    run(act, AttachVF("vm1"))
    st = run(act, DetachVF("vm1"))
    assert st.state is OpState.FAILED and "ports kept" in st.detail
    assert not any(c == "delete_port" for c, _ in cloud.calls)


def test_rates_go_to_the_host_driver() -> None:
    cloud = FakeCloud()
    host_calls: list[DriverRequest] = []

    def world(req: DriverRequest) -> Any:
        host_calls.append(req)
        if req.method == "submit":
            return "h-1"
        # The host driver is asked about its own operation id, not the actuator's.
        return OpStatus(
            "h-1", OpState.SUCCEEDED if req.args == ("h-1",) else OpState.FAILED, "rate set"
        )

    act = actuator(cloud, fallback=MockDriver(world))
    st = run(act, SetVFRate("vm1", 1e9))
    assert st.state is OpState.SUCCEEDED and st.detail == "rate set"
    assert [r.method for r in host_calls] == ["submit", "poll"]
    with pytest.raises(DriverError, match="no OpenStack API"):
        actuator(cloud).submit(SetVFRate("vm1", 1e9))


# --------------------------------------------------------------------------- inventory


def test_inventory_is_the_hosts_view_reconciled_with_nova_neutron_placement() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 4})
    cloud.add_server("vm1", "cmp1").instance_name = "instance-00000001"
    cloud.add_server("vm2", "cmp1")
    cloud.rps = [RP("rp-cmp1", "cmp1"), RP("rp-pf0", "cmp1_pf0", parent="rp-cmp1")]
    cloud.inventories = {"rp-pf0": [Inv("CUSTOM_SRIOV_VF", 3, reserved=1)]}
    act = actuator(cloud, vf_resource_class="CUSTOM_SRIOV_VF")
    run(act, AttachVF("vm2"))
    inv = act.reconcile(sensed("cmp1", "instance-00000001", "vm2", "stray", pool=4))
    assert inv.vms["vm2"].nic is NicKind.VF  # Neutron says so
    assert inv.vms["instance-00000001"].nic is NicKind.VIRTIO
    assert inv.vms["instance-00000001"].running
    assert not inv.vms["stray"].running  # Nova does not place it here: never given a VF
    assert inv.host.nic.vf_pool == 2  # Placement: 3 total - 1 reserved
    assert any("stray" in d for d in act.discrepancies)


def test_each_disagreement_between_host_and_cloud_is_noted_for_its_vm_only() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 4})
    for vm in ("agree", "neutron-only", "host-only"):
        cloud.add_server(vm, "cmp1")
    act = actuator(cloud)
    for vm in ("agree", "neutron-only"):
        assert run(act, AttachVF(vm)).state is OpState.SUCCEEDED
    # Placement's 4 (reserved 0) equals the host's 4: no note about the pool.
    cloud.rps = [RP("rp-cmp1", "cmp1")]
    cloud.inventories = {"rp-cmp1": [Inv("CUSTOM_SRIOV_VF", 4, reserved=0)]}
    act.vf_resource_class = "CUSTOM_SRIOV_VF"
    inv = act.reconcile(
        sensed("cmp1", "agree", "neutron-only", "host-only", vf=("agree", "host-only"), pool=4)
    )
    assert sorted(act.discrepancies) == [
        "host-only: the host senses a VF that no Sova port accounts for",
        "neutron-only: Neutron has a direct port bound, the host senses none",
    ]
    assert inv.host.nic.vf_pool == 4
    assert inv.vf_holders == frozenset({"agree", "neutron-only", "host-only"})


def test_tenants_own_vf_port_on_the_host_is_neither_counted_nor_touched() -> None:
    """A tenant attached its own direct port to one server of the host (named like Sova's,
    which proves nothing): it is not Sova's VF, Sova's pool is what the PF has left, and a
    revoke of it fails instead of "succeeding" while the VF stays taken."""
    cloud = FakeCloud(vfs_per_host={"cmp1": 2})
    cloud.add_server("vm1", "cmp1")
    cloud.add_server("vm2", "cmp1")
    tenant = cloud.add_server("tenant", "cmp1")
    theirs = cloud.add_tenant_vf(tenant, name=PORT_PREFIX + "tenant")
    act = actuator(cloud)
    inv = act.reconcile(sensed("cmp1", "vm1", "vm2", "tenant", vf=("tenant",), pool=2))
    # 2 VFs on the PF - 1 the tenant's port holds = 1 for Sova.
    assert inv.host.nic.vf_pool == 1
    assert inv.vms["tenant"].nic is NicKind.VIRTIO and not inv.vms["tenant"].failover_ready
    assert inv.vf_holders == frozenset()
    assert any(theirs.id in d and "not Sova's" in d for d in act.discrepancies)
    assert "tenants' own ports hold 1 of 2 VFs on cmp1: Sova's pool is 1" in act.discrepancies
    st = run(act, DetachVF("tenant"))
    assert st.state is OpState.FAILED and "not Sova's" in st.detail and theirs.id in st.detail
    assert cloud.ports[theirs.id].device_id == "uuid-tenant"  # still attached, still there
    assert not [c for c, _ in cloud.calls if c in ("delete_server_interface", "delete_port")]
    # The one VF left goes to vm1; Sova's own port is tagged and its revoke is a real one.
    assert run(act, AttachVF("vm1")).state is OpState.SUCCEEDED
    [ours] = [p for p in cloud.ports.values() if p.device_id == "uuid-vm1" and p.tags]
    assert ours.tags == [SOVA_TAG]
    inv = act.reconcile(sensed("cmp1", "vm1", "vm2", "tenant", vf=("vm1", "tenant"), pool=2))
    assert inv.vf_holders == frozenset({"vm1"}) and inv.host.nic.vf_pool == 1
    assert run(act, DetachVF("vm1")).state is OpState.SUCCEEDED
    assert ours.id not in cloud.ports and theirs.id in cloud.ports


@pytest.mark.parametrize(
    ("vnic_type", "takes_a_vf"),
    [
        ("direct", True),
        ("macvtap", True),
        ("virtio-forwarder", True),
        ("remote-managed", True),
        ("vdpa", True),
        ("normal", False),  # a virtio port behind Open vSwitch
        ("baremetal", False),
    ],
)
def test_every_vf_taking_vnic_type_of_a_tenant_shrinks_the_pool(
    vnic_type: str, takes_a_vf: bool
) -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 4})
    vm = cloud.add_server("vm1", "cmp1")
    cloud.add_tenant_vf(vm, vnic_type=vnic_type)
    inv = actuator(cloud).reconcile(sensed("cmp1", "vm1", pool=4))
    assert inv.host.nic.vf_pool == (3 if takes_a_vf else 4)
    assert inv.vms["vm1"].failover_ready is not takes_a_vf


@pytest.mark.parametrize(
    ("message", "exhausted"),
    [
        # Nova's InterfaceAttachPciClaimFailed and PciDeviceRequestFailed, and the class name
        # some clients print instead of the text.
        ("Failed to claim PCI device for uuid-1 during interface attach", True),
        ("PCI device request [InstancePCIRequest(count=1)] failed", True),
        ("Conflict: PciDeviceRequestFailed", True),
        ("Port 1b2c is still in use", False),
        ("Timed out waiting for a reply to message ID 42", False),
    ],
)
def test_novas_pci_messages_are_no_vf_left(message: str, exhausted: bool) -> None:
    assert is_vf_exhausted(message) is exhausted


def test_attach_and_detach_say_what_they_did() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud)
    st = run(act, AttachVF("vm1"))
    [port] = [p.id for p in cloud.ports.values() if p.tags]
    assert st.detail == f"vm1: direct port {port} on network net-data attached"
    st = run(act, DetachVF("vm1"))
    assert st.detail == f"vm1: VF port(s) {port} detached and deleted"


def test_someone_elses_migration_withholds_the_vm_and_sovas_own_marks_it_migrating() -> None:
    # A live migration someone else started (Watcher, an operator): Nova's task state says
    # so before the host senses a migration job, and the agent is not given the VM at all.
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1")
    cloud.add_server("vm2", "cmp1")
    cloud.begin("uuid-vm1", "live_migrate")
    act = actuator(cloud)
    inv = act.reconcile(sensed("cmp1", "vm1", "vm2"))
    assert set(inv.vms) == {"vm2"} and not inv.vms["vm2"].migrating
    assert "vm1: Nova is operating on it (task_state migrating): Sova stands back" in (
        act.discrepancies
    )
    # Sova's own migration (its op still in flight) takes the same task state: the VM stays
    # the agent's, marked migrating, so the agent takes no second migration meanwhile.
    cloud.end("uuid-vm1", "live_migrate", "cmp1")
    held: list[Any] = []
    act.spawn = held.append  # the op is submitted and not run yet
    act.submit(Migrate("vm2", "cmp3"))
    cloud.servers["uuid-vm2"].task_state = "migrating"
    inv = act.reconcile(sensed("cmp1", "vm1", "vm2"))
    assert inv.vms["vm2"].migrating and not inv.vms["vm1"].migrating


def test_migration_to_where_nova_already_moved_the_server_is_done() -> None:
    # The server this actuator knew moved meanwhile (someone else's migration): Sova's
    # directive to the same host is already met, not a failure.
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud)
    act.reconcile(sensed("cmp1", "vm1"))
    cloud.servers["uuid-vm1"].compute_host = "cmp3"
    st = run(act, Migrate("vm1", "cmp3"))
    assert st.state is OpState.SUCCEEDED and st.detail == "vm1 already on cmp3 (Nova)"
    assert not [c for c, _ in cloud.calls if c == "live_migrate_server"]


def test_agent_shares_the_pf_with_a_tenants_vf_without_churn() -> None:
    """The agent, deciding as ever, grants only the VF the tenant left: one port made over
    six periods (a pool that ignored the tenant's VF would have Nova refuse a second grant
    every period, each making and deleting a port), and the tenant's port untouched."""
    from sova.agent.loop import HostAgent

    cloud = FakeCloud(vfs_per_host={"cmp1": 2})
    loads = {"batch": (0.95, 80e6), "db": (0.10, 5e6), "web": (0.05, 50e6), "ten": (0.05, 90e6)}
    for vm in loads:
        cloud.add_server(vm, "cmp1")
    theirs = cloud.add_tenant_vf(cloud.servers["uuid-ten"])
    world = CloudHost(cloud, "cmp1", loads, pool=2)
    agent = HostAgent(OrchestratedDriver(MockDriver(world), actuator(cloud)), _papers_sova())
    for _ in range(6):
        agent.step()
        world.advance(10.0)
    assert len([c for c, _ in cloud.calls if c == "create_port"]) == 1
    assert [p.device_id for p in cloud.ports.values() if SOVA_TAG in p.tags] == ["uuid-web"]
    assert cloud.ports[theirs.id].device_id == "uuid-ten"
    assert not [a for c, a in cloud.calls if c == "delete_server_interface"]


def test_deleting_a_server_leaves_no_sova_port_behind() -> None:
    """Nova unbinds and keeps (with its IP) a port it did not create when it deletes the
    server: the next sweep of this host's agent deletes Sova's, and only Sova's."""
    cloud = FakeCloud(vfs_per_host={"cmp1": 2, "cmp2": 1})
    cloud.add_server("vm1", "cmp1")
    cloud.add_server("vm2", "cmp2")
    tenant = cloud.add_server("tenant", "cmp1")
    act = actuator(cloud, sweep_every=1)
    assert run(act, AttachVF("vm1")).state is OpState.SUCCEEDED
    assert run(actuator(cloud, "cmp2"), AttachVF("vm2")).state is OpState.SUCCEEDED
    theirs = cloud.add_tenant_vf(tenant)
    [ours] = [p.id for p in cloud.ports.values() if p.device_id == "uuid-vm1" and p.tags]
    cloud.delete_server("uuid-vm1")
    cloud.delete_server("uuid-tenant")  # its own port is unbound and kept as well
    assert cloud.ports[ours].device_id == "" and cloud.ports[ours].tags == [SOVA_TAG]
    act.reconcile(sensed("cmp1"))
    assert ours not in cloud.ports
    assert f"leaked Sova port {ours} deleted" in act.discrepancies
    assert theirs.id in cloud.ports  # not Sova's
    # cmp2's Sova port is cmp2's agent's business, bound and in use ...
    assert [p.device_id for p in cloud.ports.values() if p.tags] == ["uuid-vm2"]
    # ... and once leaked too: made for cmp2 (its description), swept by cmp2's agent only.
    cloud.delete_server("uuid-vm2")
    act.reconcile(sensed("cmp1"))
    assert not [d for d in act.discrepancies if "leaked" in d]  # idempotent, and not cmp2's
    assert len([p for p in cloud.ports.values() if p.tags]) == 1
    assert actuator(cloud, "cmp2").sweep_leaked_ports() != []
    assert not [p for p in cloud.ports.values() if p.tags]


def test_sova_port_bound_to_a_server_nova_no_longer_has_is_swept() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 2})
    cloud.add_server("vm1", "cmp1")
    cloud.add_server("vm2", "cmp1")
    act = actuator(cloud, sweep_every=1)
    for vm in ("vm1", "vm2"):
        assert run(act, AttachVF(vm)).state is OpState.SUCCEEDED
    cloud.vfs_per_host["cmp2"] = 1
    cloud.add_server("vm3", "cmp2")
    assert run(actuator(cloud, "cmp2"), AttachVF("vm3")).state is OpState.SUCCEEDED
    for gone in ("uuid-vm1", "uuid-vm3"):
        del cloud.servers[gone]  # gone from Nova while Neutron kept the binding
    act.reconcile(sensed("cmp1", "vm2", vf=("vm2",)))
    # vm1's port is deleted; vm3's is bound to cmp2, whose agent sweeps it.
    assert sorted(p.device_id for p in cloud.ports.values() if p.tags) == ["uuid-vm2", "uuid-vm3"]


def test_the_port_being_attached_is_not_taken_for_a_leak() -> None:
    # A sweep that runs while Sova's port exists, tagged and not yet attached (the agent's
    # inventory period next to an operation's thread): the port is not deleted under it.
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud, sweep_every=1)
    attach = cloud.compute.create_server_interface
    swept: list[list[str]] = []

    def sweep_then_attach(server: Any, port_id: str) -> Any:
        swept.append(act.sweep_leaked_ports())
        return attach(server, port_id)

    cloud.compute.create_server_interface = sweep_then_attach  # type: ignore[method-assign]
    st = run(act, AttachVF("vm1"))
    assert st.state is OpState.SUCCEEDED, st.detail
    assert swept == [[]] and cloud.bound_vfs("cmp1") == 1


def test_leaked_ports_are_looked_for_every_sweep_every_periods() -> None:
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud, sweep_every=30)
    for _ in range(31):
        act.reconcile(sensed("cmp1", "vm1"))
    # Periods 0 and 30: one Neutron query each, not one per period.
    assert len([a for c, a in cloud.calls if c == "ports" and "tags" in a]) == 2


def test_inventory_fails_as_a_driver_error_when_the_cloud_is_unreachable() -> None:
    cloud = FakeCloud()

    def down(**_: Any) -> Any:
        raise FakeCloudError("503 Service Unavailable")

    cloud.compute.servers = down  # type: ignore[method-assign]
    with pytest.raises(DriverError, match="OpenStack inventory unavailable"):
        actuator(cloud).reconcile(sensed("cmp1", "vm1"))


# --------------------------------------------------------------------------- the seam


def test_executor_runs_the_same_actions_through_the_orchestrated_driver() -> None:
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1")
    host = MockDriver(lambda req: {"now": 0.0, "inventory": sensed("cmp1", "vm1")}.get(req.method))
    drv = OrchestratedDriver(host, actuator(cloud))
    ex = Executor(drv)
    assert ex.apply(Migrate("vm1", "cmp2"), drv.inventory()) is None
    [out] = ex.poll()
    assert out.result == "succeeded"
    assert cloud.servers["uuid-vm1"].compute_host == "cmp2"
    assert [r.method for r in host.calls if r.method == "submit"] == []


def test_libvirt_orchestrator_is_the_driver_itself() -> None:
    host = MockDriver(lambda req: "op-1" if req.method == "submit" else None)
    assert orchestrate(host, OrchestratorSettings()) is host
    assert DriverActuator(host).submit(DetachVF("vm1")) == "op-1"


@pytest.mark.parametrize("loader", [load_agent_settings, load_manager_settings])
def test_settings_name_the_cloud_or_fail_clearly(loader: Any, tmp_path: Any) -> None:
    cfg = tmp_path / "sova.toml"
    cfg.write_text('orchestrator = "openstack"\n')
    with pytest.raises(ConfigError, match="cloud: required when orchestrator = 'openstack'"):
        loader(cfg, environ={})
    cfg.write_text('cloud = "prod"\n')
    with pytest.raises(ConfigError, match="cloud = 'prod': only used with orchestrator"):
        loader(cfg, environ={})
    cfg.write_text('orchestrator = "nova"\n')
    with pytest.raises(ConfigError, match="orchestrator = 'nova'"):
        loader(cfg, environ={})
    cfg.write_text('orchestrator = "openstack"\ncloud = "prod"\n[openstack]\nnetwork = "sriov"\n')
    s = loader(cfg, environ={})
    assert (s.orchestrator, s.cloud, s.openstack.network) == ("openstack", "prod", "sriov")


@pytest.mark.parametrize("loader", [load_agent_settings, load_manager_settings])
def test_abort_timeout_is_a_setting_bounded_and_passed_to_the_actuator(
    loader: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sova.orchestrator.openstack as osmod
    from sova.orchestrator.settings import openstack_actuator

    cfg = tmp_path / "sova.toml"
    head = 'orchestrator = "openstack"\ncloud = "prod"\n[openstack]\n'
    for bad in ("0", "-5", "86401", '"soon"'):
        cfg.write_text(f"{head}abort_timeout_s = {bad}\n")
        with pytest.raises(ConfigError, match="abort_timeout_s") as err:
            loader(cfg, environ={})
        assert bad.strip('"') in str(err.value), err.value
    cfg.write_text(f"{head}migration_timeout_s = 120\nabort_timeout_s = 45\n")
    s = loader(cfg, environ={})
    monkeypatch.setattr(osmod, "connect", lambda name, timeout: FakeCloud())
    act = openstack_actuator(s, "cmp1")
    assert (act.migration_timeout_s, act.abort_timeout_s) == (120.0, 45.0)
    assert (
        openstack_actuator(
            loader(None, environ={}).model_copy(
                update={"orchestrator": "openstack", "cloud": "prod"}
            ),
            "cmp1",
        ).abort_timeout_s
        == 60.0
    )


def test_connect_without_openstacksdk_or_with_an_unknown_cloud_says_so(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sova.orchestrator.openstack import CloudConfigError

    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(tmp_path / "clouds.yaml"))
    (tmp_path / "clouds.yaml").write_text("clouds: {}\n")
    with pytest.raises(CloudConfigError, match="openstacksdk|cloud = 'nowhere'"):
        connect("nowhere")


# --------------------------------------------------------------------------- recommend mode


def test_recommended_plan_has_watchers_shape_and_runs_an_approved_action() -> None:
    from sova.orchestrator.recommend import (
        execute_approved,
        proposals_from_signals,
        to_watcher_action_plan,
    )
    from sova.policy.hotspot import MigrationSignal

    cloud = FakeCloud(refusing={"cmp4"})
    cloud.add_server("vm1", "cmp1")
    cloud.add_server("vm9", "cmp2")
    signals = {
        "cmp1": MigrationSignal(True, "cmp3", "net hot", "uuid-vm1"),
        "cmp2": MigrationSignal(True, "cmp4", "net hot", "uuid-vm9"),
        "cmp3": MigrationSignal(False, None, "not hot"),
    }
    plan = to_watcher_action_plan(proposals_from_signals(signals, {"uuid-vm1": "vm1"}))
    assert plan == to_watcher_action_plan(proposals_from_signals(signals, {"uuid-vm1": "vm1"}))
    assert plan["state"] == "RECOMMENDED" and len(plan["actions"]) == 2
    first = plan["actions"][0]
    assert first["action_type"] == "migrate"
    assert first["input_parameters"] == {
        "migration_type": "live",
        "source_node": "cmp1",
        "destination_node": "cmp3",
        "resource_id": "uuid-vm1",
        "resource_name": "vm1",
    }
    ok = execute_approved(plan, first["uuid"], lambda src: actuator(cloud, src), poll_s=0)
    assert ok.result == "succeeded" and cloud.servers["uuid-vm1"].compute_host == "cmp3"
    bad = execute_approved(
        plan, plan["actions"][1]["uuid"], lambda src: actuator(cloud, src), poll_s=0
    )
    assert bad.result == "failed" and cloud.servers["uuid-vm9"].compute_host == "cmp2"
    with pytest.raises(ValueError, match="action_uuid = 'nope'"):
        execute_approved(plan, "nope", lambda src: actuator(cloud, src))


def test_openstack_orchestrator_wraps_the_host_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    import sova.orchestrator.openstack as osmod

    cloud = FakeCloud()
    asked: list[tuple[str, float]] = []

    def fake_connect(name: str, timeout: float) -> FakeCloud:
        asked.append((name, timeout))
        return cloud

    monkeypatch.setattr(osmod, "connect", fake_connect)
    host = MockDriver(lambda req: None)
    settings = OrchestratorSettings(orchestrator="openstack", cloud="prod")
    drv = orchestrate(host, settings, "cmp1")
    assert isinstance(drv, OrchestratedDriver) and drv.host is host
    assert isinstance(drv.actuator, OpenStackActuator) and drv.actuator.host == "cmp1"
    assert drv.actuator.fallback is host  # rates stay host-local
    assert asked == [("prod", 30.0)]


# --------------------------------------------------------------------------- the agent itself


class CloudHost:
    """One hypervisor of the fake cloud as libvirt senses it: its domains are the servers Nova
    placed here, a VM shows a VF once Nova attached a direct port; counters grow with load."""

    def __init__(
        self, cloud: FakeCloud, host: str, loads: dict[str, tuple[float, float]], pool: int = 1
    ):
        self.cloud, self.host, self.loads, self.t, self.pool = cloud, host, loads, 0.0, pool
        self.counters = {vm: [0.0, 0.0] for vm in loads}  # cpu ns, bytes

    def advance(self, dt: float) -> None:
        self.t += dt
        for vm, (cpu, bps) in self.loads.items():
            self.counters[vm][0] += cpu * dt * 1e9
            self.counters[vm][1] += bps * dt

    def here(self) -> list[str]:
        return [s.name for s in cloud_servers(self.cloud, self.host)]

    def __call__(self, req: DriverRequest) -> Any:
        from sova.model import HostCounters, HostSample, VMCounters

        if req.method == "now":
            return self.t
        if req.method == "inventory":
            vf = tuple(
                s.name
                for s in cloud_servers(self.cloud, self.host)
                if any(
                    p.device_id == s.id and p.binding_vnic_type == "direct"
                    for p in self.cloud.ports.values()
                )
            )
            return sensed(self.host, *self.here(), vf=vf, pool=self.pool)
        if req.method == "sample":
            vms = {
                vm: VMCounters(
                    vm,
                    1,
                    int(c[0]),
                    0,
                    int(c[1] / 2),
                    int(c[1] / 2),
                    int(c[1] / 3000),
                    int(c[1] / 3000),
                )
                for vm, c in self.counters.items()
                if vm in self.here()
            }
            return HostSample(self.host, self.t, vms, HostCounters(0, 0, 0, 0))
        raise AssertionError(f"the agent must act through the actuator, not {req.method}")


def cloud_servers(cloud: FakeCloud, host: str) -> list[Any]:
    return [s for s in cloud.servers.values() if s.compute_host == host]


def test_host_agent_decides_as_ever_and_acts_through_nova_and_neutron() -> None:
    from sova.agent.loop import HostAgent

    cloud = FakeCloud(vfs_per_host={"cmp1": 1, "cmp2": 1})
    loads = {"batch": (0.95, 80e6), "db": (0.10, 5e6), "web": (0.05, 50e6)}
    for vm in loads:
        cloud.add_server(vm, "cmp1")
    world = CloudHost(cloud, "cmp1", loads)
    agent = HostAgent(OrchestratedDriver(MockDriver(world), actuator(cloud)), _papers_sova())
    for _ in range(4):
        agent.step()
        world.advance(10.0)
    # The VF scheduler's holder (the network-bound, I/O-light web) holds a Neutron direct port.
    direct = [p for p in cloud.ports.values() if p.binding_vnic_type == "direct"]
    assert [p.device_id for p in direct] == ["uuid-web"]
    # The manager moves web to cmp2: the VF is revoked first, then Nova live-migrates it.
    agent.signal(True, "cmp2", vm="web")
    agent.step()
    agent.poll()
    agent.step()
    assert cloud.servers["uuid-web"].compute_host == "cmp2"
    assert ("live_migrate_server", {"host": "cmp2", "force": False}) in cloud.calls
    order = [c for c, _ in cloud.calls if c in ("delete_server_interface", "live_migrate_server")]
    assert order == ["delete_server_interface", "live_migrate_server"]
    # web's port went away before the migration; the freed VF went to the next in rank.
    assert [p.device_id for p in cloud.ports.values() if p.binding_vnic_type == "direct"] == [
        "uuid-db"
    ]
    assert agent.migrating == {}


# --------------------------------------------------------------------------- an unreachable cloud


class DiscoveryFailure(Exception):
    """Stands for keystoneauth's ``DiscoveryFailure``: not an SDK exception, not an OSError
    (the tier raises the real one against a closed port, tests/openstack/tier_nova)."""


def test_agent_keeps_running_and_skips_the_period_while_the_cloud_is_unreachable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging
    import threading

    from sova.manager.daemons.agent.daemon import STEP, AgentDaemon
    from sova.manager.daemons.config import AgentSettings

    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    loads = {"web": (0.05, 50e6)}
    cloud.add_server("web", "cmp1")
    world = CloudHost(cloud, "cmp1", loads)
    up = cloud.compute.servers
    drv = OrchestratedDriver(
        MockDriver(world),
        OpenStackActuator(cloud, "cmp1", spawn=lambda fn: fn(), poll_s=0.0),  # default errors
    )
    settings = AgentSettings.model_validate(
        {"driver": "mock", "host": "cmp1", "controller": {"period": 10, "vf_policy": "sova"}}
    )
    d = AgentDaemon(settings, drv)

    def down(**_: Any) -> Any:
        raise DiscoveryFailure("Could not find versioned identity endpoints")

    turns = iter([True, False, True])  # cloud up?, per period

    class Periods:
        def next(self) -> tuple[float, list[int]] | None:
            state = next(turns, None)
            if state is None:
                return None
            cloud.compute.servers = up if state else down  # type: ignore[method-assign]
            world.advance(10.0)
            return world.t, [STEP]

    caplog.set_level(logging.WARNING)
    d.run(Periods(), threading.Event())  # returns when the periods run out: never raised
    skipped = [r.getMessage() for r in caplog.records if "DiscoveryFailure" in r.getMessage()]
    assert len(skipped) == 1, skipped  # one line for the one period the cloud was down
    assert "inventory unavailable" in skipped[0]
    # Periods before and after it were decided: the agent went on after the outage.
    assert d.agent.last_load is not None


def test_agent_started_while_the_cloud_is_unreachable_keeps_running_and_reconciles_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The cloud is down when the agent starts: one log line, no crash; the first period the
    cloud answers, the agent reconciles (adopting the host as found) and decides again."""
    import logging
    import threading

    from sova.manager.daemons.agent.daemon import STEP, AgentDaemon
    from sova.manager.daemons.config import AgentSettings

    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("web", "cmp1")
    world = CloudHost(cloud, "cmp1", {"web": (0.05, 50e6)})
    up = cloud.compute.servers

    def down(**_: Any) -> Any:
        raise DiscoveryFailure("Could not find versioned identity endpoints")

    cloud.compute.servers = down  # type: ignore[method-assign]
    drv = OrchestratedDriver(
        MockDriver(world),
        OpenStackActuator(cloud, "cmp1", spawn=lambda fn: fn(), poll_s=0.0),  # default errors
    )
    settings = AgentSettings.model_validate(
        {"driver": "mock", "host": "cmp1", "controller": {"period": 10, "vf_policy": "sova"}}
    )
    d = AgentDaemon(settings, drv)
    turns = iter([False, True, True])  # cloud up?, per period: down at start and one period

    class Periods:
        def next(self) -> tuple[float, list[int]] | None:
            state = next(turns, None)
            if state is None:
                return None
            cloud.compute.servers = up if state else down  # type: ignore[method-assign]
            world.advance(10.0)
            return world.t, [STEP]

    caplog.set_level(logging.INFO)
    d.run(Periods(), threading.Event())  # returns when the periods run out: never raised
    down_lines = [r.getMessage() for r in caplog.records if "DiscoveryFailure" in r.getMessage()]
    # Start and the first period: one line each, no traceback, nothing decided blind.
    assert len(down_lines) == 2, down_lines
    assert all(r.exc_info is None for r in caplog.records)
    reconciled = [r.getMessage() for r in caplog.records if r.getMessage().startswith("reconciled")]
    assert len(reconciled) == 1 and "cmp1: 1 VM(s)" in reconciled[0], reconciled
    assert "VF holders []" in reconciled[0]  # adopted as found once the cloud answered
    assert d.last_report is not None  # the periods after it were decided ...
    direct = [p.device_id for p in cloud.ports.values() if p.binding_vnic_type == "direct"]
    assert direct == ["uuid-web"]  # ... and acted on: the VF granted through the cloud


# --------------------------------------------------------------------------- guest-bond through Nova


class BondHost:
    """The host side of the guest's bond (what LibvirtDriver.to_fast/to_backup do through the
    guest agent): records each step next to the cloud's calls, and can refuse to confirm."""

    def __init__(self, cloud: FakeCloud, confirm: bool = True) -> None:
        self.cloud, self.confirm = cloud, confirm

    def _step(self, what: str, vm: str) -> str:
        self.cloud.calls.append((what, {"vm": vm}))
        if not self.confirm:
            raise DriverError(f"{vm}: active slave not confirmed")
        return f"bond: active slave {what}"

    def to_fast(self, vm: str) -> str:
        return self._step("to_fast", vm)

    def to_backup(self, vm: str) -> str:
        return self._step("to_backup", vm)


def test_vf_joins_the_guests_bond_after_the_attach_and_leaves_it_before_the_detach() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud, fallback=BondHost(cloud))
    assert run(act, AttachVF("vm1")).state is OpState.SUCCEEDED
    # Same network as the virtio port (the bond's backup), which may carry the VM's address.
    [attrs] = [a for c, a in cloud.calls if c == "create_port"]
    assert attrs["network_id"] == "net-data"
    assert attrs["allowed_address_pairs"] == [{"ip_address": "192.0.2.1"}]
    assert attrs["fixed_ips"] == []  # no spare address of the subnet for the VF port
    assert run(act, DetachVF("vm1")).state is OpState.SUCCEEDED
    order = [
        c
        for c, _ in cloud.calls
        if c in ("create_server_interface", "to_fast", "to_backup", "delete_server_interface")
    ]
    assert order == ["create_server_interface", "to_fast", "to_backup", "delete_server_interface"]


def test_unconfirmed_bond_keeps_the_vf_on_detach_and_gives_it_back_on_attach() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1")
    bond = BondHost(cloud)
    act = actuator(cloud, fallback=bond)
    assert run(act, AttachVF("vm1")).state is OpState.SUCCEEDED
    bond.confirm = False
    st = run(act, DetachVF("vm1"))
    assert st.state is OpState.FAILED and "VF kept" in st.detail
    assert not any(c == "delete_server_interface" for c, _ in cloud.calls)
    assert cloud.bound_vfs("cmp1") == 1
    # An attach whose VF never becomes active does not keep a VF that carries nothing; giving
    # it back needs the backup confirmed, which this guest cannot do: it is kept, and said.
    cloud2 = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud2.add_server("vm1", "cmp1")
    half = BondHost(cloud2)
    act2 = actuator(cloud2, fallback=half)
    half.to_fast = lambda vm: (_ for _ in ()).throw(DriverError("no netdev"))  # type: ignore[method-assign]
    st = run(act2, AttachVF("vm1"))
    assert st.state is OpState.FAILED and "not made active" in st.detail
    assert "given back" in st.detail and cloud2.bound_vfs("cmp1") == 0


def two_network_server(cloud: FakeCloud, *, on_b: bool = True) -> None:
    """vm1 with its first virtio port on tenant-a and, if ``on_b``, a second on provider."""
    cloud.add_network("id-a", "tenant-a")
    cloud.add_network("id-b", "provider")
    vm = cloud.add_server("vm1", "cmp1", net="id-a")
    cloud.ports[next(p.id for p in cloud.ports.values() if p.device_id == vm.id)].fixed_ips = [
        {"ip_address": "10.0.0.10"}
    ]
    if on_b:
        cloud.add_port(vm, "id-b", "10.0.1.20")


@pytest.mark.parametrize("network", ["provider", "id-b"])
def test_vf_goes_on_the_configured_network_beside_the_vms_virtio_port_there(network: str) -> None:
    # Two networks; only the second is the configured one (by name or by id): the VF port goes
    # there and may carry the address of the VM's virtio port there, not the first port's.
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    two_network_server(cloud)
    st = run(actuator(cloud, network=network), AttachVF("vm1"))
    assert st.state is OpState.SUCCEEDED, st.detail
    [attrs] = [a for c, a in cloud.calls if c == "create_port"]
    assert attrs["network_id"] == "id-b"
    assert attrs["allowed_address_pairs"] == [{"ip_address": "10.0.1.20"}]


def test_vf_is_refused_where_the_vm_has_no_virtio_port_on_the_configured_network() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    two_network_server(cloud, on_b=False)
    st = run(actuator(cloud, network="provider"), AttachVF("vm1"))
    assert st.state is OpState.FAILED
    assert "no port on network 'provider'" in st.detail, st.detail
    assert not any(c == "create_port" for c, _ in cloud.calls)


def test_network_name_shared_by_two_of_the_vms_networks_is_refused_as_ambiguous() -> None:
    # An admin sees every project's networks: a name may mean two. Only the id is unambiguous.
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    two_network_server(cloud)
    cloud.networks["id-a"].name = "provider"
    st = run(actuator(cloud, network="provider"), AttachVF("vm1"))
    assert st.state is OpState.FAILED and "2 networks of that name (id-a, id-b)" in st.detail
    assert not any(c == "create_port" for c, _ in cloud.calls)
    assert run(actuator(cloud, network="id-b"), AttachVF("vm1")).state is OpState.SUCCEEDED


def test_without_a_configured_network_the_vf_goes_beside_the_first_virtio_port() -> None:
    # The VM's own VF port (first in Neutron's list) is no bond backup: the virtio one is.
    cloud = FakeCloud(vfs_per_host={"cmp1": 2})
    cloud.add_network("id-x", "tenant-sriov")
    vm = cloud.add_server("vm1", "cmp1")
    theirs = cloud.add_tenant_vf(vm)
    theirs.network_id = "id-x"
    cloud.ports = {theirs.id: theirs, **cloud.ports}  # listed first
    assert run(actuator(cloud), AttachVF("vm1")).state is OpState.SUCCEEDED
    [attrs] = [a for c, a in cloud.calls if c == "create_port"]
    assert attrs["network_id"] == "net-data"


def test_vf_is_refused_on_an_overlay_network_sriovnicswitch_cannot_bind() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1", net="tenant-net", net_type="vxlan")
    st = run(actuator(cloud), AttachVF("vm1"))
    assert st.state is OpState.FAILED
    assert "'vxlan'" in st.detail and "vlan and flat" in st.detail
    assert not any(c == "create_port" for c, _ in cloud.calls)


def test_vf_is_refused_where_ml2_ovn_bound_the_virtio_port() -> None:
    """OVN answers ARP for the guest's address with the virtio port's MAC (its logical
    switch's responder, its routers' resolution: tier_neutron/test_os_neutron_ovn.py shows
    both in ovn-northd's flows), so traffic to the guest would not follow the bond to a VF:
    refused before any port is made, naming the port and the reason."""
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1", bound_by="ovn")
    st = run(actuator(cloud), AttachVF("vm1"))
    assert st.state is OpState.FAILED
    assert "bound by ML2/OVN" in st.detail and "virtio port's MAC" in st.detail, st.detail
    assert "\n" not in st.detail
    assert not any(c == "create_port" for c, _ in cloud.calls)
    # The same VM on a port the openvswitch driver bound gets its VF.
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1", bound_by="openvswitch")
    assert run(actuator(cloud), AttachVF("vm1")).state is OpState.SUCCEEDED


# --------------------------------------------------------------------------- Nova's own operations

# Each of Nova's operations someone else runs on a VM holding Sova's VF (steps: the operation
# and where the scheduler puts the server), and the host it ends on. While any runs, every
# agent stands back; after, the port Nova carried or re-plugged is given back, bond first.
NOVA_LIFECYCLE = [
    ("resize", [("resize", "cmp2"), ("confirm_resize", None)], "cmp2"),
    ("cold migration", [("migrate", "cmp2"), ("confirm_resize", None)], "cmp2"),
    ("live migration by Watcher or an operator", [("live_migrate", "cmp2")], "cmp2"),
    ("evacuate", [("evacuate", "cmp2")], "cmp2"),
    ("rebuild", [("rebuild", None)], "cmp1"),
    ("shelve, unshelve elsewhere", [("shelve", None), ("unshelve", "cmp2")], "cmp2"),
    ("hard reboot", [("reboot", None)], "cmp1"),
]


@pytest.mark.parametrize(
    ("steps", "lands"), [c[1:] for c in NOVA_LIFECYCLE], ids=[c[0] for c in NOVA_LIFECYCLE]
)
def test_nova_operation_on_a_vf_holder_leaves_no_sova_port_and_no_bond_on_a_dead_path(
    steps: list[tuple[str, str | None]], lands: str
) -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 1, "cmp2": 1})
    cloud.add_server("vm1", "cmp1")
    acts = {h: actuator(cloud, h, fallback=BondHost(cloud)) for h in ("cmp1", "cmp2")}
    assert run(acts["cmp1"], AttachVF("vm1")).state is OpState.SUCCEEDED
    [port] = [p.id for p in cloud.ports.values() if SOVA_TAG in p.tags]
    server = cloud.servers["uuid-vm1"]
    for op, dest in steps:
        cloud.begin(server.id, op)
        where = server.compute_host
        if where:  # (a shelved-offloaded server is on no host)
            act = acts[where]
            inv = act.reconcile(sensed(where, "vm1", vf=("vm1",), pool=1))
            assert "vm1" not in inv.vms  # withheld: the agent plans nothing for it
            assert inv.host.nic.vf_pool == 0  # its VF is not free for another VM
            assert any("Nova is operating on it" in d for d in act.discrepancies)
            for action in (DetachVF("vm1"), AttachVF("vm1"), Migrate("vm1", "cmp3")):
                st = run(act, action)
                assert st.state is OpState.FAILED and "Sova stands back" in st.detail, st.detail
        cloud.end(server.id, op, dest)
    assert server.compute_host == lands and server.status == "ACTIVE"
    assert not [c for c, _ in cloud.calls if c == "live_migrate_server"]  # never Sova's
    assert cloud.ports[port].binding_host_id == lands  # Nova carried the port along
    act = acts[lands]
    if any(op == "evacuate" for op, _ in steps):
        # Until cmp1's service is back, Nova keeps cmp1's VF claimed under the port's PCI
        # request too, and a detach would release that one: the port stays, Sova stands back.
        for _ in range(2):
            inv = act.reconcile(sensed(lands, "vm1", vf=("vm1",), pool=1))
            assert "vm1" not in inv.vms and inv.host.nic.vf_pool == 0
            assert any("(status done) from cmp1" in d for d in act.discrepancies), act.discrepancies
        assert not [c for c, _ in cloud.calls if c in ("to_backup", "delete_server_interface")]
        cloud.restart_compute("cmp1")
    mark = len(cloud.calls)
    inv = act.reconcile(sensed(lands, "vm1", vf=("vm1",), pool=1))
    assert "vm1" not in inv.vms  # still Sova's give-back running this period
    inv = act.reconcile(sensed(lands, "vm1", pool=1))
    assert not [p for p in cloud.ports.values() if SOVA_TAG in p.tags]  # no Sova port left
    order = [c for c, _ in cloud.calls[mark:] if c in ("to_backup", "delete_server_interface")]
    assert order == ["to_backup", "delete_server_interface"]  # the bond left the VF first
    assert any(d.startswith("vm1: given back") for d in act.discrepancies), act.discrepancies
    st = inv.vms["vm1"]
    assert st.nic is NicKind.VIRTIO and st.running and st.failover_ready and not st.migrating
    # Back on its fast path when it earns it: the agent's next grant goes through.
    assert run(act, AttachVF("vm1")).state is OpState.SUCCEEDED
    assert len([p for p in cloud.ports.values() if SOVA_TAG in p.tags]) == 1


def test_carried_port_is_kept_while_novas_evacuation_records_cannot_be_read() -> None:
    """The evacuation check before a give-back, unanswered: no detach that period (it might
    free the source's VF instead of this host's), the VM withheld; answered next period
    with no unsettled evacuation, the port is given back."""
    cloud = FakeCloud(vfs_per_host={"cmp1": 1, "cmp2": 1})
    cloud.add_server("vm1", "cmp1")
    acts = {h: actuator(cloud, h, fallback=BondHost(cloud)) for h in ("cmp1", "cmp2")}
    assert run(acts["cmp1"], AttachVF("vm1")).state is OpState.SUCCEEDED
    cloud.begin("uuid-vm1", "live_migrate")
    cloud.end("uuid-vm1", "live_migrate", "cmp2")
    real = cloud.compute.migrations

    def unanswered(**query: Any) -> Any:
        raise FakeCloudTimeout("Request to /os-migrations timed out")

    cloud.compute.migrations = unanswered  # type: ignore[method-assign]
    inv = acts["cmp2"].reconcile(sensed("cmp2", "vm1", vf=("vm1",), pool=1))
    assert "vm1" not in inv.vms and inv.host.nic.vf_pool == 0
    assert any(
        "evacuation records unreadable" in d and "kept, Sova stands back" in d
        for d in acts["cmp2"].discrepancies
    ), acts["cmp2"].discrepancies
    assert not [c for c, _ in cloud.calls if c in ("to_backup", "delete_server_interface")]
    cloud.compute.migrations = real  # type: ignore[method-assign]
    acts["cmp2"].reconcile(sensed("cmp2", "vm1", vf=("vm1",), pool=1))  # the give-back runs
    acts["cmp2"].reconcile(sensed("cmp2", "vm1", pool=1))  # ... and is reported
    assert any(d.startswith("vm1: given back") for d in acts["cmp2"].discrepancies)
    assert not [p for p in cloud.ports.values() if SOVA_TAG in p.tags]


def test_rebuild_sova_did_not_see_is_known_by_novas_launch_time() -> None:
    """A re-spawn between two periods (a rebuild, a resize to the same host) is never seen
    in progress: Nova's ``launched_at`` changed, so the guest's bond is a new one."""
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud, fallback=BondHost(cloud))
    assert run(act, AttachVF("vm1")).state is OpState.SUCCEEDED
    act.reconcile(sensed("cmp1", "vm1", vf=("vm1",), pool=1))
    assert [p for p in cloud.ports.values() if SOVA_TAG in p.tags]  # settled: kept
    cloud.begin("uuid-vm1", "rebuild")
    cloud.end("uuid-vm1", "rebuild")
    act.reconcile(sensed("cmp1", "vm1", vf=("vm1",), pool=1))
    assert any("outlived Nova re-spawning the server" in d for d in act.discrepancies)
    assert not [p for p in cloud.ports.values() if SOVA_TAG in p.tags]


def test_port_settled_where_sova_made_it_is_kept() -> None:
    # No operation of Nova's: the same port, period after period (no churn of VFs).
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud, fallback=BondHost(cloud))
    assert run(act, AttachVF("vm1")).state is OpState.SUCCEEDED
    for _ in range(3):
        inv = act.reconcile(sensed("cmp1", "vm1", vf=("vm1",), pool=1))
        assert inv.vms["vm1"].nic is NicKind.VF
    assert not [c for c, _ in cloud.calls if c in ("to_backup", "delete_server_interface")]


def test_give_back_whose_bond_never_confirms_keeps_the_vf_and_is_bounded() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1")
    bond = BondHost(cloud)
    act = actuator(cloud, fallback=bond, retire_tries=2)
    assert run(act, AttachVF("vm1")).state is OpState.SUCCEEDED
    cloud.begin("uuid-vm1", "rebuild")
    cloud.end("uuid-vm1", "rebuild")
    bond.confirm = False
    notes = []
    for _ in range(4):
        inv = act.reconcile(sensed("cmp1", "vm1", vf=("vm1",), pool=1))
        notes += act.discrepancies
    # Two tries, each refused before Nova's detach; then the VM is the agent's holder again.
    assert len([c for c, _ in cloud.calls if c == "to_backup"]) == 2
    assert not [c for c, _ in cloud.calls if c == "delete_server_interface"]
    assert [n.rsplit("; ", 1)[1] for n in notes if "give-back failed" in n] == [
        "1 more tries",
        "left to the agent as a VF holder",
    ]
    assert inv.vms["vm1"].nic is NicKind.VF and cloud.bound_vfs("cmp1") == 1
    # Another operation of Nova's on it: a new give-back, with its own tries.
    cloud.begin("uuid-vm1", "reboot")
    act.reconcile(sensed("cmp1", "vm1", vf=("vm1",), pool=1))
    cloud.end("uuid-vm1", "reboot")
    bond.confirm = True
    act.reconcile(sensed("cmp1", "vm1", vf=("vm1",), pool=1))
    assert len([c for c, _ in cloud.calls if c == "to_backup"]) == 3
    assert not [p for p in cloud.ports.values() if SOVA_TAG in p.tags]


def test_agent_stands_back_while_nova_operates_and_regrants_after() -> None:
    """The agent, deciding as ever, next to an operator's rebuild of its VF holder: while it
    runs, no VF call at all (web's VF is neither revoked nor handed to db); once Nova is done,
    web's re-plugged port is given back and web, still first in rank, gets a new one."""
    from sova.agent.loop import HostAgent

    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    loads = {"batch": (0.95, 80e6), "db": (0.10, 5e6), "web": (0.05, 50e6)}
    for vm in loads:
        cloud.add_server(vm, "cmp1")
    world = CloudHost(cloud, "cmp1", loads)
    agent = HostAgent(OrchestratedDriver(MockDriver(world), actuator(cloud)), _papers_sova())
    for _ in range(4):
        agent.step()
        world.advance(10.0)
    [first] = [p.id for p in cloud.ports.values() if p.device_id == "uuid-web" and p.tags]
    mark = len(cloud.calls)
    cloud.begin("uuid-web", "rebuild")
    for _ in range(3):
        agent.step()
        agent.poll()
        world.advance(10.0)
    vf_calls = ("create_port", "create_server_interface", "delete_server_interface", "delete_port")
    assert not [c for c, _ in cloud.calls[mark:] if c in vf_calls]
    cloud.end("uuid-web", "rebuild")
    for _ in range(4):
        agent.step()
        agent.poll()
        world.advance(10.0)
    assert first not in cloud.ports
    assert [p.device_id for p in cloud.ports.values() if p.tags] == ["uuid-web"]


def test_sova_never_migrates_a_vm_someone_else_is_migrating() -> None:
    """Watcher's applier (or an operator) live-migrates web through Nova while Sova's
    manager signals the host to move web too: the agent is not given web, so it chooses
    no migration of it, and the actuator refuses one without asking Nova. (Watcher's
    applier, the other way round, fails a migrate action whose instance is not ACTIVE.)"""
    from sova.agent.loop import HostAgent

    cloud = FakeCloud(vfs_per_host={"cmp1": 1, "cmp2": 1})
    loads = {"batch": (0.95, 80e6), "db": (0.10, 5e6), "web": (0.05, 50e6)}
    for vm in loads:
        cloud.add_server(vm, "cmp1")
    world = CloudHost(cloud, "cmp1", loads)
    act = actuator(cloud)
    agent = HostAgent(OrchestratedDriver(MockDriver(world), act), _papers_sova())
    for _ in range(3):
        agent.step()
        world.advance(10.0)
    cloud.begin("uuid-web", "live_migrate")
    agent.signal(True, "cmp2", vm="web")
    agent.step()
    agent.poll()
    agent.step()
    # Alg. 1 takes the host's largest-MF VM when the manager's pick is not here to move:
    # never web, whose one migration is Nova's.
    assert "web" not in agent.migrating
    assert "uuid-web" not in [m.server_id for m in cloud.migrations]
    st = run(act, Migrate("web", "cmp2"))
    assert st.state is OpState.FAILED
    assert st.detail == "Nova is operating on web (task_state migrating): Sova stands back"
    assert "uuid-web" not in [m.server_id for m in cloud.migrations]


# --------------------------------------------------------------------------- the client libraries


def _stand_in_clients(monkeypatch: pytest.MonkeyPatch) -> Any:
    """openstacksdk's and keystoneauth's modules as far as the actuator imports them (the main
    venv has neither; the tier runs the real ones): their error classes and ``connect``."""
    import types

    class SDKException(Exception):
        pass

    class ConfigException(SDKException):
        pass

    class ClientException(Exception):
        pass

    class ConnectTimeout(ClientException):
        pass

    sdk_exc = types.SimpleNamespace(SDKException=SDKException, ConfigException=ConfigException)
    ksa_exc = types.SimpleNamespace(ClientException=ClientException, ConnectTimeout=ConnectTimeout)
    asked: list[dict[str, Any]] = []

    def connect(**kw: Any) -> Any:
        asked.append(kw)
        if kw.get("cloud") != "prod":
            raise ConfigException(f"Cloud {kw.get('cloud')} was not found.")
        return "conn"

    sdk = types.SimpleNamespace(connect=connect, exceptions=sdk_exc, asked=asked)
    monkeypatch.setitem(__import__("sys").modules, "openstack", sdk)
    monkeypatch.setitem(__import__("sys").modules, "openstack.exceptions", sdk_exc)
    ksa = types.SimpleNamespace(exceptions=ksa_exc)
    monkeypatch.setitem(__import__("sys").modules, "keystoneauth1", ksa)
    monkeypatch.setitem(__import__("sys").modules, "keystoneauth1.exceptions", ksa_exc)
    return types.SimpleNamespace(sdk=sdk, ksa=ksa_exc, sdk_exc=sdk_exc)


def test_connect_passes_the_cloud_entry_and_timeout_to_openstacksdk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sova.orchestrator.base import CloudConfigError

    libs = _stand_in_clients(monkeypatch)
    assert connect("prod", 12.0) == "conn"
    assert libs.sdk.asked == [{"cloud": "prod", "api_timeout": 12.0}]
    with pytest.raises(CloudConfigError, match=r"^cloud = 'nowhere': Cloud nowhere was not found"):
        connect("nowhere")


def test_keystoneauth_and_sdk_errors_are_the_clouds_and_a_timeout_is_followed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the real client libraries' classes (not the tests' own): a keystoneauth error
    (not an SDK subclass) or an SDK one makes the inventory unavailable, and keystoneauth's
    ConnectTimeout on os-migrateLive is followed through Nova's records, not a failure."""
    libs = _stand_in_clients(monkeypatch)
    for exc in (
        libs.ksa.ClientException("Unable to establish connection"),
        libs.sdk_exc.SDKException("503"),
    ):
        cloud = FakeCloud()

        def down(_exc: Exception = exc, **_: Any) -> Any:
            raise _exc

        cloud.compute.servers = down  # type: ignore[method-assign]
        act = OpenStackActuator(cloud, "cmp1", spawn=lambda fn: fn(), poll_s=0.0)
        with pytest.raises(DriverError, match="^OpenStack inventory unavailable"):
            act.reconcile(sensed("cmp1", "vm1"))
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1")
    migrate = cloud.compute.live_migrate_server

    def late(*a: Any, **kw: Any) -> None:
        migrate(*a, **kw)
        raise libs.ksa.ConnectTimeout("Request to /servers/action timed out")

    cloud.compute.live_migrate_server = late  # type: ignore[method-assign]
    act = OpenStackActuator(cloud, "cmp1", spawn=lambda fn: fn(), poll_s=0.0)
    st = act.poll(act.submit(Migrate("vm1", "cmp3")))
    assert st.state is OpState.SUCCEEDED and "Nova's answer timed out" in st.detail, st.detail


def test_without_the_client_libraries_a_transport_error_is_a_refusal_not_a_crash() -> None:
    # The main venv has no keystoneauth: no timeout class, and a refused connection (an
    # OSError) is Nova's refusal, reported with where the server is.
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1")

    def refused(*_: Any, **__: Any) -> None:
        raise ConnectionRefusedError("Connection refused")

    cloud.compute.live_migrate_server = refused  # type: ignore[method-assign]
    act = OpenStackActuator(cloud, "cmp1", spawn=lambda fn: fn(), poll_s=0.0)
    st = act.poll(act.submit(Migrate("vm1", "cmp3")))
    assert st.state is OpState.FAILED
    assert st.detail.startswith("Nova refused to live-migrate vm1 to cmp3: Connection refused")


def test_actuator_defaults_are_the_documented_settings() -> None:
    # An actuator built without the settings (recommend mode's, a test's) waits as long as
    # docs/openstack.md#configuration says, and sweeps every 30 periods.
    import dataclasses

    from sova.orchestrator.settings import OpenStackOptions

    docs = OpenStackOptions()
    fields = {f.name: f.default for f in dataclasses.fields(OpenStackActuator)}
    for name in ("migration_timeout_s", "detach_timeout_s", "abort_timeout_s"):
        assert fields[name] == getattr(docs, name), name
    assert fields["sweep_every"] == 30 and fields["name"] == "openstack"
    assert fields["retire_tries"] == 3  # docs/openstack.md#novas-own-operations


def test_detach_waits_the_whole_detach_timeout_then_keeps_the_port() -> None:
    # Polls at 0, 1, ... 5 s find the port attached; the first past 5 s (6 s) gives up.
    cloud = FakeCloud(vfs_per_host={"cmp1": 1}, detach_looks=10_000)
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud, detach_timeout_s=5.0)
    run(act, AttachVF("vm1"))
    act.clock.t = 100.0  # type: ignore[attr-defined]  # an agent that has run a while
    t0 = act.clock()
    st = run(act, DetachVF("vm1"))
    assert act.clock() - t0 == 6.0
    assert st.detail.endswith("from vm1 within 5s; ports kept"), st.detail


def test_migration_is_aborted_at_the_first_poll_past_its_timeout() -> None:
    cloud = FakeCloud(migration_steps=10_000)
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud, migration_timeout_s=30.0)
    act.clock.t = 100.0  # type: ignore[attr-defined]  # an agent that has run a while
    abort = cloud.compute.abort_server_migration
    asked_at: list[float] = []

    def timed_abort(mid: int, server: str) -> None:
        asked_at.append(act.clock())
        abort(mid, server)

    cloud.compute.abort_server_migration = timed_abort  # type: ignore[method-assign]
    run(act, Migrate("vm1", "cmp2"))
    assert asked_at == [131.0]  # polls at 0..30 s into it are within the 30 s


def test_abort_unconfirmed_is_given_exactly_abort_timeout() -> None:
    cloud = FakeCloud(migration_steps=10_000, abort_looks=None)
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud, migration_timeout_s=30.0, abort_timeout_s=20.0)
    run(act, Migrate("vm1", "cmp2"))
    assert act.clock() == 31.0 + 21.0  # the abort at 31 s, given up at the first poll past 20 s


def test_migration_nova_never_started_is_given_up_after_30_polls() -> None:
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1")

    def accepted_only(*_: Any, **__: Any) -> None:
        pass  # accepted, then the scheduler refused before any record (no task state)

    cloud.compute.live_migrate_server = accepted_only  # type: ignore[method-assign]
    act = actuator(cloud, poll_s=2.0)
    st = run(act, Migrate("vm1", "cmp3"))
    assert st.detail.startswith("Nova accepted the live migration of vm1 and started none")
    assert act.clock() == 62.0  # 30 polls of 2 s, and the first past them


def test_detach_of_a_vm_without_a_vf_says_so() -> None:
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1")
    st = run(actuator(cloud), DetachVF("vm1"))
    assert st.state is OpState.SUCCEEDED and st.detail == "vm1 holds no Sova VF port"


def test_servers_of_every_project_on_the_host_are_found() -> None:
    # The agent's credential is one project's; the host runs every project's servers.
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1").project_id = "tenant-b"
    inv = actuator(cloud).reconcile(sensed("cmp1", "vm1"))
    assert inv.vms["vm1"].running


def test_port_made_by_an_earlier_run_for_another_host_is_known_by_its_description() -> None:
    # Ports outlive the agent that made them: the description deployments already carry
    # says the host the port was made for.
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    vm = cloud.add_server("vm1", "cmp1")
    p = cloud.network.create_port(
        name=PORT_PREFIX + "vm1",
        network_id="net-data",
        binding_vnic_type="direct",
        description="Sova fast path (SR-IOV VF); created and deleted by sova on cmp2",
        tags=[SOVA_TAG],
    )
    cloud.compute.create_server_interface(vm, p.id)
    act = actuator(cloud)
    act.reconcile(sensed("cmp1", "vm1", vf=("vm1",), pool=1))
    assert (
        f"vm1: Sova VF port(s) {p.id} made for cmp2, brought here by Nova: given back, the bond on virtio first"
        in act.discrepancies
    )
    assert p.id not in cloud.ports


def test_only_sovas_own_description_names_the_host_a_port_was_made_for() -> None:
    """A port made before descriptions named the host, or one whose description someone else
    wrote, says nothing of where it was made: settled where it is, it is kept."""
    for desc in (
        "Sova fast path (SR-IOV VF); created and deleted by sova",
        "moved on cmp2",
    ):
        cloud = FakeCloud(vfs_per_host={"cmp1": 1})
        vm = cloud.add_server("vm1", "cmp1")
        p = cloud.network.create_port(
            name=PORT_PREFIX + "vm1",
            network_id="net-data",
            binding_vnic_type="direct",
            description=desc,
            tags=[SOVA_TAG],
        )
        cloud.compute.create_server_interface(vm, p.id)
        act = actuator(cloud)
        inv = act.reconcile(sensed("cmp1", "vm1", vf=("vm1",), pool=1))
        assert inv.vms["vm1"].nic is NicKind.VF and p.id in cloud.ports, desc


def test_tenants_vf_vm_the_host_senses_migrating_stays_migrating() -> None:
    import dataclasses

    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_tenant_vf(cloud.add_server("ten", "cmp1"))
    inv0 = sensed("cmp1", "ten")
    inv = Inventory(inv0.host, {"ten": dataclasses.replace(inv0.vms["ten"], migrating=True)})
    got = actuator(cloud).reconcile(inv)
    assert got.vms["ten"].migrating and not got.vms["ten"].failover_ready


def test_sova_port_of_another_projects_server_is_not_taken_for_a_leak() -> None:
    # The agent's credential sees other projects' servers only when it asks for all of them.
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1").project_id = "tenant-b"
    act = actuator(cloud, sweep_every=1)
    assert run(act, AttachVF("vm1")).state is OpState.SUCCEEDED
    assert act.sweep_leaked_ports() == []
    assert [p.device_id for p in cloud.ports.values() if SOVA_TAG in p.tags] == ["uuid-vm1"]


def test_migration_nova_did_not_answer_and_never_started_says_so() -> None:
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1")

    def unanswered(*_: Any, **__: Any) -> None:
        raise FakeCloudTimeout("Request to /servers/action timed out")

    cloud.compute.live_migrate_server = unanswered  # type: ignore[method-assign]
    st = run(actuator(cloud), Migrate("vm1", "cmp3"))
    assert st.state is OpState.FAILED
    assert st.detail.startswith("Nova did not answer the live migration of vm1 and started none")


def test_placement_pool_is_this_hosts_tree_only() -> None:
    # Another compute's provider tree in Placement adds nothing to this host's pool.
    cloud = FakeCloud(vfs_per_host={"cmp1": 4})
    cloud.add_server("vm1", "cmp1")
    cloud.rps = [
        RP("rp-cmp1", "cmp1"),
        RP("rp-pf0", "cmp1_pf0", parent="rp-cmp1"),
        RP("rp-cmp2", "cmp2"),
        RP("rp-pf1", "cmp2_pf0", parent="rp-cmp2"),
    ]
    cloud.inventories = {
        "rp-pf0": [Inv("CUSTOM_SRIOV_VF", 2)],
        "rp-pf1": [Inv("CUSTOM_SRIOV_VF", 2)],
    }
    act = actuator(cloud, vf_resource_class="CUSTOM_SRIOV_VF")
    assert act.reconcile(sensed("cmp1", "vm1", pool=4)).host.nic.vf_pool == 2


def test_tenants_holding_every_vf_leave_sova_none() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1")
    cloud.add_tenant_vf(cloud.add_server("ten", "cmp1"))
    inv = actuator(cloud).reconcile(sensed("cmp1", "vm1", "ten", pool=1))
    assert inv.host.nic.vf_pool == 0


def test_poll_of_an_operation_the_actuator_never_ran_fails() -> None:
    st = actuator(FakeCloud()).poll("os:vf_attach:vm1:99")
    assert st.state is OpState.FAILED and st.detail == "unknown operation id"


def test_vf_goes_on_a_flat_provider_network_too() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1", net="flat-net", net_type="flat")
    st = run(actuator(cloud), AttachVF("vm1"))
    assert st.state is OpState.SUCCEEDED, st.detail


def test_vm_holding_several_own_vf_ports_is_named_with_each() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 2})
    ten = cloud.add_server("ten", "cmp1")
    a, b = cloud.add_tenant_vf(ten), cloud.add_tenant_vf(ten)
    act = actuator(cloud)
    act.reconcile(sensed("cmp1", "ten"))
    assert f"ten: holds its own VF port(s) {a.id}, {b.id}, not Sova's: left alone" in (
        act.discrepancies
    )
