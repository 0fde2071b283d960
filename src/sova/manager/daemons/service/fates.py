"""The fate of an approved plan carried out through the directive path.

An operator's approval opens a lease whose id is the plan's migration (its directive); the
lease's end — the source agent's report, a timeout, a silent source — is the plan's end:
``executed`` if the migration succeeded, ``failed`` otherwise, with why, audited as
``sova`` like expiry and supersession. (With ``orchestrator = "openstack"`` the manager
runs the migration itself and records the fate where it runs it.)
"""

from __future__ import annotations

from dataclasses import replace

from sova.manager.daemons.service.store import AuditRow, LeaseRow, PlanRow, RoundWrite, Store


class PlanFates:
    """Approved plans by the id of the migration that carries them out."""

    def __init__(self) -> None:
        self.approved: dict[int, PlanRow] = {}

    def track(self, lease_id: int, plan: PlanRow) -> None:
        self.approved[lease_id] = plan

    def restore(self, store: Store, leases: list[LeaseRow]) -> None:
        """After a restart: the approved plans whose migrations are still open (the
        approval's decision row names its plan)."""
        self.approved.clear()
        for lease in leases:
            rows = store.decisions(after=lease.decision_id - 1, limit=1)
            if not rows or rows[0].id != lease.decision_id:
                continue
            plan_id = rows[0].inputs.get("plan")
            plan = store.plan(int(plan_id)) if isinstance(plan_id, int) else None
            if plan is not None and plan.state == "approved":
                self.approved[lease.decision_id] = plan

    def ended(self, w: RoundWrite, lease_id: int, now: float, result: str, detail: str) -> None:
        """Migration ``lease_id`` ended with ``result``: its plan's fate goes into ``w``."""
        plan = self.approved.pop(lease_id, None)
        if plan is None:
            return
        end = replace(
            plan,
            state="executed" if result == "succeeded" else "failed",
            detail=f"{plan.detail}; {result}" + (f": {detail}" if detail else ""),
        )
        w.plans.append(end)
        w.audit.append(AuditRow(now, "sova", end.state, f"plan {plan.id}", end.detail))
