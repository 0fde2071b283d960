"""The manager's knowledge store (Sova Fig. 3 "Knowledge"), through SQLAlchemy 2.

Why a database at all: the manager must survive its own restart without forgetting why
it did what it did. Four things are kept:

* **host reports**, enough of them to refill every host's detector window on restart (and,
  within the retention time, an operator's history);
* **decisions** with the inputs that caused them: the audit log ("why did VM1 move?");
* **leases and directives**: a migration in flight and the signal its source has not yet
  acknowledged — lose these and a restarted manager would signal the same move twice;
* **migrations**: one row per signalled move, closed with its result;
* **operator control**: proposed plans (recommend mode) and what became of them, fences
  (maintenance, pinning, VF freeze), modes, and the audit log of every operator action —
  who did what, when.

SQLite (a file) is the default so a small cluster needs no database server; PostgreSQL by
URL for large ones. The schema is versioned with Alembic and migrated on start-up.

Every method here is synchronous and short; the manager calls them from a worker thread so
that a slow disk never stalls the HTTP event loop. One lock serialises writers, because
SQLite allows one writer at a time and the manager is the only client anyway.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.pool import PoolProxiedConnection

from sova.manager.daemons.service.store_admin import (
    Deposed,
    StoreAdmin,
    StoreBusy,
    StoreError,
    StoreTooNew,
    _version,
)
from sova.manager.daemons.service.store_logs import StoreLogs, plan_row
from sova.manager.daemons.service.store_outbox import OutboxStore
from sova.manager.daemons.service.store_reports import (
    not_stored,
    pipelined_insert,
    report_values,
    store_epoch,
)
from sova.manager.daemons.service.store_round import write_round_rows
from sova.manager.daemons.service.store_rows import (
    AuditRow,
    DecisionRow,
    DirectiveRow,
    FenceRow,
    LeaseRow,
    MigrationEnd,
    ModeRow,
    PlanRow,
    ReportRow,
    RoundWrite,
    StoredState,
)
from sova.manager.daemons.service.store_schema import (
    MIGRATIONS_DIR,
    decisions,
    directives,
    fences,
    host_reports,
    leases,
    metadata,
    migrations,
    modes,
    peer_config,
    plans,
)

__all__ = [
    "Deposed",
    "Store",
    "StoreAdmin",
    "StoreBusy",
    "StoreError",
    "StoreTooNew",
    "ReportRow",
    "DecisionRow",
    "LeaseRow",
    "DirectiveRow",
    "MigrationEnd",
    "PlanRow",
    "FenceRow",
    "ModeRow",
    "AuditRow",
    "RoundWrite",
    "StoredState",
]

# --------------------------------------------------------------------------- store

# How long a report write waits for SQLite's write lock held by another process: half the
# agent's request timeout (AGENT_REPORT_TIMEOUT_S, 2 s), so the 503 reaches it in time.
REPORT_BUSY_TIMEOUT_MS = 1000


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL: readers (the decision log endpoint) never block the writer; NORMAL is durable
    # across a process crash, which is the failure the manager must survive.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.close()


def _pg_session_settings(lease_ms: int) -> Callable[[Any, Any], None]:
    """A connect hook: a session left idle inside a transaction (its process frozen, its
    host cut off, a deposed leader inside a fenced write) ends after the lease, releasing
    its locks; until then a takeover's update of the leader row would wait for TCP to
    give up (hours). Set per session rather than in the URL's ``options``, which the
    operator's own ``options`` (search_path) would replace."""

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute(f"SET idle_in_transaction_session_timeout = {int(lease_ms)}")
        cur.close()
        dbapi_conn.commit()

    return on_connect


