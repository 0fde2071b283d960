"""The store's administration: one writer per store (a lock), backup and restore.

A mixin of :class:`sova.manager.daemons.service.store.Store`, apart from the day-to-day reads and writes:
these run once per process (the lock) or from ``sova store`` with no manager running
(backup, restore), and they call tools and APIs (flock, SQLite's online backup, pg_dump)
the rounds never touch.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import socket
import sqlite3
import subprocess
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sova.manager.daemons.config import ConfigError


class StoreBusy(ConfigError):
    """The store is another manager's (one writer per SQLite store): refuse to start."""


class StoreTooNew(ConfigError):
    """The store's schema is newer than this code: a downgrade, refused (no way back)."""


class StoreError(ConfigError):
    """A store operation (backup, restore) that cannot be done; one line says why."""


class Deposed(RuntimeError):
    """A write by a manager whose epoch is no longer the leader row's: refused, nothing
    written (another manager took the leadership since)."""


class NotLeading(RuntimeError):
    """This manager cannot tell that it still leads (its leadership was not confirmed
    within half a lease): it hands out no migration directive (503)."""


def _version() -> str:
    from sova import __version__

    return __version__


def _libpq_url(url: str) -> str:
    """``postgresql+psycopg://…`` (SQLAlchemy) as libpq takes it: ``postgresql://…``."""
    scheme, _, rest = url.partition("://")
    return scheme.split("+", 1)[0] + "://" + rest


def _pg_tool(tool: str, *args: str, timeout_s: float = 3600.0) -> None:
    exe = shutil.which(tool)
    if exe is None:
        raise StoreError(f"{tool} not found on PATH (install the PostgreSQL client tools)")
    r = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    if r.returncode != 0:
        first = (r.stderr.strip().splitlines() or ["no message"])[0]
        raise StoreError(f"{tool} failed (exit {r.returncode}): {first}")


def advisory_key(schema: str) -> int:
    """The advisory lock of the store in ``schema``: one writer (``sova store restore``)
    or one leader (active/standby managers) at a time."""
    digest = hashlib.sha256(f"sova-manager:{schema}".encode()).digest()[:8]
    return int.from_bytes(digest, "big", signed=True)


def holder_of(conn: sa.Connection, key: int) -> str:
    """Who holds the advisory lock ``key``, as one phrase (for the line a refusal prints)."""
    holder = conn.execute(
        sa.text(
            "SELECT a.application_name, host(a.client_addr), a.pid "
            "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
            "AND l.classid::bigint = :c AND l.objid::bigint = :o"
        ),
        {"c": (key >> 32) & 0xFFFFFFFF, "o": key & 0xFFFFFFFF},
    ).first()
    if holder is None:
        return "unknown"
    return f"{holder[0] or 'a client'} from {holder[1] or 'local'}, backend {holder[2]}"


def _holder_line() -> str:
    return (
        f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%dT%H:%M:%S%z')}"
    )


