"""Run a scenario in the simulated world, once per compared policy, and collect records.

Each policy gets a fresh world built from the same seed, with one random stream per VM
for its workload and one per host for hot-plug timing, so every policy faces exactly the
same offered load and differences in the output come from the policy alone.

Ordering inside one tick ``(t0, t1]``: phase changes that start at or before ``t0`` apply,
the physics of the tick runs, operations due by ``t1`` complete, agents collect finished
operations, and at multiples of the control period agents run a full step. A sample
taken at ``t1`` therefore includes the traffic of the tick that just ended.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sova.agent.executor import Outcome
from sova.agent.loop import AgentConfig, HostAgent
from sova.driver.sim import SimDriver
from sova.model import AttachVF, DetachVF, Migrate, NicKind, SetGuestRateLimit, SetVFRate
from sova.scenario import DutyWorkload, Scenario
from sova.sim.core import Environment
from sova.sim.host import SimHost

EVENT_KIND = {
    AttachVF: "vf_attach",
    DetachVF: "vf_detach",
    SetVFRate: "tier_change",
    SetGuestRateLimit: "guest_limit",
    Migrate: "migrate_end",
}


@dataclass(frozen=True)
class TimelineRow:
    policy: str
    time_s: float
    host: str
    vm: str
    nic: str
    vf_rate_mbps: float | None
    tx_mbps: float
    rx_mbps: float
    cpu_usage: float
    io_degree: float
    net_factor: float
    net_degree: float
    io_factor: float
    offered_mbps: float


@dataclass(frozen=True)
class EventRow:
    policy: str
    time_s: float
    event: str
    vm: str
    src_host: str
    dst_host: str
    detail: str


@dataclass
class PolicyRun:
    policy: str
    timeline: list[TimelineRow] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)


def agent_config(scn: Scenario, policy: str) -> AgentConfig:
    c = scn.controller
    return AgentConfig(
        period_s=c.period,
        vf_policy=policy,  # type: ignore[arg-type]
        scheduler=c.scheduler.to_config(),
        window=c.sensing.window,
        epsilon=c.sensing.epsilon,
        traffic_threshold_bps=c.sensing.traffic_threshold,
        max_ops_per_period=c.max_ops_per_period,
        op_timeout_s=c.op_timeout,
        max_retries=c.max_retries,
    )


def _workload_at(scn: Scenario, vm: str, t: float) -> DutyWorkload:
    current = DutyWorkload()
    for phase in sorted(scn.workload, key=lambda p: p.at):
        if phase.at <= t and vm in phase.vms:
            current = phase.vms[vm]
    return current


def run_policy(
    scn: Scenario, policy: str, progress: Callable[[int], None] | None = None
) -> PolicyRun:
    env = Environment()
    run = PolicyRun(policy)
    hosts: list[SimHost] = []
    agents: list[HostAgent] = []
    vm_index = {v.name: i for i, v in enumerate(scn.vms)}
    specs = {v.name: v for v in scn.vms}
    for hi, hspec in enumerate(scn.hosts):
        host = SimHost(
            scn.model_host(hspec),
            scn.profile,
            env,
            np.random.default_rng([scn.seed, hi, 1_000_003]),
        )
        for name in hspec.vms:
            i = vm_index[name]
            host.add_vm(
                scn.model_vm(specs[name], i),
                _workload_at(scn, name, 0.0),
                np.random.default_rng([scn.seed, i]),
                specs[name].failover_ready,
            )
        hosts.append(host)

        def log(o: Outcome, host_name: str = hspec.name) -> None:
            kind = EVENT_KIND.get(type(o.action), o.action.kind)
            event = kind if o.result == "succeeded" else f"{kind}_{o.result}"
            detail = o.detail
            if isinstance(o.action, AttachVF | SetVFRate) and o.action.max_bps:
                detail = (
                    detail + "; " if detail else ""
                ) + f"rate {o.action.max_bps / 1e6:.0f} Mbit/s"
            run.events.append(
                EventRow(policy, round(o.time_s, 3), event, o.action.vm, host_name, "", detail)
            )

        agents.append(HostAgent(SimDriver(host), agent_config(scn, policy), on_outcome=log))

    tick = scn.tick
    period = scn.controller.period
    steps = int(round(scn.duration / tick))
    period_ticks = max(1, int(round(period / tick)))
    changes = sorted({p.at for p in scn.workload if p.at > 0})
    for k in range(1, steps + 1):
        t0, t1 = (k - 1) * tick, k * tick
        while changes and changes[0] <= t0 + 1e-9:
            at = changes.pop(0)
            for host in hosts:
                for name in host.vms:
                    for phase in scn.workload:
                        if phase.at == at and name in phase.vms:
                            host.set_workload(name, phase.vms[name])
        for host in hosts:
            host.tick(t0, t1)
        env.run(until=t1)
        for agent in agents:
            agent.poll()
        if k % period_ticks == 0:
            for host, agent in zip(hosts, agents, strict=True):
                report = agent.step()
                for vm, f in sorted(report.factors.items()):
                    state = report.actual.vms[vm]
                    sim_vm = host.vms[vm]
                    on_vf = state.nic is NicKind.VF
                    run.timeline.append(
                        TimelineRow(
                            policy=policy,
                            time_s=round(t1, 3),
                            host=host.host.name,
                            vm=vm,
                            nic=state.nic.value,
                            vf_rate_mbps=(state.vf_max_bps / 1e6 if state.vf_max_bps else None)
                            if on_vf
                            else None,
                            tx_mbps=f.tx_bps / 1e6,
                            rx_mbps=f.rx_bps / 1e6,
                            cpu_usage=f.cpu_usage,
                            io_degree=f.io_degree,
                            net_factor=f.net_factor,
                            net_degree=f.net_degree,
                            io_factor=f.io_factor,
                            offered_mbps=sim_vm.offered_bps / 1e6,
                        )
                    )
        if progress is not None:
            progress(1)
    return run


def run_scenario(scn: Scenario, progress: Callable[[int], None] | None = None) -> list[PolicyRun]:
    return [run_policy(scn, p, progress) for p in scn.policies]


def total_ticks(scn: Scenario) -> int:
    return int(round(scn.duration / scn.tick)) * len(scn.policies)
