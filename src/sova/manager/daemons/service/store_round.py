"""How a planning round's rows land in the store's tables (:meth:`Store.write_round`).

One function per kind of row, all inside the caller's one transaction: a round is
written whole or not at all, so a restarted manager never finds a lease without its
migration row or a directive without the decision behind it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from sova.manager.daemons.service.store_rows import PlanRow, RoundWrite
from sova.manager.daemons.service.store_schema import (
    audit,
    decisions,
    directives,
    fences,
    leases,
    migrations,
    modes,
    plans,
)


def write_round_rows(conn: sa.Connection, w: RoundWrite) -> set[int]:
    """Every row of ``w``; returns the ids of the migrations this write closed (one
    already closed is not closed again, and reports no event)."""
    _decisions(conn, w)
    _leases(conn, w)
    _directives(conn, w)
    ended = _migration_ends(conn, w)
    for p in w.plans:
        conn.execute(plans.delete().where(plans.c.id == p.id))
        conn.execute(plans.insert().values(**plan_values(p)))
    _fences(conn, w)
    _modes(conn, w)
    _audit(conn, w)
    return ended


def _decisions(conn: sa.Connection, w: RoundWrite) -> None:
    if not w.decisions:
        return
    conn.execute(
        decisions.insert(),
        [
            {
                "id": d.id,
                "time_s": d.time_s,
                "host": d.host,
                "flag": d.flag,
                "target": d.target,
                "vm": d.vm,
                "reason": d.reason,
                "hot_resources": list(d.hot_resources),
                "inputs": dict(d.inputs),
            }
            for d in w.decisions
        ],
    )


def _leases(conn: sa.Connection, w: RoundWrite) -> None:
    """Dropped leases, then new ones, each with its migration row (open: "signalled")."""
    for vm in w.dropped_leases:
        conn.execute(leases.delete().where(leases.c.vm == vm))
    for lease in w.new_leases:
        conn.execute(leases.delete().where(leases.c.vm == lease.vm))
        conn.execute(
            leases.insert().values(
                vm=lease.vm,
                src=lease.src,
                dst=lease.dst,
                since_s=lease.since_s,
                decision_id=lease.decision_id,
            )
        )
        conn.execute(
            migrations.insert().values(
                id=lease.decision_id,
                vm=lease.vm,
                src=lease.src,
                dst=lease.dst,
                started_s=lease.since_s,
                ended_s=None,
                result="signalled",
                detail="",
            )
        )


def _directives(conn: sa.Connection, w: RoundWrite) -> None:
    """One directive per host (a new one replaces the old), then the acknowledgements."""
    for d in w.directives:
        conn.execute(directives.delete().where(directives.c.host == d.host))
        conn.execute(
            directives.insert().values(
                host=d.host,
                id=d.id,
                flag=d.flag,
                target=d.target,
                vm=d.vm,
                issued_s=d.issued_s,
                acked=d.acked,
            )
        )
    for host, did in w.acked:
        conn.execute(
            directives.update()
            .where(directives.c.host == host, directives.c.id <= did)
            .values(acked=True)
        )


def _migration_ends(conn: sa.Connection, w: RoundWrite) -> set[int]:
    ended: set[int] = set()
    for m in w.migration_ends:
        done = conn.execute(
            migrations.update()
            .where(migrations.c.id == m.id, migrations.c.ended_s.is_(None))
            .values(ended_s=m.ended_s, result=m.result, detail=m.detail[:500])
        )
        if done.rowcount:
            ended.add(m.id)
    return ended


def _fences(conn: sa.Connection, w: RoundWrite) -> None:
    for kind, name in w.fences_cleared:
        conn.execute(fences.delete().where(fences.c.kind == kind, fences.c.name == name))
    for f in w.fences_set:
        conn.execute(fences.delete().where(fences.c.kind == f.kind, fences.c.name == f.name))
        conn.execute(
            fences.insert().values(
                kind=f.kind,
                name=f.name,
                set_by=f.set_by,
                since_s=f.since_s,
                reason=f.reason[:500],
                until_s=f.until_s,
            )
        )


def _modes(conn: sa.Connection, w: RoundWrite) -> None:
    for scope in w.modes_cleared:
        conn.execute(modes.delete().where(modes.c.scope == scope))
    for m in w.modes_set:
        conn.execute(modes.delete().where(modes.c.scope == m.scope))
        conn.execute(
            modes.insert().values(scope=m.scope, mode=m.mode, set_by=m.set_by, since_s=m.since_s)
        )


def _audit(conn: sa.Connection, w: RoundWrite) -> None:
    if not w.audit:
        return
    conn.execute(
        audit.insert(),
        [
            {
                "time_s": a.time_s,
                "who": a.who,
                "action": a.action,
                "subject": a.subject[:160],
                "detail": a.detail[:2000],
            }
            for a in w.audit
        ],
    )


def plan_values(p: PlanRow) -> dict[str, Any]:
    """A plan as the ``plans`` table stores it (its free text cut to the column's use)."""
    return {
        "id": p.id,
        "created_s": p.created_s,
        "expires_s": p.expires_s,
        "host": p.host,
        "vm": p.vm,
        "dst": p.dst,
        "state": p.state,
        "reason": p.reason[:4000],
        "inputs": dict(p.inputs),
        "expected": dict(p.expected),
        "decided_by": p.decided_by,
        "decided_s": p.decided_s,
        "detail": p.detail[:2000],
    }
