"""A standby manager's HTTP face, while it waits for the leadership (PostgreSQL).

A standby holds no cluster state: the detector windows, leases and directives live in the
leader's memory and are read from the store only by the manager that takes over. So it
neither plans nor takes reports: agent requests and operator changes are answered 503
with the leader's URL in :data:`~sova.manager.daemons.agent.client.LEADER_HEADER` (agents with
several manager URLs go there at once). Operator reads of what the store holds (fences,
modes, plans, audit, decisions) it answers itself, read-only
(:mod:`sova.manager.daemons.service.standby_reads`); every answer names the leader it follows
(``x-sova-leader``, ``x-sova-leader-epoch``) and how long ago it last saw that leader
hold the lock (``x-sova-leader-seen-age-s``). ``/healthz`` says the process is alive,
``/readyz`` is 503 naming the leader and its epoch (a load balancer sends nothing here),
``/metrics`` says standby (to a viewer token, as the leader's). Why redirect rather than
take reports into the store, and which reads a standby serves: docs/design.md, "Active
and standby managers".

Every ``poll_s`` it tries the leadership lock; when it gets it the server stops, and the
caller (:func:`sova.manager.daemons.service.app.run_manager`) takes over and serves as the leader
on the same port.

A standby is *warm* (:class:`WarmWindows`): it reads the hosts' report windows — the bulk
of a restore, seconds at 10,000 hosts — while it waits, and keeps up with the leader's
new rows every ``catch_up_s``; a takeover then reads only the rows written since, and the
small tables (leases, directives, fences, plans, modes).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sova.manager.daemons.agent.client import LEADER_HEADER
from sova.manager.daemons.config import ManagerSettings
from sova.manager.daemons.service.http_errors import validation_error
from sova.manager.daemons.service.leadership import (
    LeaderRow,
    Leadership,
    clock_gauge,
    clock_offset,
    clock_refusal,
    leader_gauges,
    read_leader,
)
from sova.manager.daemons.service.peers import (
    book_from_json,
    credential_files,
    differing,
    settings_digest,
)
from sova.manager.daemons.service.reports import MAX_PAST_BOOTS, row_loads
from sova.manager.daemons.service.standby_reads import (
    STANDBY_READS,
    StandbyAuth,
    add_standby_reads,
    operator_credential,
    read_only_store,
)
from sova.manager.daemons.service.store import ReportRow, Store
from sova.manager.daemons.service.store_admin import _version

ROLE_HEADER = "x-sova-role"
EPOCH_HEADER = "x-sova-leader-epoch"
SEEN_HEADER = "x-sova-leader-seen-age-s"

log = logging.getLogger("sova.manager")


class WarmWindows:
    """Each host's last ``n`` report rows and its agents' boot ids, read ahead of a
    takeover and kept up to date (what :meth:`Store.load_state` would read, without the
    wait).

    Exact, not approximate: :meth:`Store.report_mark` gives an id below which every row
    is committed and final, so reading the rows above the last mark misses none and reads
    none twice. After the takeover's epoch update no old leader's report write can
    commit any more (report writes are fenced), so the last catch-up, made then, is the
    store's content. Rows are decoded here too (the other half of a restore's time).
    """

    def __init__(self, store: Store, n: int) -> None:
        self.store = store
        self.n = n
        self.mark: int | None = None  # None: not read yet
        self.rows: dict[str, deque[ReportRow]] = {}
        self.boots: dict[str, list[str]] = {}  # oldest first, the live boot last
        self._io = threading.Lock()  # a catch-up in a worker thread and the takeover's

    def catch_up(self) -> int:
        """Read what is new since the last call (everything the first time); returns how
        many rows were read."""
        with self._io:
            mark = self.store.report_mark()
            if self.mark is None:
                windows, boots = self.store.report_windows(self.n, upto=mark)
                self.rows = {
                    h: deque((_decoded(r) for r in rs), maxlen=self.n) for h, rs in windows.items()
                }
                self.boots = boots
                self.mark = mark
                return sum(len(rs) for rs in windows.values())
            new = self.store.reports_after(self.mark, mark) if mark > self.mark else []
            for _, r in new:
                self.rows.setdefault(r.host, deque(maxlen=self.n)).append(_decoded(r))
                if r.boot:
                    bl = self.boots.setdefault(r.host, [])
                    if not bl or bl[-1] != r.boot:
                        if r.boot in bl:
                            bl.remove(r.boot)
                        bl.append(r.boot)
                        del bl[: -(MAX_PAST_BOOTS + 1)]  # the past ones and the live boot
            self.mark = mark
            return len(new)

    def windows(self) -> tuple[dict[str, list[ReportRow]], dict[str, list[str]]]:
        """The windows and past boots as :meth:`Store.load_state` reads them, after a last
        catch-up; hosts forgotten meanwhile (no rows left in the store) are left out."""
        self.catch_up()
        live = self.store.report_hosts()
        with self._io:
            return (
                {h: list(rs) for h, rs in self.rows.items() if h in live and rs},
                {h: b[:-1] for h, b in self.boots.items() if h in live},
            )


def _decoded(r: ReportRow) -> ReportRow:
    return dataclasses.replace(r, loads=row_loads(r))


@dataclass
class Standby:
    """What the standby knows: the leader row it read last, and whether it won the lock."""

    leader: LeaderRow | None = None
    seen_mono: float | None = None  # when the leader row was read with the lock held
    won: bool = False
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    generation: int = 0  # of the leader's published credentials and digest read last
    differs: list[str] = field(default_factory=list)  # settings unlike the leader's


class FollowsHeaders:
    """Pure ASGI: adds ``headers()`` to every HTTP answer (those it already has win)."""

    def __init__(self, app: ASGIApp, headers: Callable[[], list[tuple[bytes, bytes]]]) -> None:
        self.app = app
        self.headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def stamped(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                have = {k.lower() for k, _ in msg.get("headers", [])}
                extra = [h for h in self.headers() if h[0] not in have]
                msg = {**msg, "headers": [*msg.get("headers", []), *extra]}
            await send(msg)

        await self.app(scope, receive, stamped)


class _Watch:
    """The standby's background work while it waits: try the leadership lock every
    ``poll_s`` (only with a clock close enough to the store's), follow the leader's
    published credentials and configuration digest, and keep the report windows warm."""

    def __init__(
        self,
        sb: Standby,
        store: Store,
        lead: Leadership,
        on_won: Callable[[], object],
        settings: ManagerSettings | None,
        wall: Callable[[], float],
    ) -> None:
        self.sb = sb
        self.store = store
        self.lead = lead
        self.on_won = on_won
        self.settings = settings
        self.wall = wall
        role, self.epoch = leader_gauges(sb.registry)
        role.set(0)
        self.offset_gauge = clock_gauge(sb.registry)
        self.refused: list[str] = []  # the refusal logged last (logged again only when it changes)
        self.differs_gauge = Gauge(
            "sova_manager_config_differs",
            "1 for each safety-relevant setting (or credential set) in which this standby's "
            "configuration differs from the leader's published digest",
            ["setting"],
            registry=sb.registry,
        )
        self.own_files = credential_files(settings) if settings is not None else ()

    def clock_ok(self) -> bool:
        """This clock is close enough to the store's to lead (issue 37, Medium 3)."""
        offset = clock_offset(self.store, self.wall)
        self.offset_gauge.set(offset)
        why = clock_refusal(offset)
        if why is not None and not self.refused:
            log.error(why)
        elif why is None and self.refused:
            log.info("this host's clock is within %.1f s of the store's again", abs(offset))
        self.refused[:] = [why] if why is not None else []
        return why is None

    def follow(self, app: FastAPI) -> None:
        """The leader's published credentials and digest (:mod:`sova.manager.daemons.service.peers`): take
        the credentials, compare the digest with this standby's own configuration."""
        guard: StandbyAuth | None = getattr(app.state, "standby_auth", None)
        settings, sb, store = self.settings, self.sb, self.store
        if settings is None or guard is None:
            return
        files = credential_files(settings)
        changed = files != self.own_files
        if changed:  # this standby's own files, for the comparison (as SIGHUP would)
            self.own_files = files
            guard.reload()
        try:
            if store.peer_generation() == sb.generation and not changed:
                return
            got = store.peer_config()
        except sa.exc.SQLAlchemyError:
            return  # a store the leader has not migrated yet: nothing published
        if got is None:
            return
        gen, operators, digest = got
        if gen != sb.generation:
            guard.published = book_from_json(operators)
            log.info(
                "standby: following the leader's credentials (generation %d, %d operator(s))",
                gen,
                len(guard.published),
            )
        self._compare(differing(settings_digest(settings, guard.own), digest))
        # Last: the routes run on other threads, and one that reads this generation must
        # read the comparison made against it.
        sb.generation = gen

    def _compare(self, diff: list[str]) -> None:
        """Log and export the settings that differ from the leader's, when they change."""
        if diff == self.sb.differs:
            return
        if diff:
            log.error(
                "standby: this manager's configuration differs from the leader's in: %s "
                "(a takeover would make it the cluster's; align the files and restart it)",
                ", ".join(diff),
            )
        else:
            log.info("standby: this manager's configuration agrees with the leader's again")
        self.differs_gauge.clear()
        for name in diff:
            self.differs_gauge.labels(name).set(1)
        self.sb.differs = diff

    async def keep_warm(self, warm: WarmWindows, catch_up_s: float) -> None:
        loop = asyncio.get_running_loop()
        first = True
        while True:
            t0 = time.monotonic()
            try:
                n = await loop.run_in_executor(None, warm.catch_up)
                log.debug("standby: %d report row(s) read in %.2f s", n, time.monotonic() - t0)
                if first:
                    # The rows live until the takeover and after it: out of the collector
                    # now, so the leader's full collection at the takeover (run_manager)
                    # walks only what the restore made (~1 s at 5,000 hosts otherwise).
                    gc.collect()
                    gc.freeze()
                    first = False
            except sa.exc.SQLAlchemyError as exc:
                log.warning("standby: cannot read the windows: %s", str(exc).splitlines()[0])
            await asyncio.sleep(catch_up_s)

    async def poll(self, app: FastAPI, poll_s: float) -> None:
        loop = asyncio.get_running_loop()
        sb = self.sb
        while True:
            row = await loop.run_in_executor(None, read_leader, self.store)
            sb.leader = row
            self.epoch.set(row.epoch if row else 0)
            await loop.run_in_executor(None, self.follow, app)
            try:
                ok = await loop.run_in_executor(None, self.clock_ok)
                got = ok and await loop.run_in_executor(None, self.lead.try_lock)
            except sa.exc.SQLAlchemyError as exc:
                log.warning("standby: cannot reach the store: %s", str(exc).splitlines()[0])
                got = False
            else:
                if row is not None and ok and not got:  # someone holds the lock: the row's leader
                    sb.seen_mono = time.monotonic()
            if got:
                log.info("standby: the leadership lock is ours; taking over")
                sb.won = True
                self.on_won()
                return
            await asyncio.sleep(poll_s)


def standby_app(
    store: Store,
    lead: Leadership,
    on_won: Callable[[], object],
    *,
    poll_s: float = 0.25,
    settings: ManagerSettings | None = None,
    warm: WarmWindows | None = None,
    catch_up_s: float = 2.0,
    wall: Callable[[], float] = time.time,
) -> tuple[FastAPI, Standby]:
    """The standby's ASGI app; ``on_won()`` is called once the leadership lock is ours.
    With ``settings`` (its credentials, the configured modes) it serves operator reads
    from the store; without, every request but the probes is 503. ``warm``: report
    windows kept up to date every ``catch_up_s`` meanwhile."""
    sb = Standby()
    watch = _Watch(sb, store, lead, on_won, settings, wall)
    reader = read_only_store(store.url) if settings is not None else None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(watch.poll(app, poll_s))]
        if warm is not None:
            tasks.append(asyncio.create_task(watch.keep_warm(warm, catch_up_s)))
        guard = getattr(app.state, "standby_auth", None)
        if guard is not None:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                # Token rotation on a standby too (systemctl reload), as on the leader.
                asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, guard.reload)
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if reader is not None:
                reader.close()

    app = FastAPI(title="Sova manager (standby)", lifespan=lifespan, openapi_url=None)
    app.add_middleware(FollowsHeaders, headers=lambda: _follows(sb))
    if settings is not None and reader is not None:
        app.add_exception_handler(RequestValidationError, validation_error)
        add_standby_reads(app, reader, settings)
    _add_standby_routes(app, sb, store, reader is not None)
    return app, sb


