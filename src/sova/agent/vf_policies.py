"""VF policies: who among a host's VMs holds a VF this period.

A VF policy is a small class registered by name in :data:`sova.agent.registry.VF_POLICIES`
(as scheduler plugins are in Kubernetes). It declares what it needs instead of being
recognised by its name:

* ``uses_manager`` — it acts on the manager's ``<flag, target>`` migration signal
  (Alg. 2), so a world runs the manager for it and the agent labels a VM VLM (Alg. 1);
* ``grants_vfs`` — it decides VF holders; a policy that does not leaves the VFs where the
  host has them and the Operation Table reports them as found.

:meth:`VFPolicy.desired` gets one :class:`VFContext` per period and returns the scheduler's
decision (or None) and the desired holders with their VF max rate (None = no rate).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

from sova.model import Inventory, NicKind
from sova.policy.sensing import VMFactors
from sova.policy.vfsched import Candidate, VFDecision, VFSchedulerConfig

Desired = dict[str, float | None]


@dataclass(frozen=True)
class VFContext:
    """What a VF policy may look at in one period."""

    factors: Mapping[str, VMFactors]
    actual: Inventory
    now: float
    # the candidates, built when a policy first reads ``candidates`` (a VM chosen to
    # migrate is already ineligible)
    candidates_of: Callable[[], Sequence[Candidate]]
    # the agent's record of when each VM got its VF (the dwell time); a policy that
    # schedules adds the holders it finds
    vf_since: MutableMapping[str, float]
    measured: bool  # some VM has a measured period (False right after a (re)start)
    scheduler: VFSchedulerConfig
    with_tiers: Callable[[Sequence[str]], Desired]  # chosen holders -> their tier rates
    # this period's scheduling of these candidates, when it was done outside the agent
    # (a simulated world schedules every host at once with the same kernel)
    scheduled: VFDecision | None = None

    @cached_property
    def candidates(self) -> Sequence[Candidate]:
        return self.candidates_of()


class VFPolicy:
    """Base of every VF policy; the defaults describe a policy that leaves VFs alone."""

    name: ClassVar[str]
    uses_manager: ClassVar[bool] = False
    grants_vfs: ClassVar[bool] = True
    # It picks holders from measured load: a paper's published holders are its yardstick
    # (a baseline that never moves VFs is not "mismatching" them, it is the baseline).
    follows_load: ClassVar[bool] = False
    # Once measured, its holders are the VF scheduling kernel's PQ (as DsrIov's), so a
    # world may schedule every host at once and hand each agent its decision
    # (VFContext.scheduled).
    schedules: ClassVar[bool] = False

    def desired(self, ctx: VFContext) -> tuple[VFDecision | None, Desired]:
        raise NotImplementedError

    def scheduler_config(self, config: VFSchedulerConfig) -> VFSchedulerConfig:
        """The scheduler configuration this policy runs: the controller's, by default."""
        return config


class NoVF(VFPolicy):
    """``default``: every VM stays on virtio; nothing is hot-plugged."""

    name = "default"
    grants_vfs = False

    def desired(self, ctx: VFContext) -> tuple[VFDecision | None, Desired]:
        return None, {}


class MigrationOnly(NoVF):
    """``migration-only``: Sova's hotspot migrations without VF scheduling."""

    name = "migration-only"
    uses_manager = True


class StaticSriov(VFPolicy):
    """``static-sriov``: VFs handed out once, in creation order, and never moved (HYVI)."""

    name = "static-sriov"

    def desired(self, ctx: VFContext) -> tuple[VFDecision | None, Desired]:
        pool = ctx.actual.host.nic.vf_pool
        order = sorted(ctx.actual.vms.values(), key=lambda s: (s.vm.created_seq, s.vm.name))
        chosen = [s.vm.name for s in order if s.failover_ready][:pool]
        return None, ctx.with_tiers(chosen)


class DsrIov(VFPolicy):
    """``dsr-iov``: the DSR-IOV scheduler each period (the kernel
    :func:`sova.policy.vfkernel.schedule_one`, the compiled core's)."""

    name = "dsr-iov"
    follows_load = True
    schedules = True

    def scheduler_config(self, config: VFSchedulerConfig) -> VFSchedulerConfig:
        # The paper's baseline: its scheduler as published, without the top-sender rule
        # or the cost-benefit gate (docs/design.md#vf-cost-benefit).
        return config.papers()

    def desired(self, ctx: VFContext) -> tuple[VFDecision | None, Desired]:
        actual = ctx.actual
        found = (vm for vm, st in actual.vms.items() if st.nic is NicKind.VF)  # (no set)
        note_holders(found, ctx.vf_since, ctx.now)
        if not ctx.measured:
            # Warm-up after a (re)start: no VM has a measured period yet, so "no traffic"
            # only means "not measured". Keep the eligible holders instead of revoking
            # every VF on the host and re-granting it a period later.
            held = actual.vf_holders  # once: it walks every VM (100,000 took minutes)
            keep = [c.vm for c in ctx.candidates if c.eligible and c.vm in held]
            return None, {vm: actual.vms[vm].vf_max_bps for vm in keep}
        # Alg. 1 lines 10-28. Its VLM label (lines 3-9) was given by the agent already: the
        # VM chosen to migrate is an ineligible candidate here.
        decision = ctx.scheduled
        if decision is None:
            holders = {vm: ctx.vf_since[vm] for vm in actual.vf_holders}
            # Imported here, not at the top: the registry (and through it the controller's
            # config and the scenario loader) must import on a `cli`-only install without
            # numpy, so that `sova demo` there prints its one install line.
            from sova.policy.vfkernel import schedule_one

            decision = schedule_one(
                ctx.candidates, holders, actual.host.nic.vf_pool, ctx.now, ctx.scheduler
            )
        return decision, ctx.with_tiers(list(decision.pq))


def note_holders(holders: Iterable[str], vf_since: MutableMapping[str, float], now: float) -> None:
    """A scheduling policy's record of when each VM got its VF: the holders it finds in
    its inventory (in the inventory's order) that it has no record of (one attached
    before the agent ran) count from ``now``."""
    for vm in holders:
        vf_since.setdefault(vm, now)


class Sova(DsrIov):
    """``sova``: DSR-IOV scheduling plus the manager's hotspot migrations (Alg. 1 + 2)."""

    name = "sova"
    uses_manager = True

    def scheduler_config(self, config: VFSchedulerConfig) -> VFSchedulerConfig:
        return config
