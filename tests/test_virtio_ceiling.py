"""One definition of what virtio carries for a VM: the simulated world's profile gives the
sova policy's gate its per-VM ceiling, so a VF goes only where it buys throughput
(docs/design.md#vf-cost-benefit), and the decision benchmark's "useless move" is judged
against the same ceiling (sova.sim.decisions)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sova.record import EventRow
from sova.scenario import PolicySpec, ProfileSpec, load_scenario
from sova.sim import decisions as dq
from sova.sim.world import World, agent_config

SCENARIO = """
name: virtio-ceiling
seed: 5
duration: 6min
tick: 1s
profile: {{virtio_flow_limit: 5Gbit}}
hosts:
  - name: h1
    cores: 16
    memory: 64GiB
    nic: {{name: pf, capacity: 10Gbit, vf_pool: 2}}
    vms: [big, mid, small]
vms: [{{name: big, vcpus: 4}}, {{name: mid, vcpus: 4}}, {{name: small}}]
workload:
  - at: 0
    vms:
      big: {{kind: trace, trace: d.csv, column: big}}
      mid: {{kind: trace, trace: d.csv, column: mid}}
      small: {{kind: trace, trace: d.csv, column: small}}
controller: {{period: 10s{extra}}}
"""
SOVA = PolicySpec(name="sova", vf="sova", bandwidth="none")


def _scenario(tmp_path: Path, extra: str = ""):  # type: ignore[no-untyped-def]
    # big: 1 Gbit/s, then 8 Gbit/s from 120 s; mid: 1.5 Gbit/s all along (virtio carries
    # it: the profile's virtio path takes 5 Gbit/s a VM); small: 20 Mbit/s
    rows = ["time_s,big,mid,small"] + [
        f"{t},{8000 if t >= 120 else 1000},1500,20" for t in range(0, 360, 30)
    ]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "s.yaml").write_text(SCENARIO.format(extra=extra))
    return load_scenario(tmp_path / "s.yaml")


def test_the_gate_takes_virtios_ceiling_from_the_profile(tmp_path: Path) -> None:
    scn = _scenario(tmp_path)
    assert dq.virtio_ceiling_bps(scn.profile) == 5e9
    assert agent_config(scn, SOVA).scheduler.virtio_lossless == 5e9
    # a scenario that says otherwise keeps its own
    own = _scenario(tmp_path, ", scheduler: {virtio_lossless: 200Mbit}")
    assert agent_config(own, SOVA).scheduler.virtio_lossless == 200e6


def test_sova_plugs_only_the_vm_virtio_cannot_carry(tmp_path: Path) -> None:
    scn = _scenario(tmp_path)
    run = World(scn, SOVA).run_until(scn.duration)
    plugs = dq.attaches(run.events)
    # mid (1.5 Gbit/s) and big before its step (1 Gbit/s) are served by virtio: the only
    # plug is big's, after it passes 5 Gbit/s at 120 s. Its estimate is the 6-period
    # window's mean, each period virtio held it at 5 Gbit/s counted 1.1 x (censored): the
    # plug pays once 60 x (est - 5) > 2 x 2 s x est, est > 5.36 Gbit/s, i.e. once all six
    # periods are censored ones (5.5): the step's sixth period, ~180 s, plus the 2 s plug
    assert [e.vm for e in plugs] == ["big"]
    assert 170 <= plugs[0].time_s <= 195
    grid = dq.demand_grid(run.timeline, [v.name for v in scn.vms])
    assert dq.useless_attaches(run.events, grid, dq.virtio_ceiling_bps(scn.profile)) == []


@pytest.mark.parametrize("ceiling", ["200Mbit"])
def test_a_lower_ceiling_set_by_the_scenario_plugs_the_mid_sender(
    tmp_path: Path, ceiling: str
) -> None:
    scn = _scenario(tmp_path, f", scheduler: {{virtio_lossless: {ceiling}}}")
    run = World(scn, SOVA).run_until(scn.duration)
    # 1.5 Gbit/s over 200 Mbit/s pays its plug: both VFs go at the first periods
    assert {e.vm for e in dq.attaches(run.events)} == {"big", "mid"}


def test_a_move_that_frees_a_cpu_saturated_guest_is_useful() -> None:
    # both VMs send 1 Gbit/s, under virtio's 5 Gbit/s; "hybrid" runs its vCPUs full on
    # virtio (its sends are CPU-censored), "calm" at 20 %
    times = np.arange(10.0, 200.0, 10.0)
    offered = np.full((2, times.size), 1e9)
    cpu = np.array([np.full(times.size, 0.99), np.full(times.size, 0.2)])
    grid = dq.DemandGrid(times, ["hybrid", "calm"], offered, offered, cpu)
    events = [
        EventRow("p", 50, "vf_attach", "hybrid", "h1", "", ""),
        EventRow("p", 50, "vf_attach", "calm", "h1", "", ""),
    ]
    # a profile that charges virtio guests VM exits per packet: a VF frees the hybrid's CPU
    exits = ProfileSpec(virtio_flow_limit=5e9, virtio_guest_ns_per_packet=800.0)
    freed = dq.freed_cpu_saturation(exits)
    assert freed == 0.95  # the sensor's cpu_saturation (SensingSpec)
    assert [e.vm for e in dq.useless_attaches(events, grid, 5e9, cpu_saturation=freed)] == ["calm"]
    # one that does not (the fleet and Sova profiles): a VF buys neither anything
    flat = ProfileSpec(virtio_flow_limit=5e9)
    assert dq.freed_cpu_saturation(flat) is None
    useless = dq.useless_attaches(events, grid, 5e9, cpu_saturation=None)
    assert [e.vm for e in useless] == ["hybrid", "calm"]
