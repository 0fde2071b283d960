"""More of the actuator's seam with the in-memory cloud: the edges a mutation run of
src/sova/orchestrator/openstack*.py found no test for (scripts/mutation-openstack.sh;
docs/openstack.md#mutation-run). Each test here failed on the mutant it is named for."""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from fakecloud import FakeCloud, FakeCloudError, FakeCloudTimeout
from test_seam import BondHost, Clock, actuator, run, sensed

from sova.driver.base import OpState
from sova.model import AttachVF, Inventory, Migrate, NicKind
from sova.orchestrator.openstack import OpenStackActuator, connect
from sova.orchestrator.openstack_cloud import SOVA_TAG, bound_by
from sova.orchestrator.settings import OpenStackOptions


def test_an_actuator_built_with_its_defaults_polls_nova_every_second() -> None:
    # The settings (and recommend mode) build the actuator without poll_s: Nova's migration
    # records are looked at once a second. Three steps after the request (queued, running,
    # running, completed: four looks) are three waits of 1 s.
    cloud = FakeCloud(migration_steps=3)
    cloud.add_server("vm1", "cmp1")
    clock = Clock()
    act = OpenStackActuator(
        cloud,
        "cmp1",
        errors=(FakeCloudError,),
        timeouts=(FakeCloudTimeout,),
        spawn=lambda fn: fn(),
        clock=clock,
        sleep=clock.sleep,
    )
    st = run(act, Migrate("vm1", "cmp3"))
    assert st.state is OpState.SUCCEEDED, st.detail
    assert clock.t == 3.0


def test_connect_without_a_timeout_uses_the_documented_api_timeout() -> None:
    # The lab scripts and recommend mode call connect() with the cloud's name alone.
    default = inspect.signature(connect).parameters["api_timeout_s"].default
    assert default == OpenStackOptions().api_timeout_s


def test_vm_whose_give_back_is_in_flight_is_withheld_until_it_ends() -> None:
    """A rebuild re-spawned the VF holder's guest: the port is given back by an operation of
    its own, which outlasts a period here (its thread has not run yet). In that period the
    VM is withheld from the agent (no VF counted, nothing granted through it); the period
    after the operation ended reports it given back and hands the VM back on virtio."""
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud, fallback=BondHost(cloud))
    assert run(act, AttachVF("vm1")).state is OpState.SUCCEEDED
    cloud.begin("uuid-vm1", "rebuild")
    cloud.end("uuid-vm1", "rebuild")
    pending: list[Callable[[], None]] = []
    act.spawn = pending.append
    inv = act.reconcile(sensed("cmp1", "vm1", vf=("vm1",), pool=1))
    assert "vm1" not in inv.vms and len(pending) == 1
    inv = act.reconcile(sensed("cmp1", "vm1", vf=("vm1",), pool=1))
    assert "vm1" not in inv.vms, inv.vms
    assert "vm1: its Sova VF port is being given back: Sova stands back" in act.discrepancies
    assert len(pending) == 1  # one give-back, not a second
    pending.pop()()
    inv = act.reconcile(sensed("cmp1", "vm1", pool=1))  # the host senses the VF gone
    assert any(d.startswith("vm1: given back: ") for d in act.discrepancies)
    assert inv.vms["vm1"].nic is NicKind.VIRTIO
    assert not [p for p in cloud.ports.values() if SOVA_TAG in p.tags]


def test_default_spawn_runs_the_op_in_its_own_daemon_thread_and_submit_returns_at_once() -> None:
    # The agent's period must not wait for Nova: submit() returns with the op pending while
    # a thread of its own (a daemon: a hung Nova call never keeps the agent from exiting),
    # named for thread dumps, asks Nova.
    cloud = FakeCloud(migration_steps=1)
    cloud.add_server("vm1", "cmp1")
    asked, release = threading.Event(), threading.Event()
    seen: list[tuple[str, bool]] = []
    migrate = cloud.compute.live_migrate_server

    def slow_nova(server: Any, **kw: Any) -> None:
        me = threading.current_thread()
        seen.append((me.name, me.daemon))
        asked.set()
        assert release.wait(30)
        migrate(server, **kw)

    cloud.compute.live_migrate_server = slow_nova  # type: ignore[method-assign]
    act = OpenStackActuator(
        cloud, "cmp1", errors=(FakeCloudError,), timeouts=(FakeCloudTimeout,), poll_s=0.01
    )
    op = act.submit(Migrate("vm1", "cmp3"))
    assert asked.wait(30), "the op never ran"
    assert act.poll(op).state is OpState.PENDING
    assert seen == [("sova-openstack-op", True)]
    release.set()
    deadline = time.monotonic() + 30
    while (st := act.poll(op)).state is OpState.PENDING and time.monotonic() < deadline:
        time.sleep(0.01)  # a finished op is reported once, then forgotten
    assert st.state is OpState.SUCCEEDED, st.detail


