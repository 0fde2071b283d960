"""An agent's per-VM load report (agent/loop.py: VMLoadReports) is built when first read:
it must read as the plain mapping the agent had when it reported, travel as one, and the
manager must keep it as given (its copy would build every VM's load every period)."""

from __future__ import annotations

import pickle
from pathlib import Path

from sova.agent.loop import VMLoadReports
from sova.policy.hotspot import (
    PAPERS_MOVE,
    HotspotVerdict,
    MoveCost,
    ResourceVerdict,
    Utilisation,
    VMLoad,
    rank_movers,
)
from sova.policy.loads import LoadShares
from sova.scenario import load_sweep
from sova.sim.world import World

ROOT = Path(__file__).resolve().parents[1]


def test_a_report_reads_as_the_loads_the_agent_had_and_the_manager_keeps_it() -> None:
    scn = load_sweep(ROOT / "scenarios" / "sova-tour.yaml")[0]
    scn = scn.model_copy(update={"duration": 120.0})
    world = World(scn, next(p for p in scn.policy_specs if p.name == "sova"))
    world.run_until(scn.duration)
    manager = world.manager
    assert manager is not None
    agent = world.agents["HM1"]
    rep = agent.host_report()
    assert rep is not None and isinstance(rep.vms, VMLoadReports)
    actual = agent.snapshot
    assert actual is not None
    want = {
        vm: VMLoad(Utilisation(s.cpu, s.mem, s.net), actual.vms[vm].vm.memory_bytes)
        for vm, s in agent.last_vm_loads.items()
    }
    assert len(want) == 4  # web, db, batch, backup: measured loads, not an empty report
    # what the agent had when it reported, even after it moves on
    agent.last_vm_loads = {}
    assert dict(rep.vms) == want
    assert list(rep.vms) == list(want)
    assert pickle.loads(pickle.dumps(rep.vms)) == want
    assert type(pickle.loads(pickle.dumps(rep.vms))) is dict
    # the manager keeps the report it was given (the world's last round ingested HM1's)
    assert isinstance(manager.vms["HM1"], VMLoadReports)
    manager.ingest("HM1", rep.history[-1], rep.vms, capacity=rep.capacity)
    assert manager.vms["HM1"] is rep.vms
    plain = dict(want)
    manager.ingest("HM1", rep.history[-1], plain, capacity=rep.capacity)
    assert manager.vms["HM1"] is not plain and manager.vms["HM1"] == plain


def test_a_round_ranks_a_report_from_its_loads_without_building_its_vm_loads() -> None:
    """The hot round's ranking reads an agent's report as columns (mover_columns), so the
    report of a hot host with many VMs is not built as VMLoads: the movers and refusals
    must be those of the plain mapping, a migrating VM and a VM the inventory no longer
    holds left out, and only the asked VM built (vm_load)."""
    scn = load_sweep(ROOT / "scenarios" / "sova-tour.yaml")[0]
    scn = scn.model_copy(update={"duration": 120.0})
    world = World(scn, next(p for p in scn.policy_specs if p.name == "sova"))
    world.run_until(scn.duration)
    agent = world.agents["HM1"]
    actual = agent.snapshot
    assert actual is not None
    loads = dict(agent.last_vm_loads)
    assert len(loads) == 4
    loads["gone"] = LoadShares(0.5, 0.5, 0.5)  # (reported, no longer held)
    migrating = frozenset({next(iter(agent.last_vm_loads))})
    rep = VMLoadReports(loads, actual, migrating)
    hot = (ResourceVerdict("cpu", 3, 3, 0.95, True), ResourceVerdict("mem", 0, 3, 0.1, False))
    verdict = HotspotVerdict(True, 0.05, 3, 3, hot)
    now = Utilisation(0.9, 0.1, 0.1)
    for cost in (PAPERS_MOVE, MoveCost(), MoveCost(min_relief=0.99)):
        got = rank_movers(rep, verdict, now, cost)
        assert rep._built is None  # ranked from the columns
        want = rank_movers(dict(rep), verdict, now, cost)
        rep = VMLoadReports(loads, actual, migrating)
        assert got == want
        assert all(m.vm not in migrating and m.vm != "gone" for m in got[0])
    assert got[1]  # refusals written from the columns too
    name = next(vm for vm in loads if vm not in migrating and vm != "gone")
    assert rep.vm_load(name) == dict(rep)[name]