def _follows(sb: Standby) -> list[tuple[bytes, bytes]]:
    """Every answer says it comes from a standby, which leader it follows, and how long ago
    it last saw that leader hold the lock."""
    out = [(ROLE_HEADER.encode(), b"standby")]
    row = sb.leader
    if row is not None and row.url:
        out.append((LEADER_HEADER.encode(), row.url.encode("latin-1", "replace")))
        out.append((EPOCH_HEADER.encode(), str(row.epoch).encode()))
    if sb.seen_mono is not None:
        age = f"{time.monotonic() - sb.seen_mono:.1f}"
        out.append((SEEN_HEADER.encode(), age.encode()))
    return out


def _where(sb: Standby) -> str:
    row = sb.leader
    if row is None or not row.url:
        return "no leader is known yet"
    return f"the leader is {row.holder} at {row.url} (epoch {row.epoch})"


def _add_standby_routes(app: FastAPI, sb: Standby, store: Store, reads: bool) -> None:
    """The probes, the metrics, and a 503 naming the leader for everything else (``reads``:
    the store reads a standby serves itself are registered)."""

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "hosts": 0, "store": store.dialect, "role": "standby"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        body: dict[str, Any] = {
            "status": f"standby: {_where(sb)}",
            "hosts": 0,
            "store": store.dialect,
            "role": "standby",
            "epoch": sb.leader.epoch if sb.leader else None,
            "leader_url": sb.leader.url if sb.leader else None,
            "config_differs": sb.differs,
        }
        if sb.differs:
            body["status"] += "; its configuration differs from the leader's in: " + ", ".join(
                sb.differs
            )
        return JSONResponse(status_code=503, content=body)

    # Scraped with the viewer token the leader asks for (deploy/prometheus.yml).
    guarded = [Depends(operator_credential)] if reads else []

    @app.get("/metrics", dependencies=guarded)
    async def metrics() -> Response:
        return Response(generate_latest(sb.registry), media_type=CONTENT_TYPE_LATEST)

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    async def elsewhere(request: Request, path: str) -> JSONResponse:
        # The body is not read: a standby acts on nothing, so it needs no credential either.
        # The leader's URL is added to every answer (_follows()).
        detail = f"this manager is a standby: {_where(sb)}"
        if reads:
            detail += "; a standby answers only GET " + ", ".join(STANDBY_READS)
        return JSONResponse(
            status_code=503,
            content={"detail": detail, "role": "standby"},
            headers={"retry-after": "1"},
        )


