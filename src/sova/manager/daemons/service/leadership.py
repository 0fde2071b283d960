"""Which manager plans: one leader per PostgreSQL store, standbys waiting to take over.

PostgreSQL already has what a leader election needs, so there is no home-made consensus
here: the leadership is the store's session-level advisory lock (the one ``sova store
restore`` takes), held on a connection of its own for as long as the leader lives. The
server releases it when that session ends — the process exits or is killed, its host's
TCP keepalives expire, or the session stays idle past ``leader_lease_s`` (a frozen
process) — and a standby polling for it gets it.

A lock alone does not stop a deposed leader that has not noticed yet (a frozen process
that wakes up, a session killed under it) from writing through its other connections.
So every takeover raises the **epoch** in the store's leader row, in the new leader's
lock session, before it reads anything; and every write of decisions, leases,
directives and operator changes checks, in its own transaction and under a share lock
on that row, that the row still carries the writer's epoch
(:meth:`sova.manager.daemons.service.store_admin.StoreAdmin.check_fence`). A write either commits before
the takeover's update (the new leader then reads it when it restores) or is refused.

A leader that finds it lost the leadership (its heartbeat on the lock session fails or
reads another epoch, or a write is refused) steps down at once: the process exits with
:data:`EXIT_DEPOSED`, answering nothing more, and its service manager restarts it as a
standby. That is how Kubernetes' client-go leader election ends a lost leadership too:
carrying on in a process whose memory a newer leader has overtaken is what fencing is for.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, Gauge

from sova.manager.daemons.logs import fields
from sova.manager.daemons.service.store import Store
from sova.manager.daemons.service.store_admin import advisory_key, holder_of

log = logging.getLogger("sova.manager")

EXIT_DEPOSED = 3  # a leader that lost its leadership exits with this (restarted as standby)


@dataclass(frozen=True)
class LeaderRow:
    """The store's leader row: who plans, where agents reach it, since when."""

    epoch: int
    holder: str
    url: str
    since_s: float


def leader_gauges(registry: CollectorRegistry) -> tuple[Gauge, Gauge]:
    """``sova_manager_leader`` (1 leader, 0 standby) and ``sova_manager_leader_epoch``."""
    role = Gauge(
        "sova_manager_leader",
        "1 if this manager leads (plans, issues directives), 0 if it is a standby",
        registry=registry,
    )
    epoch = Gauge(
        "sova_manager_leader_epoch",
        "the store's leadership epoch (fencing token) this manager leads or last saw",
        registry=registry,
    )
    return role, epoch


# A manager whose clock is further than this from the store's does not take the lead:
# lease timeouts, cool-downs, the return tabu and the hourly budget are judged on the
# leader's clock against times the previous leader stored (issue 37: a standby an hour
# ahead ended the lease of a migration in flight at once). 60 s leaves NTP's usual error
# far behind and stays well inside the shortest of those rules (a 300 s cool-down).
MAX_CLOCK_OFFSET_S = 60.0


def clock_offset(store: Store, wall: Callable[[], float] = time.time) -> float:
    """This host's clock minus the store's (PostgreSQL ``clock_timestamp()``), the
    query's round trip halved out."""
    with store.engine.connect() as conn:
        t0 = wall()
        db = float(conn.execute(sa.text("SELECT extract(epoch FROM clock_timestamp())")).scalar_one())
        t1 = wall()
    return (t0 + t1) / 2 - db


def clock_refusal(offset: float) -> str | None:
    """Why a manager with this clock offset must not lead (one line), or None."""
    if abs(offset) <= MAX_CLOCK_OFFSET_S:
        return None
    return (
        f"refusing to lead: this host's clock is {abs(offset):.1f} s "
        f"{'ahead of' if offset > 0 else 'behind'} the store's (PostgreSQL clock_timestamp(); "
        f"at most {MAX_CLOCK_OFFSET_S:g} s): leases and cool-downs would be judged that far "
        "off; fix its time (NTP) and it takes its turn"
    )


def clock_gauge(registry: CollectorRegistry) -> Gauge:
    return Gauge(
        "sova_manager_clock_offset_seconds",
        "this manager's clock minus the store's, measured while it waits to lead; beyond "
        f"{MAX_CLOCK_OFFSET_S:g} s it refuses to lead",
        registry=registry,
    )


