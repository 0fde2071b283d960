"""More of the actuator's seam with the in-memory cloud: the edges a mutation run of
src/sova/orchestrator/openstack*.py found no test for (scripts/mutation-openstack.sh;
docs/openstack.md#mutation-run). Each test here failed on the mutant it is named for."""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

from fakecloud import FakeCloud, FakeCloudError, FakeCloudTimeout
from test_seam import BondHost, Clock, actuator, run, sensed

from sova.driver.base import OpState
from sova.model import AttachVF, Migrate, NicKind
from sova.orchestrator.openstack import OpenStackActuator, connect
from sova.orchestrator.openstack_cloud import SOVA_TAG
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