class Store(StoreAdmin, OutboxStore, StoreLogs):
    def __init__(self, url: str, *, echo: bool = False, lease_s: float | None = None) -> None:
        """``lease_s`` (a PostgreSQL manager's ``leader_lease_s``): its sessions end when
        left idle in a transaction that long, and TCP keepalives notice a dead host in it."""
        self.url = url
        kw: dict[str, Any] = {"echo": echo, "future": True}
        if url.startswith("sqlite"):
            kw["connect_args"] = {"check_same_thread": False, "timeout": 5.0}
            if url in ("sqlite://", "sqlite:///:memory:"):
                kw["poolclass"] = sa.pool.StaticPool
        else:
            kw["pool_pre_ping"] = True
            kw["pool_size"] = 4
            if url.startswith("postgresql"):
                kw["connect_args"] = {"connect_timeout": 5}
                if lease_s is not None:
                    kw["connect_args"].update(
                        keepalives=1,
                        keepalives_idle=max(1, int(lease_s / 2)),
                        keepalives_interval=1,
                        keepalives_count=3,
                        tcp_user_timeout=int(lease_s * 1000),
                    )
        self.engine: Engine = sa.create_engine(url, **kw)
        if url.startswith("sqlite"):
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        elif url.startswith("postgresql") and lease_s is not None:
            sa.event.listen(self.engine, "connect", _pg_session_settings(int(lease_s * 1000)))
        self._lock = threading.Lock()
        self._writer_lock: int | None = None  # descriptor of the held lock file
        self._file_lock: int | None = None  # descriptor of the database file, flocked
        self._pg_lock: sa.Connection | None = None  # the session holding the advisory lock
        self._report_conn: PoolProxiedConnection | None = None  # see _pg_add_reports
        # The leader's epoch (active/standby on PostgreSQL, manager/daemons/service/leadership.py): when
        # set, every write_round checks it against the leader row in its own transaction.
        self.fence: int | None = None
        self.migrated = False  # migrate() changed the schema's revision

    def migrate(self) -> str:
        """Bring the schema to the newest revision; returns it."""
        from alembic import command
        from alembic.config import Config
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        known = ScriptDirectory.from_config(cfg)
        with self._lock, self.engine.begin() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
            if current is not None and current not in {r.revision for r in known.walk_revisions()}:
                # Written by a newer Sova: upgrading would fail half-way and there is no
                # way back; running on it would misread columns this code does not know.
                raise StoreTooNew(
                    f"database_url: store {self.engine.url.render_as_string(hide_password=True)} has schema "
                    f"revision {current!r}, newer than this Sova {_version()} knows (newest "
                    f"{known.get_current_head()!r}): run the newer Sova, or restore a backup "
                    "made by this version (sova store restore)"
                )
            if current is None and set(sa.inspect(conn).get_table_names()) & set(metadata.tables):
                # Sova's tables without their version: a partial restore or a copy of the
                # tables alone. Creating them again fails half-way; guessing a version
                # could misread a column.
                raise StoreError(
                    f"database_url: store {self.engine.url.render_as_string(hide_password=True)} "
                    "has Sova's tables but no schema version (alembic_version): restore a "
                    "whole backup (sova store restore) or point database_url at an empty "
                    "database"
                )
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
            rev = MigrationContext.configure(conn).get_current_revision()
        self.migrated = self.migrated or rev != current
        return rev or ""

    def close(self) -> None:
        # Not back to the pool: it is in autocommit mode. A write still on it (a shutdown
        # that did not wait for the store's thread) keeps it: closing must not wait.
        if self._lock.acquire(blocking=False):
            try:
                self._drop_report_conn()
            finally:
                self._lock.release()
        self.unlock_writer()
        self.engine.dispose()
        if self._file_lock is not None:  # after the engine: see lock_writer
            os.close(self._file_lock)
            self._file_lock = None

    def ping(self) -> bool:
        try:
            with self.engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
            return True
        except sa.exc.SQLAlchemyError:
            return False

    def can_write(self, timeout_s: float = 0.5) -> bool:
        """Whether a write transaction can start now (readiness): a locked, read-only or
        corrupt database answers ``SELECT 1`` but takes no write."""
        try:
            with self.engine.connect() as conn:
                sqlite = self.dialect == "sqlite"
                if sqlite:
                    conn.exec_driver_sql(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
                    conn.commit()
                try:
                    with conn.begin():
                        # Deletes nothing, but takes the write lock like any write.
                        conn.execute(directives.delete().where(directives.c.host == ""))
                finally:
                    if sqlite:
                        conn.exec_driver_sql("PRAGMA busy_timeout=5000")
                        conn.commit()
            return True
        except sa.exc.SQLAlchemyError:
            return False

    # ------------------------------------------------------------------ writes

    def add_reports(self, rows: Sequence[ReportRow]) -> None:
        if not rows:
            return
        if self.dialect == "postgresql" and self.engine.dialect.driver == "psycopg":
            self._pg_add_reports(rows)
            return
        values = [report_values(r) for r in rows]
        sqlite = self.dialect == "sqlite"
        with self._lock, self.engine.connect() as conn:
            if sqlite:
                # Another process holding SQLite's write lock (a shell in a transaction, a
                # backup) made reports wait the 5 s busy timeout, past the agent's 2 s
                # request: it got no answer. Given up sooner, the waiting reports are 503
                # (the agent sends them again) and the rows stay buffered (issue 37).
                conn.exec_driver_sql(f"PRAGMA busy_timeout={REPORT_BUSY_TIMEOUT_MS}")
                conn.commit()
            try:
                with conn.begin():
                    # Fenced like every leader's write: a deposed leader's rows are refused
                    # (its report is then not acknowledged), and a takeover's epoch update
                    # waits for the report writes in flight, so once it commits the rows
                    # are final.
                    if self.fence is not None:
                        self.check_fence(conn, self.fence)
                    conn.execute(host_reports.insert(), values)
            finally:
                if sqlite:
                    conn.exec_driver_sql("PRAGMA busy_timeout=5000")
                    conn.commit()

    def _pg_add_reports(self, rows: Sequence[ReportRow]) -> None:
        """One round trip (store_reports.py) on a connection kept for the reports, so
        not pinged at each write: one found dead (the server restarted) is replaced and
        the write tried once more on a fresh one, which the pool pings, with only the rows
        the dead one did not commit."""
        with self._lock:
            for attempt in (1, 2):
                reused = self._report_conn is not None
                if self._report_conn is None:
                    self._report_conn = self.engine.raw_connection()
                dbapi_conn = self._report_conn.dbapi_connection
                try:
                    if attempt == 2:
                        rows = not_stored(dbapi_conn, rows)
                        if not rows:
                            return
                    written = pipelined_insert(dbapi_conn, rows, self.fence)
                except Exception:
                    if not getattr(dbapi_conn, "broken", True):
                        raise
                    self._drop_report_conn()
                    if reused and attempt == 1:
                        continue
                    raise
                if self.fence is not None and written != len(rows):
                    self.deposed(self.fence, store_epoch(dbapi_conn))
                return

    def _drop_report_conn(self) -> None:
        if self._report_conn is not None:
            self._report_conn.invalidate()
            self._report_conn.close()
            self._report_conn = None

    def write_round(self, w: RoundWrite) -> None:
        if w.empty():
            return
        with self._lock, self.engine.begin() as conn:
            if self.fence is not None:
                self.check_fence(conn, self.fence)  # raises Deposed: nothing is written
            ended = write_round_rows(conn, w)
            self.record_events(conn, w, ended)  # the webhooks' outbox (store_outbox.py)

    def prune(self, before_s: float, keep_per_host: int) -> int:
        """Drop reports older than ``before_s`` except each host's last ``keep_per_host``."""
        with self._lock, self.engine.begin() as conn:
            ranked = sa.select(
                host_reports.c.id,
                sa.func.row_number()
                .over(partition_by=host_reports.c.host, order_by=host_reports.c.id.desc())
                .label("rn"),
            ).subquery()
            keep = sa.select(ranked.c.id).where(ranked.c.rn <= keep_per_host)
            res = conn.execute(
                host_reports.delete().where(
                    host_reports.c.received_s < before_s, host_reports.c.id.not_in(keep)
                )
            )
            return int(res.rowcount or 0)

    def forget_host(self, host: str) -> int:
        """Decommission: the host's reports and directive leave the store (decisions,
        migrations, plans and the audit log stay: they are history). Returns rows removed."""
        with self._lock, self.engine.begin() as conn:
            n = conn.execute(host_reports.delete().where(host_reports.c.host == host)).rowcount
            n += conn.execute(directives.delete().where(directives.c.host == host)).rowcount
            return int(n or 0)

    # ------------------------------------------------------------------ reads

    def load_state(self, n: int, *, windows: bool = True) -> StoredState:
        """Everything a manager restores; ``windows=False``: without the report windows
        and past boots (a warm standby has read those already, :meth:`report_windows`)."""
        wins: dict[str, list[ReportRow]] = {}
        boots: dict[str, list[str]] = {}
        if windows:
            wins, boots = self.report_windows(n)
        with self.engine.connect() as conn:
            lease_rows = [
                LeaseRow(r.vm, r.src, r.dst, r.since_s, r.decision_id)
                for r in conn.execute(sa.select(leases).order_by(leases.c.vm))
            ]
            directive_rows = [
                DirectiveRow(r.host, r.id, r.flag, r.target, r.vm, r.issued_s, r.acked)
                for r in conn.execute(sa.select(directives).order_by(directives.c.host))
            ]
            last_d = conn.execute(sa.select(sa.func.max(decisions.c.id))).scalar()
            last_m = conn.execute(sa.select(sa.func.max(migrations.c.id))).scalar()
            open_plans = [
                plan_row(r)
                for r in conn.execute(
                    sa.select(plans).where(plans.c.state == "proposed").order_by(plans.c.id)
                ).mappings()
            ]
            fence_rows = _fence_rows(conn)
            mode_rows = _mode_rows(conn)
        next_id = max(int(last_d or 0), int(last_m or 0)) + 1
        return StoredState(
            wins,
            lease_rows,
            directive_rows,
            next_id,
            open_plans,
            fence_rows,
            mode_rows,
            {h: b[:-1] for h, b in boots.items()},  # the newest is the live boot
        )

    def report_windows(
        self, n: int, upto: int | None = None
    ) -> tuple[dict[str, list[ReportRow]], dict[str, list[str]]]:
        """Each host's last ``n`` report rows (oldest first) and its agents' boot ids
        (oldest first, the live one last); ``upto``: only rows with ids up to it."""
        with self.engine.connect() as conn:
            src = sa.select(host_reports)
            if upto is not None:
                src = src.where(host_reports.c.id <= upto)
            sub = src.subquery()
            ranked = sa.select(
                sub,
                sa.func.row_number()
                .over(partition_by=sub.c.host, order_by=sub.c.id.desc())
                .label("rn"),
            ).subquery()
            rows = conn.execute(
                sa.select(ranked).where(ranked.c.rn <= n).order_by(ranked.c.host, ranked.c.id)
            ).mappings()
            windows: dict[str, list[ReportRow]] = {}
            for r in rows:
                windows.setdefault(r["host"], []).append(_report_row(r))
            newest = sa.func.max(host_reports.c.id).label("newest")
            q = sa.select(host_reports.c.host, host_reports.c.boot, newest).where(
                host_reports.c.boot.is_not(None)
            )
            if upto is not None:
                q = q.where(host_reports.c.id <= upto)
            boots: dict[str, list[str]] = {}
            for b in conn.execute(
                q.group_by(host_reports.c.host, host_reports.c.boot).order_by(
                    host_reports.c.host, newest
                )
            ):
                boots.setdefault(b.host, []).append(b.boot)
        return windows, boots

    def report_mark(self) -> int:
        """The newest report row's id, exact: every row with an id up to it is committed,
        and no row with a smaller id commits later (a warm standby reads rows above it).

        PostgreSQL hands out ids before commit, so a plain ``max(id)`` could pass a row
        still in flight. Report writes hold a share lock on the leader row (the fence,
        :meth:`add_reports`); taking it exclusively first waits for those in flight and
        holds new ones back for the one ``max(id)`` read (a few ms)."""
        with self.engine.begin() as conn:
            if self.dialect == "postgresql":
                conn.execute(sa.text("SELECT 1 FROM leader WHERE id = 1 FOR UPDATE"))
            return int(conn.execute(sa.select(sa.func.max(host_reports.c.id))).scalar() or 0)

    def reports_after(self, after: int, upto: int) -> list[tuple[int, ReportRow]]:
        """Report rows with ``after < id <= upto``, in id order (each host's in the order
        the leader took them)."""
        q = (
            sa.select(host_reports)
            .where(host_reports.c.id > after, host_reports.c.id <= upto)
            .order_by(host_reports.c.id)
        )
        with self.engine.connect() as conn:
            return [(int(r["id"]), _report_row(r)) for r in conn.execute(q).mappings()]

    def report_hosts(self) -> set[str]:
        """The hosts with report rows in the store (a forgotten host has none)."""
        with self.engine.connect() as conn:
            return {h for (h,) in conn.execute(sa.select(host_reports.c.host).distinct())}

    def fence_rows(self) -> list[FenceRow]:
        with self.engine.connect() as conn:
            return _fence_rows(conn)

    def publish_peer_config(
        self, operators: Mapping[str, Any], digest: Mapping[str, str], now_s: float
    ) -> int:
        """The leader's credentials and settings digest for its standbys; returns the new
        generation. Fenced like every leader's write (a deposed leader publishes nothing)."""
        with self._lock, self.engine.begin() as conn:
            if self.fence is not None:
                self.check_fence(conn, self.fence)
            gen = conn.execute(
                peer_config.update()
                .where(peer_config.c.id == 1)
                .values(
                    generation=peer_config.c.generation + 1,
                    epoch=self.fence or 0,
                    operators=dict(operators),
                    digest=dict(digest),
                    since_s=now_s,
                )
                .returning(peer_config.c.generation)
            ).scalar_one()
        return int(gen)

    def peer_generation(self) -> int:
        """The published generation (0: nothing published yet)."""
        with self.engine.connect() as conn:
            gen = conn.execute(
                sa.select(peer_config.c.generation).where(peer_config.c.id == 1)
            ).scalar()
        return int(gen or 0)

    def peer_config(self) -> tuple[int, dict[str, Any], dict[str, str]] | None:
        """(generation, operators, digest) the leader published, or None (none yet)."""
        with self.engine.connect() as conn:
            r = conn.execute(sa.select(peer_config).where(peer_config.c.id == 1)).first()
        if r is None or not r.generation:
            return None
        return int(r.generation), dict(r.operators), {str(k): str(v) for k, v in r.digest.items()}

    def mode_rows(self) -> list[ModeRow]:
        with self.engine.connect() as conn:
            return _mode_rows(conn)

    def count(self, table: str) -> int:
        t = metadata.tables[table]
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(t)).scalar() or 0)


def _fence_rows(conn: sa.Connection) -> list[FenceRow]:
    return [
        FenceRow(r.kind, r.name, r.set_by, r.since_s, r.reason, r.until_s)
        for r in conn.execute(sa.select(fences).order_by(fences.c.kind, fences.c.name))
    ]


def _mode_rows(conn: sa.Connection) -> list[ModeRow]:
    return [
        ModeRow(r.scope, r.mode, r.set_by, r.since_s)
        for r in conn.execute(sa.select(modes).order_by(modes.c.scope))
    ]


def _report_row(r: Any) -> ReportRow:  # a RowMapping
    return ReportRow(
        r["host"],
        r["seq"],
        r["agent_t"],
        r["received_s"],
        (r["cpu"], r["mem"], r["net"]),
        r["vms"],
        tuple(r["capacity"]) if r["capacity"] else None,
        r["boot"] or "",
    )


def iter_report_vms(vms: Mapping[str, Any]) -> Iterable[tuple[str, list[float], int, bool]]:
    """Decode the ``vms`` JSON column: name -> [cpu, mem, net, MiB, migrating]."""
    for name, v in vms.items():
        yield name, [float(v[0]), float(v[1]), float(v[2])], int(v[3]), bool(v[4])
