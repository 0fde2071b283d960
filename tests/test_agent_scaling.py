"""An agent's period is linear in its host's VMs. The full fuzz tier (2026-12-07) gave
dsr-iov-fig7d 100,000 idle VMs on one host: the warm-up period asked the inventory for its
VF holders once per candidate, each a walk over every VM, and a 60-s run did not finish in
120 s (8,000 VMs: 9.8 s of 10.1 s in that walk)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sova.model import Inventory
from sova.scenario import Scenario, load_sweep
from sova.sim.runner import run_policy

ROOT = Path(__file__).resolve().parents[1]


def test_a_period_walks_the_holders_a_fixed_number_of_times_however_many_vms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scn = load_sweep(ROOT / "scenarios" / "dsr-iov-table3.yaml")[0]
    walks = {"n": 0}
    holders = Inventory.__dict__["vf_holders"].fget

    def counted(self: Inventory) -> Any:
        walks["n"] += 1
        return holders(self)

    monkeypatch.setattr(Inventory, "vf_holders", property(counted))
    counts = []
    for copies in (1, 20):
        # the same host with 20x the VMs (8 -> 160), one warm-up period and one measured
        big = _scaled(scn, copies)
        walks["n"] = 0
        run_policy(big, "dsr-iov")
        counts.append(walks["n"])
    # a walk per period and host, not per VM: 20x the VMs, the same number of walks
    assert counts[1] == counts[0], counts


def _scaled(scn: Scenario, copies: int) -> Scenario:
    vms = [v.model_copy(update={"name": f"{v.name}-{k}"}) for k in range(copies) for v in scn.vms]
    host = scn.hosts[0].model_copy(update={"vms": [v.name for v in vms]})
    period = scn.controller.period
    return scn.model_copy(
        update={"vms": vms, "hosts": [host], "workload": [], "duration": 2 * period}
    )
