"""The host agent: Sensor + Effector of one hypervisor (Sova Fig. 3), one loop per period.

    sample (driver) -> sensing windows -> factors -> VF decision + tiers   (policy core, pure)
                    -> plan: desired vs actual inventory -> ordered actions  (planner)
                    -> apply each through the executor                       (I/O, bounded)

The agent never trusts its own memory of the host: each period it reads the actual
inventory and plans the difference, so a crash, a restart or an operation that finished
late is repaired by the next period instead of compounding (reconciliation). Between
periods :meth:`HostAgent.poll` collects finished operations and, when a VF was freed,
immediately re-plans the pending decision so the next holder does not wait a full period.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from sova.agent.executor import Executor, Outcome
from sova.driver.base import Driver
from sova.model import Action, AttachVF, DetachVF, Inventory, NicKind, SetVFRate
from sova.policy.sensing import DEFAULT_TRAFFIC_THRESHOLD_BPS, HostSensor, VMFactors
from sova.policy.vfsched import Candidate, VFDecision, VFSchedulerConfig, schedule

VFPolicy = Literal["default", "static-sriov", "dsr-iov", "sova"]


@dataclass(frozen=True)
class AgentConfig:
    period_s: float = 10.0
    vf_policy: VFPolicy = "dsr-iov"
    scheduler: VFSchedulerConfig = field(default_factory=VFSchedulerConfig)
    window: int = 6
    epsilon: float = 0.7
    traffic_threshold_bps: float = DEFAULT_TRAFFIC_THRESHOLD_BPS
    max_ops_per_period: int = 4
    op_timeout_s: float = 30.0
    max_retries: int = 3
    dry_run: bool = False


@dataclass(frozen=True)
class StepReport:
    time_s: float
    factors: Mapping[str, VMFactors]
    actual: Inventory
    decision: VFDecision | None
    desired_rates: Mapping[str, float | None]
    planned: Sequence[Action]


def plan_actions(
    desired: Mapping[str, float | None],
    ranking: Sequence[str],
    actual: Inventory,
    pending: Sequence[Action],
    max_ops: int,
    min_rates: Mapping[str, float | None] | None = None,
) -> list[Action]:
    """Turn the desired VF holders (vm -> max rate) into ordered actions.

    Detaches come first because they free VFs; attaches only use VFs that are free *now*
    (a detach in flight still holds its VF), best-ranked first; rate changes last.
    """
    min_rates = min_rates or {}
    busy = {a.vm for a in pending}
    holders = actual.vf_holders
    pool = actual.host.nic.vf_pool
    actions: list[Action] = []
    for vm in sorted(holders - set(desired)):
        if vm not in busy:
            actions.append(DetachVF(vm))
    pending_attaches = sum(1 for a in pending if isinstance(a, AttachVF))
    free = pool - len(holders) - pending_attaches
    order = [vm for vm in ranking if vm in desired] + sorted(set(desired) - set(ranking))
    for vm in order:
        if vm in holders or vm in busy:
            continue
        if free <= 0:
            break
        actions.append(AttachVF(vm, desired[vm], min_rates.get(vm)))
        free -= 1
    for vm in sorted(holders & set(desired)):
        state = actual.vms[vm]
        want_max, want_min = desired[vm], min_rates.get(vm)
        if vm not in busy and (state.vf_max_bps != want_max or state.vf_min_bps != want_min):
            actions.append(SetVFRate(vm, want_max, want_min))
    return actions[:max_ops]


class HostAgent:
    def __init__(
        self,
        driver: Driver,
        config: AgentConfig | None = None,
        on_outcome: Callable[[Outcome], None] | None = None,
    ) -> None:
        self.driver = driver
        self.config = config or AgentConfig()
        self.sensor = HostSensor(
            self.config.window, self.config.epsilon, self.config.traffic_threshold_bps
        )
        self.executor = Executor(
            driver,
            op_timeout_s=self.config.op_timeout_s,
            max_retries=self.config.max_retries,
            dry_run=self.config.dry_run,
            on_outcome=self._outcome,
        )
        self._on_outcome = on_outcome
        self.vf_since: dict[str, float] = {}
        self.marked_for_migration: set[str] = set()
        self._last_desired: dict[str, float | None] = {}
        self._last_ranking: tuple[str, ...] = ()
        self._ops_this_period = 0

    # ----------------------------------------------------------------- events

    def _outcome(self, outcome: Outcome) -> None:
        a = outcome.action
        if outcome.result == "succeeded":
            if isinstance(a, AttachVF):
                self.vf_since[a.vm] = outcome.time_s
            elif isinstance(a, DetachVF):
                self.vf_since.pop(a.vm, None)
        if self._on_outcome is not None:
            self._on_outcome(outcome)

    # ----------------------------------------------------------------- decide

    def _candidates(self, factors: Mapping[str, VMFactors], actual: Inventory) -> list[Candidate]:
        cfg = self.config.scheduler
        out = []
        for vm, f in sorted(factors.items()):
            state = actual.vms.get(vm)
            if state is None:
                continue
            out.append(
                Candidate(
                    vm=vm,
                    io_score=f.io_degree if cfg.io_metric == "io_degree" else f.io_factor,
                    net_score=f.net_degree if cfg.net_metric == "net_degree" else f.net_factor,
                    has_traffic=f.has_traffic,
                    eligible=state.failover_ready
                    and state.running
                    and not state.migrating
                    and vm not in self.marked_for_migration,
                )
            )
        return out

    def decide(
        self, factors: Mapping[str, VMFactors], actual: Inventory, now: float
    ) -> tuple[VFDecision | None, dict[str, float | None]]:
        pool = actual.host.nic.vf_pool
        policy = self.config.vf_policy
        if policy == "default":
            return None, {}
        if policy == "static-sriov":
            # VFs handed out once, in creation order, and never moved (HYVI-style).
            order = sorted(actual.vms.values(), key=lambda s: (s.vm.created_seq, s.vm.name))
            chosen = [s.vm.name for s in order if s.failover_ready][:pool]
            return None, self._with_tiers(chosen, factors, actual)
        for vm in actual.vf_holders:
            self.vf_since.setdefault(vm, now)
        holders = {vm: self.vf_since[vm] for vm in actual.vf_holders}
        decision = schedule(
            self._candidates(factors, actual), holders, pool, now, self.config.scheduler
        )
        return decision, self._with_tiers(list(decision.pq), factors, actual)

    def _with_tiers(
        self, chosen: Sequence[str], factors: Mapping[str, VMFactors], actual: Inventory
    ) -> dict[str, float | None]:
        tiers = actual.host.nic.tiers_bps
        if not tiers or not chosen:
            return dict.fromkeys(chosen)
        from sova.policy.tiers import assign_tiers

        demands = {vm: factors[vm].demand_bps if vm in factors else 0.0 for vm in chosen}
        rates = assign_tiers(demands, tiers)
        return {vm: rates[vm] for vm in chosen}

    # ----------------------------------------------------------------- loop

    def step(self) -> StepReport:
        """One control period: sense, decide, plan, apply."""
        self.executor.poll()
        now = self.driver.now()
        self.sensor.observe(self.driver.sample())
        factors = self.sensor.factors()
        actual = self.driver.inventory()
        decision, desired = self.decide(factors, actual, now)
        self._last_desired = desired
        self._last_ranking = decision.ranking if decision else tuple(desired)
        self._ops_this_period = 0
        planned = self._reconcile(actual)
        return StepReport(now, factors, actual, decision, desired, planned)

    def poll(self) -> list[Outcome]:
        """Between periods: collect finished operations, use freed VFs at once."""
        if not self.executor.in_flight:
            return []
        done = self.executor.poll()
        if any(o.result == "succeeded" and isinstance(o.action, DetachVF) for o in done):
            self._reconcile(self.driver.inventory())
        return done

    def _reconcile(self, actual: Inventory) -> list[Action]:
        budget = self.config.max_ops_per_period - self._ops_this_period
        if budget <= 0:
            return []
        actions = plan_actions(
            self._last_desired,
            self._last_ranking,
            actual,
            self.executor.pending_actions(),
            budget,
        )
        for a in actions:
            self.executor.apply(a, actual)
        self._ops_this_period += len(actions)
        return actions

    def holders(self, actual: Inventory) -> list[str]:
        return sorted(vm for vm, s in actual.vms.items() if s.nic is NicKind.VF)
