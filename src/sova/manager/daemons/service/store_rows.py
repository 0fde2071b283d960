"""The knowledge store's records: what the manager writes and what a restart reads back.

Kept apart from :mod:`sova.manager.daemons.service.store` (the SQLAlchemy tables and queries) so that the
manager's parts that only build or read records do not carry the database code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ReportRow:
    host: str
    seq: int
    agent_t: float
    received_s: float
    util: tuple[float, float, float]
    vms: Mapping[str, Any]  # name -> [cpu, mem, net, mib, migrating]
    capacity: tuple[float, float, float] | None = None  # cores, MiB, Mbit/s
    boot: str = ""
    # (Utilisation, name -> VMLoad): util and vms decoded by a warm standby ahead of a takeover
    loads: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class DecisionRow:
    id: int
    time_s: float
    host: str
    flag: bool
    target: str | None
    vm: str | None
    reason: str
    hot_resources: tuple[str, ...]
    inputs: Mapping[str, Any]


@dataclass(frozen=True)
class LeaseRow:
    vm: str
    src: str
    dst: str
    since_s: float
    decision_id: int


@dataclass(frozen=True)
class DirectiveRow:
    host: str
    id: int
    flag: bool
    target: str | None
    vm: str | None
    issued_s: float
    acked: bool


@dataclass(frozen=True)
class MigrationEnd:
    id: int
    ended_s: float
    result: str
    detail: str


@dataclass(frozen=True)
class PlanRow:
    """A proposed migration (recommend mode) and what became of it."""

    id: int  # the id of the decision that proposed it
    created_s: float
    expires_s: float
    host: str  # source
    vm: str
    dst: str
    state: str  # proposed | approved | rejected | expired | superseded | failed
    reason: str
    inputs: Mapping[str, Any]
    expected: Mapping[str, Any]
    decided_by: str | None = None
    decided_s: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class FenceRow:
    kind: str  # maintenance (host) | pin (VM) | vf-freeze-host | vf-freeze-vm
    name: str
    set_by: str
    since_s: float
    reason: str = ""
    until_s: float | None = None  # lifted by the first round at or after it; None: until lifted


@dataclass(frozen=True)
class ModeRow:
    scope: str  # "*" = the cluster, else a host
    mode: str
    set_by: str
    since_s: float


@dataclass(frozen=True)
class AuditRow:
    time_s: float
    who: str
    action: str
    subject: str
    detail: str = ""
    id: int = 0  # assigned by the store


@dataclass
class RoundWrite:
    """Everything one planning round (or one agent message) changes, written atomically."""

    decisions: list[DecisionRow] = field(default_factory=list)
    new_leases: list[LeaseRow] = field(default_factory=list)
    dropped_leases: list[str] = field(default_factory=list)
    directives: list[DirectiveRow] = field(default_factory=list)
    acked: list[tuple[str, int]] = field(default_factory=list)  # (host, directive id)
    migration_ends: list[MigrationEnd] = field(default_factory=list)
    plans: list[PlanRow] = field(default_factory=list)  # inserted or replaced by id
    fences_set: list[FenceRow] = field(default_factory=list)
    fences_cleared: list[tuple[str, str]] = field(default_factory=list)  # (kind, name)
    modes_set: list[ModeRow] = field(default_factory=list)
    modes_cleared: list[str] = field(default_factory=list)  # scopes
    audit: list[AuditRow] = field(default_factory=list)

    def empty(self) -> bool:
        return not (
            self.decisions
            or self.new_leases
            or self.dropped_leases
            or self.directives
            or self.acked
            or self.migration_ends
            or self.plans
            or self.fences_set
            or self.fences_cleared
            or self.modes_set
            or self.modes_cleared
            or self.audit
        )


@dataclass(frozen=True)
class StoredState:
    """What a restarted manager needs to continue where it stopped."""

    windows: Mapping[str, list[ReportRow]]  # host -> last n reports, oldest first
    leases: list[LeaseRow]
    directives: list[DirectiveRow]
    next_id: int  # next decision id (also the directive and migration id)
    plans: list[PlanRow] = field(default_factory=list)  # those still proposed
    fences: list[FenceRow] = field(default_factory=list)
    modes: list[ModeRow] = field(default_factory=list)
    # host -> its agents' earlier boot ids, oldest first (within the report retention): a
    # report of one of those after a manager restart is still a replay
    past_boots: Mapping[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class LogSlice:
    """Which rows of a log (plans, audit, decisions) an operator reads.

    Ids grow with time, so ``newest_first`` reads the highest ids below ``before`` (the
    runbooks' "the last five" is ``limit=5`` newest first); the time bounds are the rows'
    own times (epoch seconds, inclusive). ``host``/``vm``: a plan's source or target / VM, a
    decision's host / VM, an audit entry's subject; ``kind``: a plan's state, an audit
    entry's action (``fence`` also matches ``fence:pin``...).
    """

    after: int = 0
    limit: int = 100
    before: int | None = None
    since_s: float | None = None
    until_s: float | None = None
    newest_first: bool = False
    host: str | None = None
    vm: str | None = None
    kind: str | None = None
