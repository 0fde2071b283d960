"""Executor and host agent against MockDriver worlds (no simulator, no libvirt)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from sova.agent.config import ControllerConfig, SchedulerSpec
from sova.agent.executor import Executor, Outcome
from sova.agent.loop import HostAgent, plan_actions
from sova.driver.base import DriverError, DriverRequest, MockDriver, OpState, OpStatus
from sova.model import (
    MIB,
    NIC,
    VM,
    Action,
    AttachVF,
    DetachVF,
    Host,
    HostCounters,
    HostSample,
    Inventory,
    Migrate,
    NicKind,
    SetGuestRateLimit,
    SetVFRate,
    VMCounters,
    VMState,
)
from sova.policy.operation import Operation

GIB = 1024 * MIB


def vm_state(name: str, vf: bool = False, seq: int = 0, **kw: Any) -> VMState:
    return VMState(
        vm=VM(name, vcpus=1, memory_bytes=512 * MIB, created_seq=seq),
        nic=NicKind.VF if vf else NicKind.VIRTIO,
        **kw,
    )


def inventory(*states: VMState, pool: int = 1) -> Inventory:
    host = Host("h1", cores=8, memory_bytes=64 * GIB, nic=NIC("eth0", 10e9, vf_pool=pool))
    return Inventory(host, {s.vm.name: s for s in states})


# --------------------------------------------------------------------------- executor world


@dataclass
class OpsWorld:
    """A clock and a table of operations whose state the test sets by hand."""

    t: float = 0.0
    status: dict[str, OpState] = field(default_factory=dict)
    refuse_submit: bool = False

    def __call__(self, req: DriverRequest) -> Any:
        if req.method == "now":
            return self.t
        if req.method == "submit":
            if self.refuse_submit:
                raise DriverError("guest is busy")
            op = f"op{len(self.status) + 1}"
            self.status[op] = OpState.PENDING
            return op
        if req.method == "poll":
            (op,) = req.args
            return OpStatus(op, self.status[op], "done" if op in self.status else "")
        raise AssertionError(f"unexpected {req.method}")


def executor(world: OpsWorld, **kw: Any) -> tuple[Executor, MockDriver, list[Outcome]]:
    seen: list[Outcome] = []
    drv = MockDriver(world)
    return Executor(drv, on_outcome=seen.append, **kw), drv, seen


@pytest.mark.parametrize(
    ("state", "why"),
    [
        (vm_state("a", vf=True, backup_link_up=False), "backup"),
        (vm_state("a", vf=True, failover_ready=False), "backup"),
        (vm_state("a", vf=True, failover_ready=False, backup_link_up=False), "backup"),
    ],
)
def test_detach_blocked_without_backup(state: VMState, why: str) -> None:
    ex, drv, seen = executor(OpsWorld())
    out = ex.apply(DetachVF("a"), inventory(state))
    assert out is not None and out.result == "blocked" and why in out.detail
    assert drv.submitted() == []
    assert seen == [out]
    assert not ex.busy("a")


def test_detach_allowed_with_backup_and_attach_not_gated() -> None:
    ex, drv, _ = executor(OpsWorld())
    assert ex.apply(DetachVF("a"), inventory(vm_state("a", vf=True))) is None
    # attach only needs the VM on the host, the backup state does not matter
    inv = inventory(vm_state("b", backup_link_up=False))
    assert ex.apply(AttachVF("b"), inv) is None
    assert drv.submitted() == [DetachVF("a"), AttachVF("b")]


def test_action_for_unknown_vm_is_blocked() -> None:
    ex, drv, _ = executor(OpsWorld())
    out = ex.apply(AttachVF("ghost"), inventory(vm_state("a")))
    assert out is not None and out.result == "blocked" and "not on this host" in out.detail
    assert drv.submitted() == []


def test_dry_run_submits_nothing() -> None:
    ex, drv, seen = executor(OpsWorld(), dry_run=True)
    inv = inventory(vm_state("a", vf=True), vm_state("b"))
    r1 = ex.apply(DetachVF("a"), inv)
    r2 = ex.apply(AttachVF("b"), inv)
    assert [o.result for o in (r1, r2) if o] == ["dry-run", "dry-run"]
    assert [o.result for o in seen] == ["dry-run", "dry-run"]
    assert drv.submitted() == []
    assert ex.in_flight == {}
    # a dry-run still refuses what would be refused
    bad = ex.apply(DetachVF("a"), inventory(vm_state("a", vf=True, backup_link_up=False)))
    assert bad is not None and bad.result == "blocked"


def test_one_op_in_flight_per_vm() -> None:
    world = OpsWorld()
    ex, drv, _ = executor(world)
    inv = inventory(vm_state("a"), vm_state("b"), pool=2)
    assert ex.apply(AttachVF("a"), inv) is None
    assert ex.busy("a")
    # a second apply for the same VM, same or different action, is ignored
    assert ex.apply(AttachVF("a"), inv) is None
    assert ex.apply(SetVFRate("a", 1e9), inv) is None
    # another VM is independent
    assert ex.apply(AttachVF("b"), inv) is None
    assert drv.submitted() == [AttachVF("a"), AttachVF("b")]
    assert ex.pending_actions() == [AttachVF("a"), AttachVF("b")]
    # once a's op finishes, a new one can go
    world.status["op1"] = OpState.SUCCEEDED
    done = ex.poll()
    assert [(o.action, o.result) for o in done] == [(AttachVF("a"), "succeeded")]
    assert not ex.busy("a") and ex.busy("b")
    assert ex.apply(SetVFRate("a", 1e9), inv) is None
    assert drv.submitted()[-1] == SetVFRate("a", 1e9)


def test_failed_op_is_reported_and_cleared() -> None:
    world = OpsWorld()
    ex, _, seen = executor(world)
    ex.apply(AttachVF("a"), inventory(vm_state("a")))
    world.status["op1"] = OpState.FAILED
    assert [o.result for o in ex.poll()] == ["failed"]
    assert not ex.busy("a")
    assert [o.result for o in seen] == ["failed"]


@pytest.mark.parametrize(
    ("poll_at", "timed_out"),
    [
        (10.0, False),
        (30.0, False),  # exactly op_timeout_s after submit: still within the deadline
        (30.5, True),
        (100.0, True),
    ],
)
def test_pending_op_times_out(poll_at: float, timed_out: bool) -> None:
    world = OpsWorld()
    ex, _, _ = executor(world, op_timeout_s=30.0)
    ex.apply(AttachVF("a"), inventory(vm_state("a")))  # submitted at t=0
    world.t = poll_at
    done = ex.poll()
    if timed_out:
        assert [o.result for o in done] == ["timeout"]
        assert "30 s" in done[0].detail
        assert not ex.busy("a")
    else:
        assert done == []
        assert ex.busy("a")


def test_poll_error_until_timeout() -> None:
    # a driver whose poll raises: the op stays in flight until its deadline, then times out
    t = {"now": 0.0}

    def world(req: DriverRequest) -> Any:
        if req.method == "now":
            return t["now"]
        if req.method == "submit":
            return "op1"
        raise DriverError("connection lost")

    ex = Executor(MockDriver(world), op_timeout_s=10.0)
    ex.apply(AttachVF("a"), inventory(vm_state("a")))
    t["now"] = 5.0
    assert ex.poll() == []
    t["now"] = 11.0
    assert [o.result for o in ex.poll()] == ["timeout"]


def test_backoff_after_max_retries() -> None:
    # max_retries 3, base 20 s. Submits refused at t = 0, 1, 2 -> third failure at t=2
    # blocks the VM until 2 + 20·2^(3−3) = 22. At t=22 it may try again; a 4th failure
    # then blocks until 22 + 20·2^(4−3) = 62.
    world = OpsWorld(refuse_submit=True)
    ex, drv, _ = executor(world, max_retries=3, backoff_base_s=20.0)
    inv = inventory(vm_state("a"), vm_state("b"), pool=2)
    for t in (0.0, 1.0, 2.0):
        world.t = t
        out = ex.apply(AttachVF("a"), inv)
        assert out is not None and out.result == "failed" and "guest is busy" in out.detail
    assert len(drv.submitted()) == 3
    for t in (2.0, 10.0, 21.9):
        world.t = t
        assert ex.backing_off("a", t)
        assert ex.apply(AttachVF("a"), inv) is None
    assert len(drv.submitted()) == 3  # nothing sent while backing off
    # another VM is not affected
    ex.apply(AttachVF("b"), inv)
    assert len(drv.submitted()) == 4
    world.t = 22.0
    assert not ex.backing_off("a", 22.0)
    out = ex.apply(AttachVF("a"), inv)
    assert out is not None and out.result == "failed"
    assert len(drv.submitted()) == 5
    assert ex.backing_off("a", 61.9) and not ex.backing_off("a", 62.0)


def test_backoff_counts_timeouts_and_failures_and_caps() -> None:
    # failures via poll (FAILED and timeout) count like refused submits
    world = OpsWorld()
    ex, drv, _ = executor(world, max_retries=2, backoff_base_s=20.0, op_timeout_s=5.0)
    inv = inventory(vm_state("a"))
    ex.apply(AttachVF("a"), inv)
    world.status["op1"] = OpState.FAILED
    ex.poll()
    assert not ex.backing_off("a", world.t)  # 1 of 2
    ex.apply(AttachVF("a"), inv)
    world.t = 6.0
    assert [o.result for o in ex.poll()] == ["timeout"]  # 2 of 2 -> until 6 + 20 = 26
    assert ex.backing_off("a", 25.9) and not ex.backing_off("a", 26.0)
    # many more failures: back-off capped at 600 s
    world.refuse_submit = True
    for _ in range(10):
        world.t += 10_000.0
        ex.apply(AttachVF("a"), inv)
    assert ex.backing_off("a", world.t + 599.0)
    assert not ex.backing_off("a", world.t + 600.0)
    assert len(drv.submitted()) == 12


def test_success_resets_the_failure_count() -> None:
    world = OpsWorld()
    ex, _, _ = executor(world, max_retries=2)
    inv = inventory(vm_state("a"))
    ex.apply(AttachVF("a"), inv)
    world.status["op1"] = OpState.FAILED
    ex.poll()
    ex.apply(AttachVF("a"), inv)
    world.status["op2"] = OpState.SUCCEEDED
    ex.poll()
    ex.apply(DetachVF("a"), inventory(vm_state("a", vf=True)))
    world.status["op3"] = OpState.FAILED
    ex.poll()
    # one failure since the success: not yet backing off (would be with a count of 2)
    assert not ex.backing_off("a", world.t)


# --------------------------------------------------------------------------- plan_actions


def test_plan_detach_before_attach_and_only_free_vfs() -> None:
    # pool 2, a holds, desired {b, c} ranked c > b: detach a; 1 VF free now -> attach c only
    inv = inventory(vm_state("a", vf=True), vm_state("b"), vm_state("c"), pool=2)
    acts = plan_actions({"b": None, "c": None}, ["c", "b"], inv, [], max_ops=10)
    assert acts == [DetachVF("a"), AttachVF("c")]


def test_plan_swap_on_full_pool_detaches_only() -> None:
    # pool 1 held by a, b desired: the VF is only free once the detach has completed
    inv = inventory(vm_state("a", vf=True), vm_state("b"), pool=1)
    assert plan_actions({"b": None}, ["b"], inv, [], 10) == [DetachVF("a")]


def test_plan_detach_in_flight_still_holds_its_vf() -> None:
    inv = inventory(vm_state("a", vf=True), vm_state("b"), pool=1)
    # the detach of a is in flight: not re-sent, and b must wait
    assert plan_actions({"b": None}, ["b"], inv, [DetachVF("a")], 10) == []


def test_plan_pending_attach_uses_a_vf() -> None:
    # pool 2, nobody holds yet, an attach for x is in flight -> only 1 VF left: y (rank 1)
    inv = inventory(vm_state("x"), vm_state("y"), vm_state("z"), pool=2)
    desired = {"x": None, "y": None, "z": None}
    acts = plan_actions(desired, ["y", "x", "z"], inv, [AttachVF("x")], 10)
    assert acts == [AttachVF("y")]


def test_plan_best_ranked_first_then_unranked_by_name() -> None:
    inv = inventory(*(vm_state(n) for n in "abcde"), pool=4)
    desired = dict.fromkeys("abcde", 1e9)
    # ranking names c then a; b, d, e are not ranked (e.g. static policy) -> by name
    acts = plan_actions(desired, ["c", "a"], inv, [], 10)
    assert acts == [AttachVF("c", 1e9), AttachVF("a", 1e9), AttachVF("b", 1e9)] + [
        AttachVF("d", 1e9)
    ]


def test_plan_rate_changes_for_holders_whose_rate_differs() -> None:
    inv = inventory(
        vm_state("a", vf=True, vf_max_bps=1e9),
        vm_state("b", vf=True, vf_max_bps=2e9),
        vm_state("c", vf=True, vf_max_bps=1e9, vf_min_bps=5e8),
        vm_state("d", vf=True, vf_max_bps=1e9),
        pool=4,
    )
    desired = {"a": 3e9, "b": 2e9, "c": 1e9, "d": 4e9}
    acts = plan_actions(desired, ["a", "b", "c", "d"], inv, [SetVFRate("d", 9e9)], 10)
    # a: 1e9 -> 3e9; b unchanged; c: min 5e8 -> None (no min wanted); d busy
    assert acts == [SetVFRate("a", 3e9, None), SetVFRate("c", 1e9, None)]
    acts = plan_actions(desired, [], inv, [], 10, min_rates={"c": 5e8})
    assert SetVFRate("c", 1e9, 5e8) not in acts
    assert all(a.vm != "c" for a in acts)


def test_plan_order_and_budget() -> None:
    # pool 3: a, b held, not desired; c held with a new rate; d, e wanted.
    # free = 3 − 3 = 0 -> no attaches. Detaches a, b, then the rate of c; budget 2 -> a, b.
    inv = inventory(
        vm_state("a", vf=True),
        vm_state("b", vf=True),
        vm_state("c", vf=True, vf_max_bps=1e9),
        vm_state("d"),
        vm_state("e"),
        pool=3,
    )
    desired = {"c": 2e9, "d": None, "e": None}
    full = plan_actions(desired, ["d", "e", "c"], inv, [], 10)
    assert full == [DetachVF("a"), DetachVF("b"), SetVFRate("c", 2e9, None)]
    assert plan_actions(desired, ["d", "e", "c"], inv, [], 2) == full[:2]
    # with a larger pool the attaches sit between the detaches and the rate change
    inv5 = replace(inv, host=replace(inv.host, nic=replace(inv.host.nic, vf_pool=5)))
    acts = plan_actions(desired, ["e", "d", "c"], inv5, [], 10)
    kinds = [type(a).__name__ for a in acts]
    assert kinds == ["DetachVF", "DetachVF", "AttachVF", "AttachVF", "SetVFRate"]
    assert [a.vm for a in acts if isinstance(a, AttachVF)] == ["e", "d"]


# --------------------------------------------------------------------------- host agent


@dataclass
class Load:
    cpu: float  # fraction of its one vCPU
    bytes_per_s: float  # rx + tx
    packet_bytes: float = 1000.0


class HostWorld:
    """A host with VMs whose counters grow at fixed rates; hot-plug completes after a delay.

    Records every VF-count violation: an attach submitted or completed while no VF is free.
    """

    def __init__(
        self,
        loads: dict[str, Load],
        pool: int = 1,
        holders: tuple[str, ...] = (),
        attach_s: float = 2.0,
        detach_s: float = 1.0,
    ) -> None:
        self.t = 0.0
        self.loads = loads
        self.pool = pool
        self.attach_s, self.detach_s = attach_s, detach_s
        self.counters = {vm: [0.0, 0.0, 0.0] for vm in loads}  # cpu_ns, bytes, packets
        self.states = {
            vm: vm_state(vm, vf=vm in holders, seq=i) for i, vm in enumerate(sorted(loads))
        }
        self.ops: dict[str, tuple[Action, float]] = {}
        self.done: set[str] = set()
        self.violations: list[str] = []
        self.history: list[tuple[float, frozenset[str]]] = []

    def holders(self) -> frozenset[str]:
        return frozenset(vm for vm, s in self.states.items() if s.nic is NicKind.VF)

    def advance(self, dt: float) -> None:
        self.t += dt
        for vm, ld in self.loads.items():
            c = self.counters[vm]
            c[0] += ld.cpu * dt * 1e9
            c[1] += ld.bytes_per_s * dt
            c[2] += ld.bytes_per_s * dt / ld.packet_bytes

    def inventory(self) -> Inventory:
        return inventory(*self.states.values(), pool=self.pool)

    def sample(self) -> HostSample:
        vms = {
            vm: VMCounters(
                vm=vm,
                vcpus=1,
                cpu_time_ns=int(c[0]),
                steal_ns=0,
                rx_bytes=int(c[1] / 2),
                tx_bytes=int(c[1] / 2),
                rx_packets=int(c[2] / 2),
                tx_packets=int(c[2] / 2),
            )
            for vm, c in self.counters.items()
        }
        return HostSample("h1", self.t, vms, HostCounters(0, 0, 0, 0))

    def _complete(self, op: str) -> None:
        action, _ = self.ops[op]
        s = self.states[action.vm]
        if isinstance(action, AttachVF):
            if len(self.holders()) >= self.pool:
                self.violations.append(f"attach of {action.vm} completed on a full pool")
            self.states[action.vm] = replace(s, nic=NicKind.VF, vf_max_bps=action.max_bps)
        elif isinstance(action, DetachVF):
            self.states[action.vm] = replace(s, nic=NicKind.VIRTIO, vf_max_bps=None)
        self.done.add(op)
        self.history.append((self.t, self.holders()))

    def __call__(self, req: DriverRequest) -> Any:
        if req.method == "now":
            return self.t
        if req.method == "inventory":
            return self.inventory()
        if req.method == "sample":
            return self.sample()
        if req.method == "submit":
            (action,) = req.args
            if isinstance(action, AttachVF):
                attaching = sum(
                    1
                    for op, (a, _) in self.ops.items()
                    if isinstance(a, AttachVF) and op not in self.done
                )
                if len(self.holders()) + attaching >= self.pool:
                    self.violations.append(f"attach of {action.vm} submitted on a full pool")
            op = f"op{len(self.ops) + 1}"
            delay = self.attach_s if isinstance(action, AttachVF) else self.detach_s
            self.ops[op] = (action, self.t + delay)
            return op
        if req.method == "poll":
            (op,) = req.args
            _, due = self.ops[op]
            if op not in self.done and self.t >= due:
                self._complete(op)
            state = OpState.SUCCEEDED if op in self.done else OpState.PENDING
            return OpStatus(op, state)
        raise AssertionError(f"unexpected {req.method}")


# web: network VM (5 % CPU, 50 MB/s); db: light network (10 % CPU, 5 MB/s);
# batch: CPU-bound (95 % CPU -> io_degree 5 < θ_io 65) although it sends 80 MB/s.
LOADS3 = {
    "batch": Load(cpu=0.95, bytes_per_s=80e6),
    "db": Load(cpu=0.10, bytes_per_s=5e6),
    "web": Load(cpu=0.05, bytes_per_s=50e6),
}


def run(agent: HostAgent, world: HostWorld, periods: int, period_s: float = 10.0) -> None:
    for _ in range(periods):
        agent.step()
        world.advance(period_s)


def vf_actions(drv: MockDriver) -> list[Action]:
    return [a for a in drv.submitted() if isinstance(a, AttachVF | DetachVF)]


def test_agent_end_to_end_busiest_network_vm_gets_the_vf() -> None:
    world = HostWorld(LOADS3, pool=1)
    drv = MockDriver(world)
    agent = HostAgent(drv)
    # t=0: first sample, no period yet -> nobody known to have traffic -> nothing
    report = agent.step()
    assert report.planned == [] and drv.submitted() == []
    world.advance(10.0)
    # t=10: one period: net_degree web 0.7·50,000 + 0.3 = 35,000.3, db 3,500.3;
    # batch filtered (io_degree 5) -> web attached
    report = agent.step()
    assert report.decision is not None
    assert report.decision.pq == ("web",)
    assert report.decision.ranking == ("web", "db")
    assert report.decision.reasons["batch"].startswith("filtered")
    assert report.factors["web"].io_degree == pytest.approx(95.0)
    assert report.planned == [AttachVF("web")]
    # the Operation Table it decided (Alg. 1), returned rather than left to be re-derived
    assert report.operations == {"batch": Operation.VNIC, "db": Operation.VNIC, "web": Operation.VF}
    world.advance(10.0)
    run(agent, world, 6)
    assert world.holders() == {"web"}
    assert vf_actions(drv) == [AttachVF("web")]  # exactly once, no flapping
    assert world.violations == []
    # submitted at t=10, done 2 s later, seen by the poll at the start of the t=20 step
    assert agent.vf_since["web"] == pytest.approx(20.0)


def test_agent_dry_run_submits_nothing() -> None:
    world = HostWorld(LOADS3, pool=1)
    drv = MockDriver(world)
    seen: list[Outcome] = []
    agent = HostAgent(drv, ControllerConfig(), on_outcome=seen.append, dry_run=True)
    run(agent, world, 4)
    assert drv.submitted() == []
    assert world.holders() == frozenset()
    assert {o.result for o in seen} == {"dry-run"}
    assert all(o.action == AttachVF("web") for o in seen)


def test_agent_restart_keeps_the_holder() -> None:
    world = HostWorld(LOADS3, pool=1)
    first = MockDriver(world)
    run(HostAgent(first), world, 5)
    assert world.holders() == {"web"}
    # the agent process restarts: new HostAgent, empty memory, same host
    second = MockDriver(world)
    agent = HostAgent(second)
    for _ in range(8):
        agent.step()
        assert world.holders() == {"web"}
        world.advance(10.0)
    # reconciled from the inventory: nothing to do, in particular no attach and no
    # detach-then-reattach of the VF while its windows were still empty
    assert second.submitted() == []
    assert world.violations == []


def test_agent_restart_with_a_worse_holder_moves_the_vf_without_double_assignment() -> None:
    # the host comes up with db holding the only VF (e.g. from before the restart)
    world = HostWorld(LOADS3, pool=1, holders=("db",))
    drv = MockDriver(world)
    agent = HostAgent(drv)  # dwell 30 s from the moment it first sees db as a holder (t=0)
    run(agent, world, 3)  # t = 0, 10, 20: db is inside its dwell time
    assert drv.submitted() == []
    assert world.holders() == {"db"}
    agent.step()  # t=30: dwell over -> detach db (backup up), web must wait for the VF
    assert vf_actions(drv) == [DetachVF("db")]
    world.advance(2.0)
    # between periods: the detach finished, the freed VF goes to web at once
    done = agent.poll()
    assert [(o.action, o.result) for o in done] == [(DetachVF("db"), "succeeded")]
    assert vf_actions(drv) == [DetachVF("db"), AttachVF("web")]
    world.advance(8.0)
    run(agent, world, 4)
    assert world.holders() == {"web"}
    assert vf_actions(drv) == [DetachVF("db"), AttachVF("web")]
    assert world.violations == []
    assert all(len(h) <= 1 for _, h in world.history)


def test_agent_keeps_the_vf_when_backup_is_down() -> None:
    # db holds the VF but its virtio backup is down: web ranks first, but db's detach is
    # refused, so no attach is ever submitted on the full pool
    world = HostWorld(LOADS3, pool=1, holders=("db",))
    world.states["db"] = replace(world.states["db"], backup_link_up=False)
    drv = MockDriver(world)
    seen: list[Outcome] = []
    agent = HostAgent(drv, on_outcome=seen.append)
    run(agent, world, 6)
    assert drv.submitted() == []
    assert world.holders() == {"db"}
    assert seen and {o.result for o in seen} == {"blocked"}
    assert world.violations == []


def test_agent_migration_signal_revokes_the_vf_then_migrates() -> None:
    world = HostWorld(LOADS3, pool=1)
    drv = MockDriver(world)
    # the papers' filter (batch, CPU-bound, never passes it): this is about the signal
    papers = SchedulerSpec(top_senders=False, cost_benefit=False)
    agent = HostAgent(drv, ControllerConfig(vf_policy="sova", scheduler=papers))
    run(agent, world, 4)
    assert world.holders() == {"web"}
    # t=40: web got its VF at t=20, still inside its 30 s dwell; the manager moves it to h2
    agent.signal(True, "h2", vm="web")
    report = agent.step()
    assert report.migrating == {"web": "h2"}
    assert report.decision is not None and "web" not in report.decision.pq
    assert report.operations == {"batch": Operation.VNIC, "db": Operation.VF, "web": Operation.VLM}
    # the VF is revoked first (a VM with a plain VF cannot live-migrate); nothing else yet
    assert drv.submitted() == [AttachVF("web"), DetachVF("web")]
    world.advance(2.0)
    agent.poll()
    # detach done: the freed VF goes to db, and web (now on virtio) migrates
    assert drv.submitted()[2:] == [AttachVF("db"), Migrate("web", "h2", None)]
    assert world.violations == []


def test_executor_rate_limits_do_not_wait_behind_a_hotplug() -> None:
    # the same VM: a VF hot-plug (channel "nic") in flight does not block a guest rate
    # limit (channel "rate"), but still blocks a second NIC operation
    ex, drv, _ = executor(OpsWorld())
    inv = inventory(vm_state("a"))
    ex.apply(AttachVF("a"), inv)
    ex.apply(SetGuestRateLimit("a", 1e8), inv)
    ex.apply(SetVFRate("a", 1e9), inv)
    assert drv.submitted() == [AttachVF("a"), SetGuestRateLimit("a", 1e8)]


def test_vf_freeze_keeps_assignments_as_they_are() -> None:
    """Operator fence (issue 11): a frozen VM keeps what it has, the rest is scheduled.

    web holds the one VF; then the loads swap (db becomes the network VM). Unfrozen, the VF
    would move web -> db. With web frozen it stays on web (and db, not frozen, gets none:
    the pool is web's). With db frozen instead, db gets nothing and web keeps it anyway.
    With the whole host frozen nothing moves; lifting the freeze lets the scheduler act.
    """
    swapped = {
        "batch": LOADS3["batch"],
        "db": Load(cpu=0.05, bytes_per_s=50e6),
        "web": Load(cpu=0.10, bytes_per_s=5e6),
    }
    for freeze_host, frozen, holders in [
        (False, {"web"}, {"web"}),
        (False, {"db"}, {"web"}),
        (True, set(), {"web"}),
        (False, set(), {"db"}),
    ]:
        world = HostWorld(LOADS3, pool=1)
        drv = MockDriver(world)
        agent = HostAgent(drv)
        run(agent, world, 4)
        assert world.holders() == {"web"}
        assert agent.set_vf_freeze(freeze_host, frozen) == bool(freeze_host or frozen)
        world.loads = swapped
        run(agent, world, 8)
        assert world.holders() == holders, (freeze_host, frozen)
        assert world.violations == []


def test_the_agent_reports_its_hosts_capacity() -> None:
    """Shares are of this host: the manager needs the whole to compare hosts (issue 11's
    heterogeneous-host fix)."""
    from sova.policy.hotspot import HostCapacity

    world = HostWorld(LOADS3, pool=1)
    agent = HostAgent(MockDriver(world))
    for _ in range(2):
        agent.step()
        world.advance(10.0)
    rep = agent.host_report()
    assert rep is not None
    h = world.inventory().host
    assert rep.capacity == HostCapacity(h.cores, h.memory_bytes, h.nic.capacity_bps)
