"""The operator's history in the store: plans, decisions, the audit log and migrations,
read a page at a time (:class:`LogSlice`). A mixin of :class:`sova.manager.daemons.service.store.Store`,
apart from the reads and writes a planning round needs."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from sova.manager.daemons.service.store_rows import AuditRow, DecisionRow, LogSlice, PlanRow
from sova.manager.daemons.service.store_schema import audit, decisions, migrations, plans


class StoreLogs:
    engine: sa.Engine

    def plans(self, after: int = 0, limit: int = 100, state: str | None = None) -> list[PlanRow]:
        return self.plan_slice(LogSlice(after, limit, kind=state))

    def plan_slice(self, sl: LogSlice) -> list[PlanRow]:
        q = sa.select(plans)
        if sl.kind is not None:
            q = q.where(plans.c.state == sl.kind)
        if sl.host is not None:
            q = q.where(sa.or_(plans.c.host == sl.host, plans.c.dst == sl.host))
        if sl.vm is not None:
            q = q.where(plans.c.vm == sl.vm)
        with self.engine.connect() as conn:
            rows = conn.execute(_sliced(q, plans.c.id, plans.c.created_s, sl)).mappings()
            return [plan_row(r) for r in rows]

    def plan(self, plan_id: int) -> PlanRow | None:
        with self.engine.connect() as conn:
            r = conn.execute(sa.select(plans).where(plans.c.id == plan_id)).mappings().first()
        return plan_row(r) if r is not None else None

    def audit_slice(self, sl: LogSlice) -> list[AuditRow]:
        q = sa.select(audit)
        names = [n for n in (sl.host, sl.vm) if n is not None]
        if names:
            q = q.where(audit.c.subject.in_(names))
        if sl.kind is not None:
            # "fence" is every fence:<kind> action too
            q = q.where(sa.or_(audit.c.action == sl.kind, audit.c.action.startswith(sl.kind + ":")))
        with self.engine.connect() as conn:
            return [
                AuditRow(r.time_s, r.who, r.action, r.subject, r.detail, r.id)
                for r in conn.execute(_sliced(q, audit.c.id, audit.c.time_s, sl))
            ]

    def decisions(
        self, after: int = 0, limit: int = 100, host: str | None = None
    ) -> list[DecisionRow]:
        return self.decision_slice(LogSlice(after, limit, host=host))

    def decision_slice(self, sl: LogSlice) -> list[DecisionRow]:
        q = sa.select(decisions)
        if sl.host is not None:
            q = q.where(decisions.c.host == sl.host)
        if sl.vm is not None:
            q = q.where(decisions.c.vm == sl.vm)
        with self.engine.connect() as conn:
            return [
                DecisionRow(
                    r.id,
                    r.time_s,
                    r.host,
                    bool(r.flag),
                    r.target,
                    r.vm,
                    r.reason,
                    tuple(r.hot_resources),
                    r.inputs,
                )
                for r in conn.execute(_sliced(q, decisions.c.id, decisions.c.time_s, sl))
            ]

    def migration_rows(self, vm: str | None = None) -> list[dict[str, Any]]:
        q = sa.select(migrations).order_by(migrations.c.id)
        if vm is not None:
            q = q.where(migrations.c.vm == vm)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]


def plan_row(r: Any) -> PlanRow:  # a RowMapping
    return PlanRow(
        int(r["id"]),
        float(r["created_s"]),
        float(r["expires_s"]),
        r["host"],
        r["vm"],
        r["dst"],
        r["state"],
        r["reason"],
        r["inputs"],
        r["expected"],
        r["decided_by"],
        r["decided_s"],
        r["detail"],
    )


def _sliced(q: Any, id_col: Any, time_col: Any, sl: LogSlice) -> Any:
    """``q`` bounded by the slice's ids and times, ordered and limited as it asks."""
    q = q.where(id_col > sl.after)
    if sl.before is not None:
        q = q.where(id_col < sl.before)
    if sl.since_s is not None:
        q = q.where(time_col >= sl.since_s)
    if sl.until_s is not None:
        q = q.where(time_col <= sl.until_s)
    return q.order_by(id_col.desc() if sl.newest_first else id_col).limit(sl.limit)
