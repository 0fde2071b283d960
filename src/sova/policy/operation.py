"""Sova Algorithm 1: the Operation Table that combines DSR-IOV and live migration.

Each period the Effector of a host labels every VM with exactly one operation: ``VF``
(holds a VF), ``VNIC`` (stays on virtio) or ``VLM`` (migrates to the target host the
manager named). The manager only names source and target (Alg. 2); the source picks the
VM with the largest migration factor MF = hotness / memory size (lines 3–9) — the most
load moved per byte copied. That VM is taken out of VF scheduling at once (a VM with a
plain VF cannot live-migrate; its VF is revoked first) and the others go through the
DSR-IOV scheduler (lines 10–28), which is our :func:`sova.policy.vfkernel.schedule_one` with
its fixes (threshold or top-q filter, tolerance, hysteresis, dwell).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from sova.policy.hotspot import HotnessMetric, VMLoad, choose_vm
from sova.policy.vfkernel import schedule_one
from sova.policy.vfsched import Candidate, VFDecision, VFSchedulerConfig


class Operation(StrEnum):
    VF = "vf"
    VNIC = "vnic"
    VLM = "vlm"


@dataclass(frozen=True)
class Migration:
    """The manager's signal to one host: ``<flag, target host>``."""

    flag: bool
    target: str | None = None
    vm: str | None = None  # the candidate the manager checked the target against, if any


@dataclass(frozen=True)
class Algorithm1Result:
    """What :func:`algorithm1` decided for one period: the operation table (every VM's
    label), the VM chosen to migrate and its target, and the VF scheduler's decision."""

    operations: Mapping[str, Operation]
    migrate: Mapping[str, str] = field(default_factory=dict)  # vm -> target host
    decision: VFDecision | None = None

    def holders(self) -> frozenset[str]:
        return frozenset(vm for vm, op in self.operations.items() if op is Operation.VF)


def choose_migration(
    loads: Mapping[str, VMLoad],
    migration: Migration | None,
    metric: HotnessMetric | str = HotnessMetric.VOLUME,
    hot_resources: Sequence[str] | None = None,
) -> tuple[str, str] | None:
    """Alg. 1 lines 3-9: the VM to label VLM and its target, or None.

    The manager's candidate if it still runs here, else the largest-MF VM."""
    if migration is None or not migration.flag or migration.target is None:
        return None
    vm = migration.vm if migration.vm in loads else None
    if vm is None:
        vm = choose_vm(loads, metric=metric, resources=hot_resources)
    return None if vm is None else (vm, migration.target)


def algorithm1(
    candidates: Sequence[Candidate],
    loads: Mapping[str, VMLoad],
    holders: Mapping[str, float],
    vf_count: int,
    now_s: float,
    config: VFSchedulerConfig,
    migration: Migration | None = None,
    metric: HotnessMetric | str = HotnessMetric.VOLUME,
    hot_resources: Sequence[str] | None = None,
) -> Algorithm1Result:
    """Label every VM VF / VNIC / VLM for this period."""
    chosen = choose_migration(loads, migration, metric, hot_resources)
    migrate = dict([chosen]) if chosen is not None else {}
    # A VM chosen for migration neither keeps nor gets a VF (Alg. 1 lines 3-9, 14).
    pool = [replace(c, eligible=False) if c.vm in migrate else c for c in candidates]
    decision = schedule_one(pool, holders, vf_count, now_s, config)
    ops: dict[str, Operation] = {}
    for c in candidates:
        if c.vm in migrate:
            ops[c.vm] = Operation.VLM
        elif c.vm in decision.pq:
            ops[c.vm] = Operation.VF
        else:
            ops[c.vm] = Operation.VNIC
    return Algorithm1Result(ops, migrate, decision)