class StoreAdmin:
    """Writer lock, backup and restore of a store (mixed into ``Store``)."""

    url: str
    engine: Engine
    _writer_lock: int | None
    _file_lock: int | None
    _pg_lock: sa.Connection | None

    def migrate(self) -> str:  # Store's
        raise NotImplementedError

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def sqlite_path(self) -> Path | None:
        """The database file of a file-backed SQLite store (None otherwise)."""
        if self.dialect != "sqlite":
            return None
        db = self.engine.url.database
        return Path(db) if db and db != ":memory:" else None

    def lock_writer(self) -> None:
        """Become this SQLite store's only writer, or raise :class:`StoreBusy` naming the
        holder. A kernel lock (``flock``) on ``<db>.lock`` beside the database: released
        when the holder exits, however it exits, so a crashed manager never blocks the
        next one. SQLite's own locks are per transaction and would let two managers
        alternate as writers, each planning from its own memory (split brain).

        PostgreSQL: a session-level advisory lock (keyed by the store's schema) on a
        connection held for the caller's life; the server releases it when that session
        ends, however the caller ends. ``sova store restore`` takes it; managers on
        PostgreSQL take the same lock as their leadership (:mod:`sova.manager.daemons.service.leadership`),
        waiting for it as standbys instead of exiting."""
        if self.dialect == "postgresql":
            self._lock_pg()
            return
        path = self.sqlite_path
        if path is None or self._writer_lock is not None:
            return
        lock = path.with_name(path.name + ".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StoreBusy(
                f"store {path} is in use by another manager ({holder}; lock {lock})"
            ) from None
        # The lock file is found by the name the store was given: a hard or symbolic link
        # to the database elsewhere had a lock file of its own, and a second manager wrote
        # the same file (issue 37). The database file itself is locked too (its inode,
        # whatever the name). flock is apart from SQLite's POSIX locks; the descriptor is
        # closed only after the engine (closing a descriptor of the database file drops
        # this process's POSIX locks on it), in ``Store.close``.
        db = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(db, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(db)
            os.close(fd)
            raise StoreBusy(
                f"store {path} is in use by another manager through another name of the "
                f"same file (a hard or symbolic link to {path.resolve()})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, (_holder_line() + "\n").encode(), 0)
        self._writer_lock = fd
        self._file_lock = db

    def _lock_pg(self) -> None:
        if self._pg_lock is not None:
            return
        conn = self.engine.connect()
        try:
            schema = str(conn.exec_driver_sql("SELECT current_schema()").scalar())
            key = advisory_key(schema)
            # Who holds it, for the one line a second manager prints.
            conn.execute(
                sa.text("SELECT set_config('application_name', :v, false)"),
                {"v": ("sova manager " + _holder_line())[:63]},
            )
            got = conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
            if not got:
                who = holder_of(conn, key)
                raise StoreBusy(
                    f"store {self.engine.url.render_as_string(hide_password=True)} "
                    f"(schema {schema}) is in use by another manager ({who})"
                )
            conn.commit()  # the lock is the session's: it outlives the transaction
        except BaseException:
            conn.invalidate()
            conn.close()
            raise
        self._pg_lock = conn

    on_deposed: Callable[[str], object] | None = None  # the leader steps down (leadership.py)
    # Whether the leadership was confirmed recently (leadership.py; None: not leading on
    # PostgreSQL, nothing to confirm).
    lead_fresh: Callable[[], bool] | None = None

    def confirm_leading(self) -> None:
        """Raise :class:`NotLeading` unless the leadership was confirmed within half a
        lease. Writes are fenced by the epoch, but a directive an agent gets from memory is
        not: a leader paused past its lease may answer before its heartbeat notices."""
        if self.lead_fresh is not None and not self.lead_fresh():
            raise NotLeading("the leadership is not confirmed (heartbeat late): no directive")

    def check_fence(self, conn: sa.Connection, epoch: int) -> None:
        """Raise :class:`Deposed` unless the leader row still carries ``epoch``.

        In the writer's own transaction, with a share lock on the row: a takeover's
        ``UPDATE`` of the epoch waits for this transaction to end, and this transaction
        waits for a takeover in progress to commit, so a write either lands before the new
        leader started (which then reads it) or is refused (fencing at the write)."""
        row = conn.execute(sa.text("SELECT epoch FROM leader WHERE id = 1 FOR SHARE")).scalar()
        if row is None or int(row) != epoch:
            self.deposed(epoch, row)

    def deposed(self, epoch: int, row: object) -> None:
        """Step down and raise :class:`Deposed`: the store's leader row (``row``: its epoch,
        None if there is none) no longer carries ``epoch``."""
        why = f"epoch {epoch} is no longer the leader's (the store is at epoch {row})"
        if self.on_deposed is not None:
            self.on_deposed(why)
        raise Deposed(why)

    def unlock_writer(self) -> None:
        if self._writer_lock is not None:
            os.close(self._writer_lock)  # closing the descriptor releases the flock
            self._writer_lock = None
        if self._pg_lock is not None:
            # Invalidate, not return to the pool: a pooled session would keep the lock.
            self._pg_lock.invalidate()
            self._pg_lock.close()
            self._pg_lock = None

    # ------------------------------------------------------------------ backup, restore

    def backup(self, dest: Path) -> None:
        """A consistent copy of the whole store in ``dest`` while the manager runs.

        SQLite: the online backup API (a WAL database's file alone is not consistent);
        PostgreSQL: ``pg_dump --format=custom`` (a snapshot in one transaction).
        """
        if self.dialect == "sqlite":
            src_path = self._sqlite_file()
            dest.unlink(missing_ok=True)
            with (
                closing(sqlite3.connect(src_path, timeout=30)) as src,
                closing(sqlite3.connect(dest)) as out,
            ):
                src.backup(out)
            return
        if self.dialect == "postgresql":
            # Only the store's schema: the database may hold other applications' too.
            with self.engine.connect() as conn:
                schema = str(conn.exec_driver_sql("SELECT current_schema()").scalar())
            _pg_tool(
                "pg_dump",
                "--format=custom",
                f"--schema={schema}",
                f"--file={dest}",
                _libpq_url(self.url),
            )
            return
        raise StoreError(f"database_url: no backup for the {self.dialect!r} dialect")

    def restore(self, src: Path) -> None:
        """Replace the whole store with the backup in ``src`` (then migrate it to this code's
        schema). The caller holds the writer lock: no manager may be running on it."""
        if not src.is_file():
            raise StoreError(f"backup {src}: no such file")
        before = self._leader_epoch()
        if self.dialect == "sqlite":
            with closing(sqlite3.connect(f"file:{src}?mode=ro", uri=True)) as b:
                try:
                    ok = b.execute("PRAGMA quick_check").fetchone()
                except sqlite3.DatabaseError as exc:
                    raise StoreError(f"backup {src}: not an SQLite database ({exc})") from None
                if ok is None or ok[0] != "ok":
                    raise StoreError(f"backup {src}: damaged ({ok and ok[0]})")
                self.engine.dispose()
                with closing(sqlite3.connect(self._sqlite_file(), timeout=30)) as out:
                    b.backup(out)
        elif self.dialect == "postgresql":
            self.engine.dispose()
            _pg_tool(
                "pg_restore",
                "--clean",
                "--if-exists",
                "--no-owner",
                "--single-transaction",
                f"--dbname={_libpq_url(self.url)}",
                str(src),
            )
        else:
            raise StoreError(f"database_url: no restore for the {self.dialect!r} dialect")
        self.migrate()
        # The backup carries an older epoch; a manager deposed before the restore may still
        # hold the newer one. Past both, the next takeover's epoch is one nobody ever held.
        with self.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE leader SET epoch = "
                    "CASE WHEN epoch > :b THEN epoch ELSE :b END + 1 WHERE id = 1"
                ),
                {"b": before or 0},
            )

    def _leader_epoch(self) -> int | None:
        """The leader row's epoch (None: no such row or table, a store before 0004)."""
        try:
            with self.engine.connect() as conn:
                row = conn.execute(sa.text("SELECT epoch FROM leader WHERE id = 1")).scalar()
        except sa.exc.SQLAlchemyError:
            return None
        return None if row is None else int(row)

    def _sqlite_file(self) -> str:
        path = self.sqlite_path
        if path is None:
            raise StoreError("database_url: an in-memory SQLite store has nothing to back up")
        return str(path)
