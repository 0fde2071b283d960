"""More of the actuator's seam with the in-memory cloud: the edges a mutation run of
src/sova/orchestrator/openstack*.py found no test for (scripts/mutation-openstack.sh;
docs/openstack.md#mutation-run). Each test here failed on the mutant it is named for."""

from __future__ import annotations

from fakecloud import FakeCloud, FakeCloudError, FakeCloudTimeout
from test_seam import Clock, run

from sova.driver.base import OpState
from sova.model import Migrate
from sova.orchestrator.openstack import OpenStackActuator


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
