"""Operator control of the manager: modes, fences and proposed plans (docs/operations.md).

What an operator of a production controller expects to hold in their hands, kept apart from
the planning loop that it steers:

* **modes** — ``autonomic`` (decisions are carried out) or ``recommend`` (decisions become
  proposed plans an operator approves or rejects), for the whole cluster and per host. The
  source host's mode decides, since the source is where a migration starts;
* **fences** — a host in ``maintenance`` is neither source nor target; a ``pin``\\ ned VM never
  moves; ``vf-freeze`` on a host or a VM keeps its VF assignment as it is (the agent neither
  attaches nor detaches one);
* **plans** — a proposal has an id (the decision that proposed it), the inputs, the action, the
  expected effect and an expiry; at most one is open per source host: an identical proposal
  in a later round keeps the open one, a different one supersedes it.

This module only holds and derives state; the service persists every change (with an audit
row naming who and when) before it takes effect, and restores it on start-up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sova.manager.daemons.service.store import FenceRow, ModeRow, PlanRow
from sova.policy.hotspot import Utilisation

Mode = Literal["autonomic", "recommend"]
MODES: tuple[Mode, ...] = ("autonomic", "recommend")
CLUSTER = "*"

# kind -> what it names; the API's paths and the CLI's words.
FENCE_KINDS: Mapping[str, str] = {
    "maintenance": "host",
    "pin": "vm",
    "vf-freeze-host": "host",
    "vf-freeze-vm": "vm",
    "drain": "host",  # in maintenance, and its VMs evacuated (sova.manager.decisions.fleet)
}

PLAN_STATES = ("proposed", "approved", "executed", "rejected", "expired", "superseded", "failed")


class PlanConflict(ValueError):
    """A plan that cannot be approved or rejected now; the message says why (HTTP 409)."""


class PlanNotFound(LookupError):
    """No plan has this id (HTTP 404)."""


@dataclass
class OperatorControls:
    """Modes, fences and open plans, as the store has them."""

    default_mode: Mode = "autonomic"  # the config file's; a stored cluster mode overrides it
    default_host_modes: dict[str, Mode] = field(default_factory=dict)  # the config file's
    modes: dict[str, ModeRow] = field(default_factory=dict)  # scope -> row
    fences: dict[tuple[str, str], FenceRow] = field(default_factory=dict)  # (kind, name)
    open_plans: dict[int, PlanRow] = field(default_factory=dict)  # id -> proposed plan

    @classmethod
    def restore(
        cls,
        default_mode: Mode,
        default_host_modes: Mapping[str, Mode],
        modes: Iterable[ModeRow],
        fences: Iterable[FenceRow],
        plans: Iterable[PlanRow],
    ) -> OperatorControls:
        return cls(
            default_mode,
            dict(default_host_modes),
            {m.scope: m for m in modes},
            {(f.kind, f.name): f for f in fences},
            {p.id: p for p in plans if p.state == "proposed"},
        )

    # ------------------------------------------------------------------ modes

    @property
    def cluster_mode(self) -> Mode:
        row = self.modes.get(CLUSTER)
        return _mode(row.mode) if row is not None else self.default_mode

    def mode_of(self, host: str) -> Mode:
        row = self.modes.get(host)
        if row is not None:
            return _mode(row.mode)
        return self.default_host_modes.get(host, self.cluster_mode)

    def recommend_hosts(self, hosts: Iterable[str]) -> set[str]:
        return {h for h in hosts if self.mode_of(h) == "recommend"}

    # ------------------------------------------------------------------ fences

    def names(self, kind: str) -> set[str]:
        return {name for k, name in self.fences if k == kind}

    def maintenance(self) -> dict[str, str]:
        """Host -> why (who set it, and their reason)."""
        out = {
            f.name: f"set by {f.set_by}" + (f": {f.reason}" if f.reason else "")
            for (k, _), f in sorted(self.fences.items())
            if k == "maintenance"
        }
        for (k, _), f in sorted(self.fences.items()):
            if k == "drain":  # a drained host is in maintenance too
                out.setdefault(
                    f.name, f"draining, set by {f.set_by}" + (f": {f.reason}" if f.reason else "")
                )
        return out

    # ------------------------------------------------------------------ plans

    def open_for(self, host: str) -> PlanRow | None:
        return next((p for p in self.open_plans.values() if p.host == host), None)

    def propose(self, new: PlanRow, now: float) -> tuple[PlanRow | None, list[PlanRow]]:
        """Record a proposal; returns (the new plan or None if an identical one is open,
        the plans it superseded)."""
        old = self.open_for(new.host)
        if old is not None and (old.vm, old.dst) == (new.vm, new.dst) and old.expires_s > now:
            return None, []
        superseded = []
        if old is not None:
            del self.open_plans[old.id]
            superseded.append(
                replace(
                    old,
                    state="superseded",
                    decided_by="sova",
                    decided_s=now,
                    detail=f"superseded by plan {new.id}",
                )
            )
        self.open_plans[new.id] = new
        return new, superseded

    def expire(self, now: float) -> list[PlanRow]:
        out = []
        for pid, p in sorted(self.open_plans.items()):
            if now >= p.expires_s:
                del self.open_plans[pid]
                out.append(
                    replace(
                        p,
                        state="expired",
                        decided_by="sova",
                        decided_s=now,
                        detail="not approved before it expired",
                    )
                )
        return out

    def close(self, plan_id: int) -> PlanRow:
        p = self.open_plans.pop(plan_id, None)
        if p is None:
            raise PlanConflict(f"plan {plan_id} is not open")
        return p


def _mode(value: str) -> Mode:
    return "recommend" if value == "recommend" else "autonomic"


def expected_effect(
    src_util: tuple[float, float, float],
    dst_util: tuple[float, float, float],
    vm_util: Utilisation,
) -> dict[str, Any]:
    """What the move should do to both hosts' utilisation, from the last reports.

    Shares of a host's capacity; the VM's share is its source's, so the target's figure
    assumes hosts of equal capacity (as the cold-spot screening does).
    """
    v = vm_util.as_tuple()
    names = ("cpu", "mem", "net")

    def rnd(xs: Iterable[float]) -> dict[str, float]:
        return {n: round(x, 4) for n, x in zip(names, xs, strict=True)}

    return {
        "src": {
            "before": rnd(src_util),
            "after": rnd(max(0.0, a - b) for a, b in zip(src_util, v, strict=True)),
        },
        "dst": {
            "before": rnd(dst_util),
            "after": rnd(a + b for a, b in zip(dst_util, v, strict=True)),
        },
        "vm": rnd(v),
        "assumes": "hosts of equal capacity (shares of the source's capacity)",
    }