def read_leader(store: Store) -> LeaderRow | None:
    """The leader row (None: a store from before revision 0004, or unreachable)."""
    try:
        with store.engine.connect() as conn:
            r = conn.execute(
                sa.text("SELECT epoch, holder, url, since_s FROM leader WHERE id = 1")
            ).first()
    except sa.exc.SQLAlchemyError:
        return None
    return None if r is None else LeaderRow(int(r[0]), str(r[1]), str(r[2]), float(r[3]))


class Leadership:
    """This process's claim on one PostgreSQL store's leadership.

    :meth:`try_lock` (standby: poll it), then :meth:`take_over` once the schema is
    current (the epoch is raised and the store's writes are fenced with it), then
    :meth:`start_heartbeat`; ``on_lost(reason)`` is called once, from any thread, when the
    leadership is gone.
    """

    def __init__(
        self,
        store: Store,
        url: str,
        *,
        lease_s: float = 10.0,
        on_lost: Callable[[str], object] | None = None,
        clock: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.url = url
        self.lease_s = lease_s
        self.on_lost = on_lost
        self.clock = clock
        self.mono = mono
        # When the lock session last answered with this manager's epoch (``mono``): a
        # paused process may have been deposed since, so it hands out no directive unless
        # this is recent (:meth:`fresh`).
        self.last_ok: float | None = None
        self.holder = f"pid {os.getpid()} on {socket.gethostname()}"
        self.epoch: int | None = None
        self.schema = ""
        self._key = 0
        # The lock's own session: not pooled (a pooled session would keep the lock after
        # "closing"), with TCP keepalives so the server notices a dead host within
        # ~lease_s, not the kernel's two hours.
        idle = max(1, int(lease_s / 2))
        self._engine = sa.create_engine(
            store.engine.url,
            poolclass=sa.pool.NullPool,
            connect_args={
                "connect_timeout": 5,
                "keepalives": 1,
                "keepalives_idle": idle,
                "keepalives_interval": 1,
                "keepalives_count": 3,
                "tcp_user_timeout": int(lease_s * 1000),
            },
        )
        self._conn: sa.Connection | None = None
        self._io = threading.Lock()  # the lock session is used by one thread at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost = False

    # ------------------------------------------------------------------ standby

    def try_lock(self) -> bool:
        """Take the leadership lock if it is free (a standby calls this every poll)."""
        with self._io:
            if self._conn is None:
                self._conn = self._connect()
            try:
                got = bool(
                    self._conn.execute(
                        sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": self._key}
                    ).scalar()
                )
                self._conn.commit()
            except sa.exc.SQLAlchemyError:
                # A session the server ended (idle timeout, restart): a new one next poll.
                self._conn.invalidate()
                self._conn.close()
                self._conn = None
                raise
            return got

    def holder_now(self) -> str:
        """Who holds the leadership lock now (one phrase, for logs)."""
        with self._io:
            if self._conn is None:
                self._conn = self._connect()
            who = holder_of(self._conn, self._key)
            self._conn.commit()
            return who

    def _connect(self) -> sa.Connection:
        conn = self._engine.connect()
        try:
            self.schema = str(conn.exec_driver_sql("SELECT current_schema()").scalar())
            self._key = advisory_key(self.schema)
            ms = int(self.lease_s * 1000)
            # A leader whose process freezes stops its heartbeat; the server then ends its
            # session after lease_s and the lock is free (PostgreSQL 14+; older servers
            # keep it until the TCP keepalives fail).
            for name, value in (
                ("application_name", f"sova manager {self.holder}"[:63]),
                ("idle_session_timeout", str(ms)),
                ("idle_in_transaction_session_timeout", str(ms)),
            ):
                try:
                    conn.execute(
                        sa.text("SELECT set_config(:n, :v, false)"), {"n": name, "v": value}
                    )
                    conn.commit()
                except sa.exc.SQLAlchemyError:
                    conn.rollback()
        except BaseException:
            conn.invalidate()
            conn.close()
            raise
        return conn

    # ------------------------------------------------------------------ leader

    def take_over(self, *, attempts: int = 4) -> int:
        """Raise the epoch (this process holds the lock); fence the store's writes with it.
        Returns the new epoch.

        The ``UPDATE`` waits for the share lock of a write in progress (check_fence). A
        deposed leader frozen or cut off inside such a write holds it until its session's
        ``idle_in_transaction_session_timeout`` (the lease, :class:`Store`) ends it, so
        each attempt waits at most ``lease_s`` and the takeover gives up after
        ``attempts`` (the process then exits and rejoins as a standby)."""
        ms = int(self.lease_s * 1000)
        with self._io:
            assert self._conn is not None, "take_over before try_lock"
            for attempt in range(1, attempts + 1):
                try:
                    self._conn.execute(
                        sa.text("SELECT set_config('lock_timeout', :v, true)"), {"v": str(ms)}
                    )
                    epoch = int(
                        self._conn.execute(
                            sa.text(
                                "UPDATE leader SET epoch = epoch + 1, holder = :h, url = :u, "
                                "since_s = :t WHERE id = 1 RETURNING epoch"
                            ),
                            {"h": self.holder[:200], "u": self.url[:500], "t": self.clock()},
                        ).scalar_one()
                    )
                    self._conn.commit()
                    break
                except sa.exc.OperationalError as exc:
                    self._conn.rollback()
                    if getattr(exc.orig, "sqlstate", None) != "55P03" or attempt == attempts:
                        raise
                    log.warning(
                        "takeover: the leader row is still locked by a write of the old "
                        "leader after %d ms (attempt %d of %d)",
                        ms,
                        attempt,
                        attempts,
                    )
            self.last_ok = self.mono()
            self.epoch = epoch  # under _io: the heartbeat checks the epoch from now on
        self.store.fence = epoch
        self.store.on_deposed = self.lose
        self.store.lead_fresh = self.fresh
        log.info(
            "leader of store schema %s at epoch %d (%s)",
            self.schema,
            epoch,
            self.url,
            extra=fields(epoch=epoch),
        )
        return epoch

    def fresh(self) -> bool:
        """Whether the lock session confirmed this manager's epoch less than half a lease
        ago: a process paused past the lease may have been deposed without knowing yet."""
        return (
            not self._lost
            and self.last_ok is not None
            and self.mono() - self.last_ok < self.lease_s / 2
        )

    def start_heartbeat(self, interval_s: float | None = None) -> None:
        """Check the lock session (and the epoch on it) every ``interval_s``, from a thread
        of its own (a busy event loop must not cost the leadership). Started as soon as the
        lock is held: before :meth:`take_over` it only keeps the session from going idle
        (a long migration must not let ``idle_session_timeout`` end it)."""
        every = interval_s if interval_s is not None else min(1.0, self.lease_s / 5)
        self._thread = threading.Thread(
            target=self._beat, args=(every,), name="sova-leader", daemon=True
        )
        self._thread.start()

    def _beat(self, every: float) -> None:
        while not self._stop.wait(every):
            why = self.check()
            if why is not None:
                self.lose(why)
                return

    def check(self) -> str | None:
        """None while this process still leads; else why not."""
        try:
            with self._io:
                if self._conn is None:
                    return "no leadership session"
                if self.epoch is None:  # not leading yet (migrating): keep the session
                    self._conn.execute(sa.text("SELECT 1"))
                    self._conn.commit()
                    return None
                epoch = self._conn.execute(
                    sa.text("SELECT epoch FROM leader WHERE id = 1")
                ).scalar()
                self._conn.commit()
        except sa.exc.SQLAlchemyError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return f"the leadership session failed ({first})"
        if epoch != self.epoch:
            return f"the store is at epoch {epoch}, this manager led epoch {self.epoch}"
        self.last_ok = self.mono()
        return None

    def lose(self, why: str) -> None:
        """The leadership is gone: say so once and hand over to ``on_lost``."""
        with self._io:
            if self._lost:
                return
            self._lost = True
        log.critical("lost the leadership (epoch %s): %s", self.epoch, why)
        if self.on_lost is not None:
            self.on_lost(why)

    def close(self) -> None:
        """Give the leadership up (the session ends, the server frees the lock)."""
        self._stop.set()
        with self._io:
            if self._conn is not None:
                self._conn.invalidate()
                self._conn.close()
                self._conn = None
        self._engine.dispose()


def step_down(why: str) -> None:
    """``on_lost`` of a real manager: exit at once, publishing nothing more."""
    log.critical("stepping down: exiting %d so a restart joins as a standby", EXIT_DEPOSED)
    logging.shutdown()
    os._exit(EXIT_DEPOSED)
