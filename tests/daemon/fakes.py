"""A controllable host behind MockDriver, and a fake manager behind httpx.MockTransport."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

from sova import model
from sova.driver.base import Capabilities, DriverRequest, MockDriver, OpState, OpStatus


@dataclass
class FakeVM:
    name: str
    tx_bps: float
    cpu: float = 0.05  # share of its vCPU
    nic: model.NicKind = model.NicKind.VIRTIO
    vf_index: int | None = None
    vf_max_bps: float | None = None
    migrating: bool = False
    gone: bool = False


@dataclass
class FakeOp:
    action: model.Action
    done_at: float | None  # None: never completes by itself
    outcome: OpState = OpState.SUCCEEDED
    state: OpState = OpState.PENDING
    detail: str = ""


@dataclass
class FakeHost:
    """Time advances only when the test says; counters follow the VMs' rates."""

    name: str = "h1"
    vf_pool: int = 1
    vms: dict[str, FakeVM] = field(default_factory=dict)
    now: float = 0.0
    hotplug_s: float = 1.0
    migration: str = "succeeds"  # succeeds | fails | hangs
    migration_s: float = 20.0
    abort_after_s: float = 90.0  # the hypervisor gives up a hung migration eventually
    ops: dict[str, FakeOp] = field(default_factory=dict)
    submitted: list[model.Action] = field(default_factory=list)
    _cpu_ns: dict[str, float] = field(default_factory=dict)
    _tx: dict[str, float] = field(default_factory=dict)

    def driver(self) -> MockDriver:
        return MockDriver(self.handle)

    def advance(self, dt: float) -> None:
        t1 = self.now + dt
        for vm in self.vms.values():
            if vm.gone:
                continue
            self._cpu_ns[vm.name] = self._cpu_ns.get(vm.name, 0.0) + vm.cpu * dt * 1e9
            self._tx[vm.name] = self._tx.get(vm.name, 0.0) + vm.tx_bps * dt / 8
        self.now = t1
        for op in self.ops.values():
            if op.state is OpState.PENDING and op.done_at is not None and op.done_at <= t1:
                self._complete(op)

    def _complete(self, op: FakeOp) -> None:
        a = op.action
        vm = self.vms[a.vm]
        op.state = op.outcome
        if isinstance(a, model.Migrate):
            vm.migrating = False
            if op.outcome is OpState.SUCCEEDED:
                vm.gone = True
            else:
                op.detail = "migration failed; the VM keeps running at the source"
            return
        if op.outcome is not OpState.SUCCEEDED:
            return
        if isinstance(a, model.AttachVF):
            used = {v.vf_index for v in self.vms.values() if v.vf_index is not None}
            free = [i for i in range(self.vf_pool) if i not in used]
            if not free:
                op.state, op.detail = OpState.FAILED, "no free VF"
                return
            vm.nic, vm.vf_index, vm.vf_max_bps = model.NicKind.VF, free[0], a.max_bps
        elif isinstance(a, model.DetachVF):
            vm.nic, vm.vf_index, vm.vf_max_bps = model.NicKind.VIRTIO, None, None

    def inventory(self) -> model.Inventory:
        nic = model.NIC("pf0", 10e9, self.vf_pool)
        host = model.Host(self.name, 16, 64 * 2**30, nic)
        states = {
            v.name: model.VMState(
                vm=model.VM(v.name, 1, 2 * 2**30, created_seq=i),
                nic=v.nic,
                vf_index=v.vf_index,
                vf_max_bps=v.vf_max_bps,
                migrating=v.migrating,
            )
            for i, v in enumerate(self.vms.values())
            if not v.gone
        }
        return model.Inventory(host, states)

    def sample(self) -> model.HostSample:
        vms = {
            v.name: model.VMCounters(
                v.name,
                1,
                int(self._cpu_ns.get(v.name, 0)),
                0,
                0,
                int(self._tx.get(v.name, 0)),
                0,
                int(self._tx.get(v.name, 0) / 1448),
            )
            for v in self.vms.values()
            if not v.gone
        }
        busy = int(sum(self._cpu_ns.values()))
        tx = int(sum(self._tx.values()))
        return model.HostSample(
            self.name, self.now, vms, model.HostCounters(busy, 0, tx, 8 * 2**30)
        )

    def handle(self, req: DriverRequest) -> Any:
        if req.method == "now":
            return self.now
        if req.method == "capabilities":
            return Capabilities(self.name, self.vf_pool, self.vf_pool, model.NICCapabilities())
        if req.method == "inventory":
            return self.inventory()
        if req.method == "sample":
            return self.sample()
        if req.method == "submit":
            a = req.args[0]
            self.submitted.append(a)
            op_id = f"op{len(self.ops) + 1}"
            if isinstance(a, model.Migrate):
                self.vms[a.vm].migrating = True
                if self.migration == "hangs":
                    op = FakeOp(a, self.now + self.abort_after_s, OpState.FAILED)
                else:
                    fate = OpState.SUCCEEDED if self.migration == "succeeds" else OpState.FAILED
                    op = FakeOp(a, self.now + self.migration_s, fate)
            else:
                op = FakeOp(a, self.now + self.hotplug_s)
            self.ops[op_id] = op
            return op_id
        if req.method == "poll":
            op = self.ops[req.args[0]]
            return OpStatus(req.args[0], op.state, op.detail)
        raise ValueError(req.method)


@dataclass
class FakeManager:
    """Answers reports with ``directive``; records everything; can be 'down'."""

    directive: dict[str, Any] = field(default_factory=lambda: {"i": 0, "f": False})
    down: bool = False
    reports: list[dict[str, Any]] = field(default_factory=list)
    done: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path
        if path.endswith("/reports"):
            self.reports.append(json.loads(request.content))
            return httpx.Response(200, json=self.directive)
        if path.endswith("/done"):
            self.done.append((path.split("/")[3], json.loads(request.content)))
            return httpx.Response(200, json={"released": True})
        if path.endswith("/directive"):
            return httpx.Response(200, json=self.directive)
        return httpx.Response(404)