def test_a_known_server_of_another_project_is_found_by_id_without_listing_the_host() -> None:
    # An admin's agent serves every project's servers; once a period has named vm1's server,
    # an operation finds it by id (all projects) rather than listing the whole host again.
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1").project_id = "other"
    act = actuator(cloud)
    act.reconcile(sensed("cmp1", "vm1"))
    cloud.calls.clear()
    st = run(act, Migrate("vm1", "cmp3"))
    assert st.state is OpState.SUCCEEDED, st.detail
    assert [c for c, _ in cloud.calls if c == "servers"] == []


def test_an_operation_on_a_server_nova_deleted_since_the_last_period_says_so() -> None:
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud)
    act.reconcile(sensed("cmp1", "vm1"))
    cloud.delete_server("uuid-vm1")
    st = run(act, Migrate("vm1", "cmp3"))
    assert st.state is OpState.FAILED
    assert st.detail == "Nova knows no server 'vm1' on cmp1"


def test_a_tenants_vf_on_another_host_leaves_this_hosts_pool_whole() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 1, "cmp2": 1})
    cloud.add_server("vm1", "cmp1")
    cloud.add_tenant_vf(cloud.add_server("ten", "cmp2"))
    act = actuator(cloud)
    inv = act.reconcile(sensed("cmp1", "vm1", pool=1))
    assert inv.host.nic.vf_pool == 1, act.discrepancies


def test_tenants_holding_every_vf_is_noted_with_sovas_pool_of_none() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1")
    cloud.add_tenant_vf(cloud.add_server("ten", "cmp1"))
    act = actuator(cloud)
    act.reconcile(sensed("cmp1", "vm1", "ten", pool=1))
    assert "tenants' own ports hold 1 of 1 VFs on cmp1: Sova's pool is 0" in act.discrepancies


def test_the_sweep_carries_on_past_a_leaked_port_someone_else_deleted_meanwhile() -> None:
    # Two sweeps (an agent restarted over a lingering one, an operator's cleanup) may list
    # the same leaked port: the second delete finds it gone, which is what it wanted.
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud, fallback=BondHost(cloud), sweep_every=1)
    assert run(act, AttachVF("vm1")).state is OpState.SUCCEEDED
    cloud.delete_server("uuid-vm1")
    listed = cloud.network.ports

    def racing(**filters: Any) -> Any:
        ports = listed(**filters)
        if "tags" in filters:
            for p in ports:
                cloud.ports.pop(p.id, None)  # the other sweep's delete
        return ports

    cloud.network.ports = racing  # type: ignore[method-assign]
    act.reconcile(sensed("cmp1", pool=1))
    assert not [p for p in cloud.ports.values() if SOVA_TAG in p.tags]
    assert (
        [d for d in act.discrepancies if "leaked" in d]
        == [d for d in act.discrepancies if d.startswith("leaked Sova port ") and "deleted" in d]
        != []
    ), act.discrepancies


@pytest.mark.parametrize("tenants_vf", [False, True])
def test_a_vm_sova_is_migrating_is_reported_migrating_before_the_host_senses_it(
    tenants_vf: bool,
) -> None:
    # The agent must not grant a VF to a VM leaving the host: Sova's own migration holds
    # Nova's task state, which the inventory reports as migrating; a VM holding its owner's
    # VF port (reported on virtio, not Sova's) too.
    cloud = FakeCloud(migration_steps=3, vfs_per_host={"cmp1": 1, "cmp3": 1})
    vm1 = cloud.add_server("vm1", "cmp1")
    if tenants_vf:
        cloud.add_tenant_vf(vm1)
    act = actuator(cloud)
    seen: list[Inventory] = []
    wait = act.sleep

    def look_then_wait(s: float) -> None:
        if not seen:
            seen.append(act.reconcile(sensed("cmp1", "vm1")))
        wait(s)

    act.sleep = look_then_wait
    assert run(act, Migrate("vm1", "cmp3")).state is OpState.SUCCEEDED
    assert seen[0].vms["vm1"].migrating is True


