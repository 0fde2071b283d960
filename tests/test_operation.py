"""Sova Algorithm 1: the Operation Table (VF / VNIC / VLM) of one host per period."""

from __future__ import annotations

import pytest

from sova.model import MIB
from sova.policy.hotspot import HotnessMetric, Utilisation, VMLoad
from sova.policy.operation import Algorithm1Result, Migration, Operation, algorithm1
from sova.policy.vfsched import Candidate, VFSchedulerConfig

CONF = VFSchedulerConfig(io_threshold=50.0, tolerance=0.0, hysteresis=0.0, min_dwell_s=30.0)


def cand(vm: str, net: float, io: float = 90.0, traffic: bool = True) -> Candidate:
    return Candidate(vm=vm, io_score=io, net_score=net, has_traffic=traffic)


def load(cpu: float, mem: float, net: float, mib: int, migrating: bool = False) -> VMLoad:
    return VMLoad(Utilisation(cpu, mem, net), mib * MIB, migrating)


# Four VMs on one host with 2 VFs. Migration factors with the volume metric
# MF = 1/((1−cpu)(1−mem)(1−net)) / memory:
#   vm1: 1/(0.5)            = 2.0 / 512 MiB  = 0.00391 per MiB
#   vm2: 1/(0.8)            = 1.25 / 512 MiB = 0.00244 per MiB
#   vm3: 1/(0.2)            = 5.0 / 1024 MiB = 0.00488 per MiB   <- largest
#   vm4: 1/(0.9·0.9·0.9)    = 1.372 / 2048 MiB = 0.00067 per MiB
LOADS = {
    "vm1": load(0.0, 0.0, 0.5, 512),
    "vm2": load(0.2, 0.0, 0.0, 512),
    "vm3": load(0.0, 0.0, 0.8, 1024),
    "vm4": load(0.1, 0.1, 0.1, 2048),
}
# net ranking: vm3 40 > vm1 30 > vm4 20 > vm2 10
CANDS = [cand("vm1", 30), cand("vm2", 10), cand("vm3", 40), cand("vm4", 20)]


def test_no_signal_is_plain_dsr_iov() -> None:
    table = algorithm1(CANDS, LOADS, {}, 2, 0.0, CONF)
    assert table.operations == {
        "vm1": Operation.VF,
        "vm2": Operation.VNIC,
        "vm3": Operation.VF,
        "vm4": Operation.VNIC,
    }
    assert table.migrate == {}
    assert table.holders() == frozenset({"vm1", "vm3"})
    assert table.decision is not None and table.decision.pq == ("vm3", "vm1")


@pytest.mark.parametrize(
    "migration",
    [
        None,
        Migration(flag=False, target="h2"),  # flag down: no migration
        Migration(flag=True, target=None),  # no target named: nothing to do
    ],
)
def test_no_effective_signal_no_vlm(migration: Migration | None) -> None:
    table = algorithm1(CANDS, LOADS, {}, 2, 0.0, CONF, migration=migration)
    assert Operation.VLM not in table.operations.values()
    assert table.migrate == {}


def test_signal_marks_largest_mf_vm_vlm_and_takes_its_vf() -> None:
    # vm3 has the largest MF (0.00488/MiB) and was the VF holder with the best net score.
    # It is marked VLM to h2, holds no VF, and the 2 VFs go to the next: vm1 (30), vm4 (20).
    holders = {"vm3": 0.0, "vm1": 0.0}
    table = algorithm1(CANDS, LOADS, holders, 2, 100.0, CONF, migration=Migration(True, "h2"))
    assert table.migrate == {"vm3": "h2"}
    assert table.operations == {
        "vm1": Operation.VF,
        "vm2": Operation.VNIC,
        "vm3": Operation.VLM,
        "vm4": Operation.VF,
    }
    assert table.holders() == frozenset({"vm1", "vm4"})
    assert table.decision is not None
    assert "vm3" not in table.decision.pq
    assert table.decision.reasons["vm3"].startswith("ineligible")


def test_vlm_revokes_vf_even_inside_dwell() -> None:
    # vm3 got its VF 1 s ago (dwell 30 s): migration still takes it at once
    table = algorithm1(CANDS, LOADS, {"vm3": 99.0}, 2, 100.0, CONF, migration=Migration(True, "h9"))
    assert table.operations["vm3"] is Operation.VLM
    assert "vm3" not in table.holders()


def test_signal_naming_a_vm_is_honoured() -> None:
    # the manager checked the target for vm1 (not the largest MF): vm1 moves, vm3 keeps a VF
    table = algorithm1(CANDS, LOADS, {}, 2, 0.0, CONF, migration=Migration(True, "h3", vm="vm1"))
    assert table.migrate == {"vm1": "h3"}
    assert table.operations["vm1"] is Operation.VLM
    assert table.operations["vm3"] is Operation.VF
    # the second VF goes to the next-best, vm4 (20)
    assert table.holders() == frozenset({"vm3", "vm4"})


def test_signal_naming_unknown_vm_falls_back_to_largest_mf() -> None:
    table = algorithm1(CANDS, LOADS, {}, 2, 0.0, CONF, migration=Migration(True, "h3", vm="gone"))
    assert table.migrate == {"vm3": "h3"}


def test_vms_already_migrating_are_skipped() -> None:
    # vm3 is already on its way: the next largest MF, vm1 (0.00391/MiB), is chosen
    loads = dict(LOADS, vm3=load(0.0, 0.0, 0.8, 1024, migrating=True))
    table = algorithm1(CANDS, loads, {}, 2, 0.0, CONF, migration=Migration(True, "h2"))
    assert table.migrate == {"vm1": "h2"}


def test_hot_resources_restrict_the_choice() -> None:
    # hot on CPU only: only vm2 (cpu 0.2) and vm4 (cpu 0.1) have a CPU share;
    # MF vm2 0.00244 > vm4 0.00067 -> vm2
    table = algorithm1(
        CANDS,
        LOADS,
        {},
        2,
        0.0,
        CONF,
        migration=Migration(True, "h2"),
        hot_resources=["cpu"],
    )
    assert table.migrate == {"vm2": "h2"}
    assert table.operations["vm2"] is Operation.VLM
    assert table.holders() == frozenset({"vm1", "vm3"})


def test_skewness_metric_changes_the_choice() -> None:
    # skewness of (0,0,x) = sqrt((0−1)² + (0−1)² + (3−1)²) = sqrt(6) for any x > 0, so by
    # skewness/memory the 512 MiB vm1 (2.449/512) beats vm3 (2.449/1024); vm2 (cpu only)
    # ties vm1 at sqrt(6)/512 and loses on name ("vm1" < "vm2"); vm4 is balanced: 0.
    table = algorithm1(
        CANDS,
        LOADS,
        {},
        2,
        0.0,
        CONF,
        migration=Migration(True, "h2"),
        metric=HotnessMetric.SKEWNESS,
    )
    assert table.migrate == {"vm1": "h2"}


def test_every_candidate_gets_exactly_one_operation() -> None:
    table = algorithm1(CANDS, LOADS, {}, 1, 0.0, CONF, migration=Migration(True, "h2"))
    assert set(table.operations) == {c.vm for c in CANDS}
    assert sum(op is Operation.VLM for op in table.operations.values()) == 1
    assert sum(op is Operation.VF for op in table.operations.values()) == 1


def test_empty_table_holders() -> None:
    assert Algorithm1Result({}).holders() == frozenset()
