"""The kinds of event the manager records and its webhooks deliver (``io.sova.<kind>``):
every audit action, decision and migration end (docs/operations.md#webhooks). Apart from
the store so the settings can check an endpoint's ``kinds`` without loading it."""

from __future__ import annotations

import re

# An audit action (operator, fates, fleet, ...) -> the event kind.
# (``store restore`` is written by ``sova store restore`` with no manager running: no event.)
AUDIT_KINDS = {
    "propose": "plan.proposed",
    "approve": "plan.approved",
    "reject": "plan.rejected",
    "executed": "plan.executed",
    "failed": "plan.failed",
    "expire": "plan.expired",
    "supersede": "plan.superseded",
    "fence": "fence.set",
    "unfence": "fence.cleared",
    "mode": "mode.set",
    "forget": "host.forgotten",
    "withdraw": "directive.withdrawn",
    "refused": "directive.refused",
}
# The ends a migration's lease has (the agent's MigrationDone results; expired, withdrawn:
# the manager's, ledger.py and withdraw.py).
MIGRATION_RESULTS = ("succeeded", "failed", "timeout", "declined", "expired", "withdrawn")
EVENT_KINDS: tuple[str, ...] = (
    *AUDIT_KINDS.values(),
    "decision",
    "migration.started",
    *(f"migration.{r}" for r in MIGRATION_RESULTS),
    "leader.elected",
)


def audit_kind(action: str) -> str:
    """``fence:host`` -> ``fence.set``; an action this table does not know keeps its name
    under ``audit.`` (a new audit action is still delivered, to endpoints taking all kinds)."""
    base = action.split(":", 1)[0]
    return AUDIT_KINDS.get(base) or "audit." + re.sub(r"[^a-z0-9]+", "_", base.lower())


def migration_kind(result: str) -> str:
    return "migration." + re.sub(r"[^a-z0-9]+", "_", result.lower())