def advertise_url(settings: ManagerSettings) -> str:
    """Where agents reach this manager: ``advertise_url``, else scheme://host:port."""
    if settings.advertise_url:
        return settings.advertise_url
    scheme = "https" if settings.tls_certfile else "http"
    host = settings.listen
    if host in ("0.0.0.0", "::", ""):
        host = socket.getfqdn()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{settings.port}"


def serve_standby(
    store: Store,
    lead: Leadership,
    settings: ManagerSettings,
    config: Callable[[Any], Any],
    warm: WarmWindows | None = None,
) -> bool:
    """Serve as a standby (``config(app)``: the leader's uvicorn configuration) until the
    leadership lock is ours (True) or a signal stops the server first (False); ``warm``
    is kept up to date meanwhile."""
    from sova.manager.daemons.systemd import notifying_uvicorn_server

    server: Any = None
    won_at: list[float] = []

    def won() -> None:
        won_at.append(time.monotonic())
        server.should_exit = True

    app, sb = standby_app(store, lead, won, settings=settings, warm=warm)
    log.info(
        "sova manager %s: standby on port %d, %s holds the store's leadership",
        _version(),
        settings.port,
        lead.holder_now(),
    )
    server = notifying_uvicorn_server(config(app))
    server.run()
    if won_at:
        # uvicorn's last line comes before asyncio joins the threads still reading the
        # store; this one comes after them.
        log.info(
            "standby: stopped serving %.2f s after the lock was ours", time.monotonic() - won_at[0]
        )
    return sb.won