def test_one_give_back_try_when_retire_tries_is_one() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud, fallback=BondHost(cloud), retire_tries=1)
    assert run(act, AttachVF("vm1")).state is OpState.SUCCEEDED
    cloud.begin("uuid-vm1", "rebuild")
    cloud.end("uuid-vm1", "rebuild")
    act.reconcile(sensed("cmp1", "vm1", vf=("vm1",), pool=1))
    assert not [p for p in cloud.ports.values() if SOVA_TAG in p.tags]


def test_a_server_nova_left_waiting_for_a_resize_confirmation_is_not_touched() -> None:
    # Nova's resize ends in VERIFY_RESIZE with no task state: the status alone says Nova
    # is not done with the server (a confirm or revert moves it again).
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1")
    cloud.begin("uuid-vm1", "resize")
    cloud.end("uuid-vm1", "resize", "cmp1")
    st = run(actuator(cloud), Migrate("vm1", "cmp3"))
    assert st.state is OpState.FAILED
    assert st.detail == "Nova is operating on vm1 (status VERIFY_RESIZE): Sova stands back"
    assert not [c for c, _ in cloud.calls if c == "live_migrate_server"]


def test_an_op_not_yet_started_is_pending_and_queued() -> None:
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1")
    act = actuator(cloud)
    act.spawn = lambda fn: None  # its thread has not run yet
    st = act.poll(act.submit(Migrate("vm1", "cmp3")))
    assert (st.state, st.detail) == (OpState.PENDING, "queued")


def test_sova_follows_its_own_servers_migration_record_not_a_newer_one_of_another() -> None:
    # While Sova's migration of vm1 runs, an operator's migration of vm2 (a newer record,
    # to a target that refuses) ends in error: vm1's outcome is vm1's record's.
    cloud = FakeCloud(migration_steps=3, refusing={"cmp9"})
    cloud.add_server("vm1", "cmp1")
    vm2 = cloud.add_server("vm2", "cmp1")
    act = actuator(cloud)
    wait = act.sleep

    def operator_then_wait(s: float) -> None:
        if not [m for m in cloud.migrations if m.server_id == vm2.id]:
            cloud.compute.live_migrate_server(vm2, host="cmp9")
        wait(s)

    act.sleep = operator_then_wait
    st = run(act, Migrate("vm1", "cmp3"))
    assert st.state is OpState.SUCCEEDED, st.detail
    assert cloud.servers["uuid-vm1"].compute_host == "cmp3"


def test_without_a_configured_network_the_vf_goes_beside_this_vms_own_virtio_port() -> None:
    # Another server's port on another network, listed first, is not this VM's backup.
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("other", "cmp1", net="net-other")
    cloud.add_server("vm1", "cmp1", net="net-data")
    assert run(actuator(cloud), AttachVF("vm1")).state is OpState.SUCCEEDED
    [attrs] = [a for c, a in cloud.calls if c == "create_port"]
    assert attrs["network_id"] == "net-data"


def test_a_view_built_without_the_settings_uses_the_documented_periods() -> None:
    from sova.orchestrator.openstack_view import CloudView

    view, docs = CloudView(FakeCloud(), "cmp1"), OpenStackOptions()
    assert (view.refresh_s, view.resync_s) == (docs.refresh_s, docs.resync_s)


def test_novas_updated_stamp_without_a_zone_is_utc() -> None:
    # Nova's `updated` is UTC; a stamp written without its zone must still order against the
    # aware ones (a naive and an aware datetime cannot be compared).
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from sova.orchestrator.openstack_view import _stamp

    naive = _stamp(SimpleNamespace(updated_at="2026-12-01T10:00:00"))
    assert naive == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert naive is not None and naive.tzinfo is not None


def test_a_view_that_has_not_looked_yet_has_no_server() -> None:
    from sova.orchestrator.openstack_view import CloudView

    assert CloudView(FakeCloud(), "cmp1").has_server("uuid-vm1") is False


# --------------------------------------------------------------------------- the change-based view


def _view(cloud: FakeCloud) -> Any:
    from sova.orchestrator.openstack_view import CloudView

    return CloudView(cloud, "cmp1", refresh_s=120, resync_s=600, busy_s=10)


