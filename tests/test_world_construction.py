"""The world at fleet size: the VM models built once per distinct SLA, and the cyclic
collector kept off the run (and its final pass off what the run did not make)."""

from __future__ import annotations

from pathlib import Path

from sova.scenario import load_sweep
from sova.scenario.schema import SLASpec

ROOT = Path(__file__).resolve().parents[1]


def test_model_vms_are_each_vms_model_with_equal_slas_shared() -> None:
    scn = load_sweep(ROOT / "scenarios" / "sova-tour.yaml")[0]
    slas = [
        SLASpec(min=1e8, default=2e8, max=5e8),
        SLASpec(min=1e8, default=2e8, max=5e8),  # equal to the first: one object
        SLASpec(min=1e8, default=2e8, max=None),  # differs in one field
        SLASpec(priority=2, weight=3.0),
        SLASpec(),
        SLASpec(),
        SLASpec(max_pps=1e5),
    ]
    vms = [v.model_copy(update={"sla": s}) for v, s in zip(scn.vms, slas, strict=False)]
    assert len(vms) == len(slas)
    scn = scn.model_copy(update={"vms": vms})
    got = scn.model_vms()
    assert got == [scn.model_vm(v, i) for i, v in enumerate(scn.vms)]
    assert [v.created_seq for v in got] == list(range(len(vms)))
    ids = [id(v.sla) for v in got]
    assert ids[0] == ids[1] and ids[4] == ids[5]
    assert len({ids[0], ids[2], ids[3], ids[4], ids[6]}) == 5


def test_a_run_leaves_the_collector_as_it_found_it() -> None:
    # the run sets the objects made before it aside from its final collection
    # (gc.freeze) and gives them back; objects frozen by someone else stay frozen, and
    # a collector disabled by the caller stays disabled
    import gc

    from sova.sim.world import World

    scn = load_sweep(ROOT / "scenarios" / "sova-fig6.yaml")[0].model_copy(
        update={"duration": 20.0}
    )
    spec = scn.policy_specs[0]
    assert gc.isenabled() and gc.get_freeze_count() == 0
    World(scn, spec).run_until(20.0)
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        World(scn, spec).run_until(20.0)
        # still frozen (the count moves by the odd object the run frees or retracks)
        assert gc.isenabled() and gc.get_freeze_count() > frozen // 2
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        World(scn, spec).run_until(20.0)
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.enable()
