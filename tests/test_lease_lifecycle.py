"""The decision core owns every lease's life: each way a lease ends is a core method that
says why, restarts the windows only when the VM may have moved, and forgets the lease
entirely (orphan mark included); nothing outside ``sova/manager/`` writes that state."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from sova.manager.decisions.core import EndReason, Lease, ManagerCore
from sova.policy.hotspot import HotspotDetector, Utilisation, VMLoad

SRC = Path(__file__).resolve().parents[1] / "src" / "sova"
LEASE_STATE = {"leases", "_skip", "orphaned"}
CORE_NAMES = {"core", "manager"}  # what the daemon and the simulator call their ManagerCore
MUTATORS = {"pop", "popitem", "clear", "update", "setdefault", "add", "discard", "remove"}


def writes_to_lease_state(source: str) -> list[int]:
    """Lines of ``source`` that assign, delete or mutate a core's lease state, whatever
    holds the core (``core.leases = ...``, ``del self.st.core.leases[vm]``,
    ``self.manager.orphaned.add(...)``...)."""

    def named(node: ast.AST) -> bool:
        while isinstance(node, ast.Subscript):
            node = node.value
        if not (isinstance(node, ast.Attribute) and node.attr in LEASE_STATE):
            return False
        owner = node.value
        name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        return name in CORE_NAMES

    lines = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
        ):
            targets = [node.func.value]
        lines += [node.lineno for t in targets if named(t)]
    return sorted(lines)


def test_the_scan_finds_the_writes_it_is_for() -> None:
    # The shapes the daemon used before the lifecycle moved into the core (issue 19).
    before = """
self.core.leases.pop(dr.vm, None)
self.core.leases[plan.vm] = lease
self.core._skip[host] = 1
self.core.leases = {r.vm: r for r in rows}
self.core.orphaned |= {vm}
del core.leases[vm]
x = self.core.leases.get(vm)
"""
    assert writes_to_lease_state(before) == [2, 3, 4, 5, 6, 7]


def test_nothing_outside_the_manager_writes_the_cores_lease_state() -> None:
    found = {
        str(p.relative_to(SRC)): lines
        for p in sorted(SRC.rglob("*.py"))
        if "manager" not in p.relative_to(SRC).parts[:1]
        and (lines := writes_to_lease_state(p.read_text()))
    }
    assert found == {}, f"use ManagerCore's lease methods instead: {found}"


# --------------------------------------------------------------------------- the ends


def _core() -> ManagerCore:
    core = ManagerCore(detector=HotspotDetector(1, 2, 0.75), close_on_arrival=False)
    for h in ("src", "dst"):
        core.ingest(h, Utilisation(0.1, 0.1, 0.1), {}, at=0.0)
    core.restore([Lease("vm", "src", "dst", 0.0, 7)])
    core.source_restarted("src")  # orphaned: every end must forget that too
    return core


@pytest.mark.parametrize(
    ("end", "why", "moved"),
    [
        (lambda c: c.release("vm"), EndReason.RELEASED, True),
        (lambda c: c.release("vm", ran=False), EndReason.DECLINED, False),
        (lambda c: c.withdraw("vm", 7), EndReason.WITHDRAWN, False),
        (lambda c: c.supersede("vm", 7), EndReason.SUPERSEDED, False),
        (lambda c: c.revoke([Lease("vm", "src", "dst", 0.0, 7)])[0], EndReason.UNDONE, False),
        # The VM shows up on the target (allowed: its source restarted).
        (
            lambda c: c.ingest(
                "dst",
                Utilisation(0.1, 0.1, 0.1),
                {"vm": VMLoad(Utilisation(0.1, 0.1, 0.1), 1 << 30)},
                at=1.0,
            )[0],
            EndReason.ARRIVED,
            True,
        ),
        (lambda c: c.plan(2000.0).closed[0], EndReason.TIMEOUT, False),  # 2000 > 900 s
    ],
    ids=["released", "declined", "withdrawn", "superseded", "undone", "arrived", "timeout"],
)
def test_every_end_says_why_and_forgets_the_lease(end, why: EndReason, moved: bool) -> None:  # type: ignore[no-untyped-def]
    core = _core()
    ended = end(core)
    assert ended.why == why and ended.lease.id == 7 and ended.moved == moved
    assert core.leases == {} and core.orphaned == set()
    # Windows restart exactly when the VM may have moved (its hosts' loads changed).
    assert (len(core.history["src"]) == 0) == moved


def test_an_end_for_another_lease_id_leaves_the_newer_lease() -> None:
    core = _core()
    assert core.withdraw("vm", 6) is None and core.supersede("vm", 6) is None
    assert core.release("vm", lease_id=6) is None
    assert set(core.leases) == {"vm"}


def test_a_stale_source_ends_its_lease_and_restarts_both_windows() -> None:
    core = _core()
    core.stale_after_s = 30.0
    core.ingest("dst", Utilisation(0.1, 0.1, 0.1), {}, at=100.0)  # src silent since t = 0
    (end,) = core.plan(100.0).closed
    assert end.why == EndReason.STALE and end.moved and core.orphaned == set()


def test_a_batch_of_reports_is_each_report_in_turn() -> None:
    # ingest_many (a simulated world's every host at once) against ingest one by one: the
    # same closed leases in the same order and the same state, across an arrival that
    # closes a lease and restarts both windows (src's next report is dropped), a host back
    # from a silence (its window cleared), capacities and a mutable VM mapping (copied)
    from sova.policy.hotspot import HostCapacity

    u = Utilisation
    cap = HostCapacity(32.0, 2.0**38, 1e10)
    vm = {"vm": VMLoad(u(0.1, 0.1, 0.1), 1 << 30)}
    rounds = [
        (5.0, [("src", u(0.2, 0.1, 0.3), {}, cap), ("dst", u(0.4, 0.2, 0.1), {}, None)]),
        # vm arrives on dst: its lease ends and dst's and src's windows restart
        (10.0, [("dst", u(0.5, 0.2, 0.1), vm, cap), ("src", u(0.1, 0.1, 0.1), {}, cap)]),
        (20.0, [("src", u(0.3, 0.1, 0.1), {}, None), ("other", u(0.9, 0.9, 0.9), {}, cap)]),
        (200.0, [("dst", u(0.6, 0.2, 0.1), dict(vm), None)]),  # dst silent for 190 s
    ]

    def state(c: ManagerCore) -> tuple[object, ...]:
        hist = {h: list(w) for h, w in c.history.items()}
        return hist, dict(c.vms), dict(c.capacity), dict(c.seen), dict(c._skip), c.leases

    one, many, arrays = _core(), _core(), _core()
    for c in (one, many, arrays):
        c.stale_after_s = 100.0
    closed = []
    for at, reports in rounds:
        got = many.ingest_many(reports, at=at)
        want = [
            e for h, load, vms, cp in reports for e in one.ingest(h, load, vms, at=at, capacity=cp)
        ]
        # and the batch intake, the loads as one array (a simulated world's)
        hosts, loads, vmss, caps = zip(*reports, strict=True)
        util = np.array([u.as_tuple() for u in loads])
        assert arrays.ingest_arrays(hosts, util, vmss, caps, at=at) == want
        assert got == want
        assert state(many) == state(one) == state(arrays)
        closed += got
    # the cases happened: the arrival closed the lease, dst's window restarted after its
    # silence (one load), src's report after the arrival was dropped, VMs copied
    assert [e.why for e in closed] == [EndReason.ARRIVED]
    assert len(many.history["dst"]) == 1 and len(many.history["src"]) == 1
    assert many.vms["dst"] == vm and many.vms["dst"] is not vm