def test_the_views_listing_is_this_hosts_servers_of_every_project() -> None:
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1").project_id = "other"
    cloud.add_server("vm2", "cmp2")
    servers, _ = _view(cloud).look(sensed("cmp1", "vm1"), 0.0)
    assert [s.id for s in servers] == ["uuid-vm1"]


def test_a_server_that_arrived_has_its_ports_listed_at_the_changes_look() -> None:
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1")
    vm2 = cloud.add_server("vm2", "cmp2")
    view = _view(cloud)
    inv = sensed("cmp1", "vm1")
    _, ports = view.look(inv, 0.0)
    assert {p.device_id for p in ports} == {"uuid-vm1"}
    cloud.begin(vm2.id, "live_migrate")
    cloud.end(vm2.id, "live_migrate", "cmp1")
    _, ports = view.look(inv, 120.0)
    assert view.last_look == "changes"
    assert {p.device_id for p in ports} == {"uuid-vm1", "uuid-vm2"}


def test_the_views_periods_count_from_its_last_look_not_from_the_clocks_origin() -> None:
    # An agent that has run 1000 s: a look 10 s after a full one is cached; with a server
    # Nova is operating on, a look within busy_s (10 s) of the last is cached too.
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1")
    view = _view(cloud)
    inv = sensed("cmp1", "vm1")
    view.look(inv, 1000.0)
    view.look(inv, 1005.0)
    assert view.last_look == "cached"
    cloud.begin("uuid-vm1", "reboot")
    view.look(inv, 1130.0)  # the refresh: sees the reboot
    assert view.last_look == "changes"
    view.look(inv, 1135.0)
    assert view.last_look == "cached"
    view.look(inv, 1140.0)
    assert view.last_look == "changes"


def test_an_unanswered_server_get_in_the_no_record_check_is_asked_again_next_poll() -> None:
    # Nova accepted the request (at 1000 s of a monotonic clock) and made no record; past
    # 30 polls of 2 s (60 s) Sova asks the server's task state. That GET times out at
    # 1062 s: no answer is no verdict, so the check is made again at 1064 s, where Nova
    # answers (no task: it started none).
    cloud = FakeCloud()
    cloud.add_server("vm1", "cmp1")

    def accepted_only(*_: Any, **__: Any) -> None:
        pass

    cloud.compute.live_migrate_server = accepted_only  # type: ignore[method-assign]
    act = actuator(cloud, poll_s=2.0)
    act.clock.t = 1000.0  # type: ignore[attr-defined]
    get, asked = cloud.compute.get_server, []

    def first_unanswered(sid: str) -> Any:
        asked.append(act.clock())
        if len(asked) == 1:
            raise FakeCloudTimeout("Request to /servers/uuid-vm1 timed out")
        return get(sid)

    cloud.compute.get_server = first_unanswered  # type: ignore[method-assign]
    st = run(act, Migrate("vm1", "cmp3"))
    assert st.detail.startswith("Nova accepted the live migration of vm1 and started none")
    assert asked == [1062.0, 1064.0] and act.clock() == 1064.0


def test_another_servers_unsettled_evacuation_does_not_hold_this_ones_give_back() -> None:
    # vm2 was evacuated off cmp1 (its record "done" until cmp1's service is back); vm1's
    # port came to cmp2 by a cold migration. Only vm1's own records count for vm1.
    cloud = FakeCloud(vfs_per_host={"cmp1": 1, "cmp2": 1})
    vm1, vm2 = cloud.add_server("vm1", "cmp1"), cloud.add_server("vm2", "cmp1")
    cmp2 = actuator(cloud, "cmp2", fallback=BondHost(cloud))
    assert run(actuator(cloud, "cmp1"), AttachVF("vm1")).state is OpState.SUCCEEDED
    for op, dest in (("migrate", "cmp2"), ("confirm_resize", None)):
        cloud.begin(vm1.id, op)
        cloud.end(vm1.id, op, dest)
    cloud.begin(vm2.id, "evacuate")
    cloud.end(vm2.id, "evacuate", "cmp2")
    cmp2.reconcile(sensed("cmp2", "vm1", "vm2", vf=("vm1",), pool=1))
    cmp2.reconcile(sensed("cmp2", "vm1", "vm2", pool=1))
    assert not [p for p in cloud.ports.values() if SOVA_TAG in p.tags], cmp2.discrepancies
    assert any(d.startswith("vm1: given back") for d in cmp2.discrepancies), cmp2.discrepancies


