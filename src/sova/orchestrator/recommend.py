"""Recommend mode: the manager's proposed migrations as a Watcher action plan, and execution of
an approved one through an actuator.

An operator who does not let Sova act on its own reviews proposals. On an OpenStack cloud the
natural review format is Watcher's: an action plan whose actions are ``migrate`` with
``migration_type``, ``source_node``, ``destination_node``, ``resource_id`` (the server UUID)
and ``resource_name``. :func:`to_watcher_action_plan` exports proposals in that shape (stable
UUIDs derived from the content, so re-exporting the same round yields the same plan), and
:func:`execute_approved` performs one approved action through the source host's actuator —
Nova's live migration in OpenStack mode — and returns the outcome, bounded by a timeout.

The manager side (storing proposals, the approve endpoint) belongs to the control-plane
work; these functions are what it calls.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sova.driver.base import OpState
from sova.model import Migrate
from sova.orchestrator.base import Actuator
from sova.policy.hotspot import MigrationSignal

_NS = uuid.UUID("0b5c7d52-4e0f-4a63-9d0e-5f6a736f7661")  # Sova's namespace for uuid5


@dataclass(frozen=True)
class Proposal:
    vm: str  # the server UUID on OpenStack (Watcher's resource_id)
    src: str
    dst: str
    reason: str
    vm_name: str | None = None


def proposals_from_signals(
    signals: Mapping[str, MigrationSignal], names: Mapping[str, str] | None = None
) -> list[Proposal]:
    """One proposal per flagged signal of a planning round (Alg. 2), in host order."""
    names = names or {}
    return [
        Proposal(sig.vm, src, sig.target, sig.reason, names.get(sig.vm))
        for src, sig in sorted(signals.items())
        if sig.flag and sig.target and sig.vm
    ]


def to_watcher_action_plan(
    proposals: Sequence[Proposal],
    *,
    audit_uuid: str | None = None,
    strategy_name: str = "sova_hotspot",
) -> dict[str, Any]:
    """Watcher's action-plan shape (``GET /v1/action_plans/{uuid}`` plus its actions)."""
    key = "|".join(f"{p.vm}:{p.src}>{p.dst}" for p in proposals)
    plan_uuid = str(uuid.uuid5(_NS, f"{audit_uuid}|{key}"))
    actions = [
        {
            "uuid": str(uuid.uuid5(_NS, f"{plan_uuid}|{i}|{p.vm}")),
            "action_plan_uuid": plan_uuid,
            "action_type": "migrate",
            "state": "PENDING",
            "parents": [],
            "input_parameters": {
                "migration_type": "live",
                "source_node": p.src,
                "destination_node": p.dst,
                "resource_id": p.vm,
                "resource_name": p.vm_name or p.vm,
            },
            "description": p.reason,
        }
        for i, p in enumerate(proposals)
    ]
    return {
        "uuid": plan_uuid,
        "audit_uuid": audit_uuid,
        "strategy_name": strategy_name,
        "state": "RECOMMENDED",
        "actions": actions,
        "efficacy_indicators": [],
        "global_efficacy": [],
    }


@dataclass(frozen=True)
class Execution:
    action_uuid: str
    vm: str
    src: str
    dst: str
    result: str  # "succeeded" | "failed" | "timeout"
    detail: str


def execute_approved(
    plan: Mapping[str, Any],
    action_uuid: str,
    actuator_for: Callable[[str], Actuator],
    *,
    timeout_s: float = 900.0,
    poll_s: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Execution:
    """Perform one approved ``migrate`` action of ``plan`` through the source's actuator.

    Raises ValueError naming the field when the plan or the action is not one Sova can run.
    """
    actions = {a.get("uuid"): a for a in plan.get("actions", [])}
    action = actions.get(action_uuid)
    if action is None:
        raise ValueError(f"action_uuid = {action_uuid!r}: not in action plan {plan.get('uuid')!r}")
    if action.get("action_type") != "migrate":
        raise ValueError(f"action_type = {action.get('action_type')!r}: only 'migrate' runs")
    params = action.get("input_parameters") or {}
    if params.get("migration_type") != "live":
        raise ValueError(f"migration_type = {params.get('migration_type')!r}: only 'live' runs")
    for field in ("source_node", "destination_node", "resource_id"):
        if not params.get(field):
            raise ValueError(f"input_parameters.{field}: missing")
    src, dst = str(params["source_node"]), str(params["destination_node"])
    actuator = actuator_for(src)
    # Nova knows servers by UUID; a host driver knows its domains by name.
    vm = str(params["resource_id"] if actuator.name == "openstack" else params.get("resource_name"))
    op = actuator.submit(Migrate(vm, dst))
    start = clock()
    while True:
        st = actuator.poll(op)
        if st.state is OpState.SUCCEEDED:
            return Execution(action_uuid, vm, src, dst, "succeeded", st.detail)
        if st.state is OpState.FAILED:
            return Execution(action_uuid, vm, src, dst, "failed", st.detail)
        if clock() - start > timeout_s:
            return Execution(
                action_uuid, vm, src, dst, "timeout", f"no completion after {timeout_s:g} s"
            )
        sleep(poll_s)
