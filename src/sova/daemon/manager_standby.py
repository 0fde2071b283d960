"""A standby manager's HTTP face, while it waits for the leadership (PostgreSQL).

A standby holds no cluster state: the detector windows, leases and directives live in the
leader's memory and are read from the store only by the manager that takes over. So it
neither plans nor takes reports: agent requests and operator changes are answered 503
with the leader's URL in :data:`~sova.daemon.manager_client.LEADER_HEADER` (agents with
several manager URLs go there at once). Operator reads of what the store holds (fences,
modes, plans, audit, decisions) it answers itself, read-only
(:mod:`sova.daemon.standby_reads`); every answer names the leader it follows
(``x-sova-leader``, ``x-sova-leader-epoch``) and how long ago it last saw that leader
hold the lock (``x-sova-leader-seen-age-s``). ``/healthz`` says the process is alive,
``/readyz`` is 503 naming the leader and its epoch (a load balancer sends nothing here),
``/metrics`` says standby (to a viewer token, as the leader's). Why redirect rather than
take reports into the store, and which reads a standby serves: docs/design.md, "Active
and standby managers".

Every ``poll_s`` it tries the leadership lock; when it gets it the server stops, and the
caller (:func:`sova.daemon.manager_app.run_manager`) takes over and serves as the leader
on the same port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sova.daemon.config import ManagerSettings
from sova.daemon.http_errors import validation_error
from sova.daemon.leadership import LeaderRow, Leadership, leader_gauges, read_leader
from sova.daemon.manager_client import LEADER_HEADER
from sova.daemon.standby_reads import (
    STANDBY_READS,
    add_standby_reads,
    operator_credential,
    read_only_store,
)
from sova.daemon.store import Store
from sova.daemon.store_admin import _version

ROLE_HEADER = "x-sova-role"
EPOCH_HEADER = "x-sova-leader-epoch"
SEEN_HEADER = "x-sova-leader-seen-age-s"

log = logging.getLogger("sova.manager")


@dataclass
class Standby:
    """What the standby knows: the leader row it read last, and whether it won the lock."""

    leader: LeaderRow | None = None
    seen_mono: float | None = None  # when the leader row was read with the lock held
    won: bool = False
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)


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


def standby_app(
    store: Store,
    lead: Leadership,
    on_won: Callable[[], object],
    *,
    poll_s: float = 0.5,
    settings: ManagerSettings | None = None,
) -> tuple[FastAPI, Standby]:
    """The standby's ASGI app; ``on_won()`` is called once the leadership lock is ours.
    With ``settings`` (its credentials, the configured modes) it serves operator reads
    from the store; without, every request but the probes is 503."""
    sb = Standby()
    role, epoch = leader_gauges(sb.registry)
    role.set(0)

    async def poll() -> None:
        loop = asyncio.get_running_loop()
        while True:
            row = await loop.run_in_executor(None, read_leader, store)
            sb.leader = row
            epoch.set(row.epoch if row else 0)
            try:
                got = await loop.run_in_executor(None, lead.try_lock)
            except sa.exc.SQLAlchemyError as exc:
                log.warning("standby: cannot reach the store: %s", str(exc).splitlines()[0])
                got = False
            else:
                if row is not None and not got:  # someone holds the lock: the row's leader
                    sb.seen_mono = time.monotonic()
            if got:
                sb.won = True
                on_won()
                return
            await asyncio.sleep(poll_s)

    reader = read_only_store(store.url) if settings is not None else None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(poll())
        guard = getattr(app.state, "standby_auth", None)
        if guard is not None:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                # Token rotation on a standby too (systemctl reload), as on the leader.
                asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, guard.reload)
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if reader is not None:
                reader.close()

    app = FastAPI(title="Sova manager (standby)", lifespan=lifespan, openapi_url=None)

    def follows() -> list[tuple[bytes, bytes]]:
        """Every answer says it comes from a standby, which leader it follows, and how
        long ago it last saw that leader hold the lock."""
        out = [(ROLE_HEADER.encode(), b"standby")]
        row = sb.leader
        if row is not None and row.url:
            out.append((LEADER_HEADER.encode(), row.url.encode("latin-1", "replace")))
            out.append((EPOCH_HEADER.encode(), str(row.epoch).encode()))
        if sb.seen_mono is not None:
            age = f"{time.monotonic() - sb.seen_mono:.1f}"
            out.append((SEEN_HEADER.encode(), age.encode()))
        return out

    app.add_middleware(FollowsHeaders, headers=follows)
    if settings is not None and reader is not None:
        app.add_exception_handler(RequestValidationError, validation_error)
        add_standby_reads(app, reader, settings)

    def where() -> str:
        row = sb.leader
        if row is None or not row.url:
            return "no leader is known yet"
        return f"the leader is {row.holder} at {row.url} (epoch {row.epoch})"

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "hosts": 0, "store": store.dialect, "role": "standby"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        body = {
            "status": f"standby: {where()}",
            "hosts": 0,
            "store": store.dialect,
            "role": "standby",
            "epoch": sb.leader.epoch if sb.leader else None,
            "leader_url": sb.leader.url if sb.leader else None,
        }
        return JSONResponse(status_code=503, content=body)

    # Scraped with the viewer token the leader asks for (deploy/prometheus.yml).
    guarded = [Depends(operator_credential)] if reader is not None else []

    @app.get("/metrics", dependencies=guarded)
    async def metrics() -> Response:
        return Response(generate_latest(sb.registry), media_type=CONTENT_TYPE_LATEST)

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    async def elsewhere(request: Request, path: str) -> JSONResponse:
        # The body is not read: a standby acts on nothing, so it needs no credential either.
        # The leader's URL is added to every answer (follows()).
        detail = f"this manager is a standby: {where()}"
        if reader is not None:
            detail += "; a standby answers only GET " + ", ".join(STANDBY_READS)
        return JSONResponse(
            status_code=503,
            content={"detail": detail, "role": "standby"},
            headers={"retry-after": "1"},
        )

    return app, sb


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
    store: Store, lead: Leadership, settings: ManagerSettings, config: Callable[[Any], Any]
) -> bool:
    """Serve as a standby (``config(app)``: the leader's uvicorn configuration) until the
    leadership lock is ours (True) or a signal stops the server first (False)."""
    from sova.daemon.systemd import notifying_uvicorn_server

    server: Any = None

    def won() -> None:
        server.should_exit = True

    app, sb = standby_app(store, lead, won, settings=settings)
    log.info(
        "sova manager %s: standby on port %d, %s holds the store's leadership",
        _version(),
        settings.port,
        lead.holder_now(),
    )
    server = notifying_uvicorn_server(config(app))
    server.run()
    return sb.won
