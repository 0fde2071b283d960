"""The store's event outbox: what the manager recorded, kept for the webhooks to deliver.

Every event is written in the same transaction as the audit row, decision or migration it
reports (:meth:`sova.manager.daemons.service.store.Store.write_round`), so an event exists exactly when what
it reports does — a crash cannot lose one or invent one. Its ``uid``, random and stored
with it, is the event's id: a receiver deduplicates by it. Deliveries are marked per endpoint in the store, fenced
by the leader's epoch like every write, so a new leader continues where the old one
stopped and a deposed one cannot mark (docs/operations.md#webhooks).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from sova.manager.daemons.event_kinds import audit_kind, migration_kind
from sova.manager.daemons.service.store_rows import RoundWrite

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
outbox_metadata = sa.MetaData()

outbox = sa.Table(
    "outbox",
    outbox_metadata,
    sa.Column("id", _ID, primary_key=True, autoincrement=True),
    # The event's id for receivers: random, because a restored backup hands row ids out
    # again and a receiver deduplicating by id would drop the new event.
    sa.Column("uid", sa.String(32), nullable=False, unique=True),
    # Set for an event that may be recorded twice (a takeover retried): unique.
    sa.Column("key", sa.String(120), nullable=True, unique=True),
    sa.Column("kind", sa.String(48), nullable=False),
    sa.Column("time_s", sa.Float(), nullable=False),
    sa.Column("subject", sa.String(160), nullable=False),
    sa.Column("data", sa.JSON(), nullable=False),
    sa.Index("ix_outbox_time", "time_s"),
)
webhook_deliveries = sa.Table(
    "webhook_deliveries",
    outbox_metadata,
    sa.Column("endpoint", sa.String(64), primary_key=True),
    sa.Column("event_id", sa.BigInteger(), primary_key=True),
    sa.Column("attempts", sa.Integer(), nullable=False),
    sa.Column("next_s", sa.Float(), nullable=False),
    sa.Column("delivered_s", sa.Float(), nullable=True),
    sa.Column("given_up", sa.Boolean(), nullable=False),
    sa.Column("error", sa.Text(), nullable=False),
    sa.Index("ix_webhook_pending", "endpoint", "delivered_s", "given_up", "event_id"),
)


def event_rows(
    w: RoundWrite, now: float, ended: Collection[int] | None = None
) -> list[dict[str, Any]]:
    """The events one store write records, stamped ``now`` (the wall clock: the manager's
    own clock may be an agent's simulated one). ``ended``: the migrations whose end this
    write recorded (an end written before stays as it was, and is not reported again)."""
    rows: list[dict[str, Any]] = []
    for d in w.decisions:
        rows.append(
            _row(
                "decision",
                now,
                f"decision {d.id}",
                {
                    "decision": d.id,
                    "host": d.host,
                    "migrate": d.flag,
                    "vm": d.vm,
                    "target": d.target,
                    "reason": d.reason,
                    "hot_resources": list(d.hot_resources),
                },
            )
        )
    for lease in w.new_leases:
        rows.append(
            _row(
                "migration.started",
                now,
                f"migration {lease.decision_id}",
                {
                    "migration": lease.decision_id,
                    "vm": lease.vm,
                    "src": lease.src,
                    "dst": lease.dst,
                },
            )
        )
    for m in w.migration_ends:
        if ended is not None and m.id not in ended:
            continue
        rows.append(
            _row(
                migration_kind(m.result),
                now,
                f"migration {m.id}",
                {"migration": m.id, "result": m.result, "detail": m.detail[:500]},
            )
        )
    for a in w.audit:
        _, _, qualifier = a.action.partition(":")
        data: dict[str, Any] = {"who": a.who, "action": a.action, "detail": a.detail[:2000]}
        if qualifier:
            data["of"] = qualifier  # a fence's kind: host, vm, ...
        rows.append(_row(audit_kind(a.action), now, a.subject, data))
    return rows


def _row(kind: str, time_s: float, subject: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "uid": uuid.uuid4().hex,
        "key": None,
        "kind": kind,
        "time_s": time_s,
        "subject": subject[:160],
        "data": data,
    }


@dataclass(frozen=True)
class Event:
    id: int  # the outbox row's: the delivery marks' key
    uid: str  # the CloudEvent's id
    kind: str
    time_s: float
    subject: str
    data: dict[str, Any]
    attempts: int  # earlier attempts for the endpoint asking


@dataclass(frozen=True)
class DeliveryRow:
    endpoint: str
    event_id: int
    kind: str
    attempts: int
    delivered_s: float | None
    given_up: bool
    error: str


class OutboxStore:
    """A mixin of :class:`sova.manager.daemons.service.store.Store`: the outbox's reads and marks."""

    engine: sa.Engine
    _lock: threading.Lock
    fence: int | None
    # Set by a manager with webhooks: endpoint -> the kinds it takes (empty: all). A store
    # without endpoints records no events.
    outbox_endpoints: Mapping[str, frozenset[str]] = MappingProxyType({})

    if TYPE_CHECKING:

        def check_fence(self, conn: sa.Connection, epoch: int) -> None: ...  # StoreAdmin's

    def record_events(self, conn: sa.Connection, w: RoundWrite, ended: Collection[int]) -> None:
        """In ``write_round``'s transaction."""
        if self.outbox_endpoints:
            rows = event_rows(w, time.time(), ended)
            if rows:
                self._insert_events(conn, rows)

    def _insert_events(self, conn: sa.Connection, rows: list[dict[str, Any]]) -> None:
        """The events and, for each endpoint taking its kind, its pending delivery: a pass
        then reads an endpoint's pending rows by index instead of every recent event."""
        ids = (
            conn.execute(outbox.insert().returning(outbox.c.id, sort_by_parameter_order=True), rows)
            .scalars()
            .all()
        )
        marks = [
            {
                "endpoint": name,
                "event_id": event_id,
                "attempts": 0,
                "next_s": 0.0,
                "delivered_s": None,
                "given_up": False,
                "error": "",
            }
            for event_id, row in zip(ids, rows, strict=True)
            for name, kinds in self.outbox_endpoints.items()
            if not kinds or row["kind"] in kinds
        ]
        if marks:
            conn.execute(webhook_deliveries.insert(), marks)

    def add_event(
        self, kind: str, time_s: float, subject: str, data: dict[str, Any], key: str
    ) -> bool:
        """An event not tied to a round's write (a takeover); ``key`` makes it once only.
        Returns whether it was new."""
        with self._lock, self.engine.begin() as conn:
            if self.fence is not None:
                self.check_fence(conn, self.fence)
            if conn.execute(sa.select(outbox.c.id).where(outbox.c.key == key)).first():
                return False
            self._insert_events(conn, [_row(kind, time_s, subject, data) | {"key": key}])
            return True

    def pending_events(self, endpoint: str, since_s: float, now: float, limit: int) -> list[Event]:
        """Events for ``endpoint`` not delivered, not given up, due (retry time reached),
        recorded after ``since_s``; oldest first."""
        d = webhook_deliveries
        q = (
            sa.select(outbox, d.c.attempts)
            .select_from(d.join(outbox, outbox.c.id == d.c.event_id))
            .where(
                d.c.endpoint == endpoint,
                d.c.delivered_s.is_(None),
                ~d.c.given_up,
                d.c.next_s <= now,
                outbox.c.time_s >= since_s,
            )
            .order_by(d.c.event_id)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [
                Event(r.id, r.uid, r.kind, r.time_s, r.subject, dict(r.data), r.attempts)
                for r in conn.execute(q)
            ]

    def mark_delivery(
        self,
        endpoint: str,
        event_id: int,
        *,
        attempts: int,
        next_s: float,
        delivered_s: float | None = None,
        given_up: bool = False,
        error: str = "",
    ) -> None:
        """Record an attempt (before the POST: a deposed leader's claim is refused, so it
        does not send) or its outcome. Fenced by the leader's epoch."""
        d = webhook_deliveries
        with self._lock, self.engine.begin() as conn:
            if self.fence is not None:
                self.check_fence(conn, self.fence)
            conn.execute(d.delete().where(d.c.endpoint == endpoint, d.c.event_id == event_id))
            conn.execute(
                d.insert().values(
                    endpoint=endpoint,
                    event_id=event_id,
                    attempts=attempts,
                    next_s=next_s,
                    delivered_s=delivered_s,
                    given_up=given_up,
                    error=error[:500],
                )
            )

    def prune_events(self, before_s: float) -> int:
        """Drop events recorded before ``before_s`` and their delivery marks."""
        with self._lock, self.engine.begin() as conn:
            old = sa.select(outbox.c.id).where(outbox.c.time_s < before_s)
            conn.execute(webhook_deliveries.delete().where(webhook_deliveries.c.event_id.in_(old)))
            return int(conn.execute(outbox.delete().where(outbox.c.time_s < before_s)).rowcount)

    def deliveries(self, limit: int = 100) -> list[DeliveryRow]:
        """The newest delivery marks, newest first (``sova webhooks``)."""
        d = webhook_deliveries
        q = (
            sa.select(d, outbox.c.kind)
            .select_from(d.join(outbox, outbox.c.id == d.c.event_id))
            .order_by(d.c.event_id.desc(), d.c.endpoint)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [
                DeliveryRow(
                    r.endpoint, r.event_id, r.kind, r.attempts, r.delivered_s, r.given_up, r.error
                )
                for r in conn.execute(q)
            ]