def test_someone_elses_live_migration_moves_the_bond_off_the_vf_nova_will_unplug() -> None:
    """Nova hot-unplugs a live-migrated guest's VF before the copy (issue 39: the joined
    tier's operator live migration). A period that sees someone else's live migration of a
    Sova VF holder moves its bond to virtio: asked again the next period while the bond does
    not confirm, then not again for that migration. Nova's other operations (they power the
    guest off before re-plugging anything) leave the bond to the give-back after them."""
    cloud = FakeCloud(vfs_per_host={"cmp1": 2})
    cloud.add_server("vm1", "cmp1")
    cloud.add_server("vm2", "cmp1")
    bond = BondHost(cloud)
    act = actuator(cloud, fallback=bond)
    for vm in ("vm1", "vm2"):
        assert run(act, AttachVF(vm)).state is OpState.SUCCEEDED

    def to_backups() -> list[str]:
        return [a["vm"] for c, a in cloud.calls if c == "to_backup"]

    cloud.begin("uuid-vm1", "live_migrate")
    cloud.begin("uuid-vm2", "reboot")
    bond.confirm = False
    act.reconcile(sensed("cmp1", "vm1", "vm2", vf=("vm1", "vm2"), pool=2))
    [note] = [n for n in act.discrepancies if n.startswith("vm1:")]
    assert note == (
        "vm1: Nova is operating on it (task_state migrating): Sova stands back; the bond "
        "not moved off the VF Nova will unplug (vm1: active slave not confirmed): tried again"
    )
    # vm2's reboot moves nothing, and its note says only that Sova stands back.
    [note] = [n for n in act.discrepancies if n.startswith("vm2:")]
    assert note == "vm2: Nova is operating on it (task_state reboot_started_hard): Sova stands back"
    bond.confirm = True
    act.reconcile(sensed("cmp1", "vm1", "vm2", vf=("vm1", "vm2"), pool=2))
    [note] = [n for n in act.discrepancies if n.startswith("vm1:")]
    assert note == (
        "vm1: Nova is operating on it (task_state migrating): Sova stands back; the bond "
        "moved to virtio before Nova unplugs the VF (bond: active slave to_backup)"
    )
    for _ in range(2):
        inv = act.reconcile(sensed("cmp1", "vm1", "vm2", vf=("vm1", "vm2"), pool=2))
        assert inv.vms == {}
    assert to_backups() == ["vm1", "vm1"]  # the refused one, then one confirmed
    [note] = [n for n in act.discrepancies if n.startswith("vm1:")]  # moved: nothing to add
    assert note == "vm1: Nova is operating on it (task_state migrating): Sova stands back"


# Neutron's ``binding:vif_details`` as openstacksdk hands it over, and the drivers read from it.
BOUND_BY = [
    ({"bound_drivers": {"0": "ovn"}}, {"ovn"}),
    # Hierarchical binding: one driver per level; OVN at any level is OVN's ARP responder.
    ({"bound_drivers": {"0": "openvswitch", "1": "ovn"}}, {"openvswitch", "ovn"}),
    ({"port_filter": True, "ovs_hybrid_plug": False}, set()),  # before Neutron reported drivers
    ({"bound_drivers": None}, set()),
    ({}, set()),  # an unbound port
    (None, set()),  # a reply without the attribute's value
]


@pytest.mark.parametrize(("details", "drivers"), BOUND_BY)
def test_bound_by_reads_each_binding_levels_driver_and_nothing_else(
    details: Any, drivers: set[str]
) -> None:
    assert bound_by(SimpleNamespace(binding_vif_details=details)) == drivers
    assert bound_by(SimpleNamespace()) == frozenset()  # an object the SDK made without it


def test_vf_refused_where_ovn_bound_the_virtio_port_at_a_lower_level_only() -> None:
    """Hierarchical port binding (a top-level driver handing a level down): OVN bound the
    virtio port's lower level, so OVN's ARP answers still pin the guest's address."""
    cloud = FakeCloud(vfs_per_host={"cmp1": 1})
    cloud.add_server("vm1", "cmp1")
    [virtio] = cloud.ports.values()
    virtio.binding_vif_details = {"bound_drivers": {"0": "openvswitch", "1": "ovn"}}
    st = run(actuator(cloud), AttachVF("vm1"))
    assert st.state is OpState.FAILED and "bound by ML2/OVN" in st.detail, st.detail
    assert not any(c == "create_port" for c, _ in cloud.calls)
