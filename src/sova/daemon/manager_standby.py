"""A standby manager's HTTP face, while it waits for the leadership (PostgreSQL).

A standby holds no cluster state: the detector windows, leases and directives live in the
leader's memory and are read from the store only by the manager that takes over. So it
neither plans nor takes reports: agent and operator requests are answered 503 with the
leader's URL in :data:`~sova.daemon.manager_client.LEADER_HEADER` (agents with several
manager URLs go there at once); ``/healthz`` says the process is alive, ``/readyz`` is 503
naming the leader and its epoch (a load balancer sends nothing here), ``/metrics`` says
standby. Why redirect rather than take reports into the store: docs/design.md, "Active
and standby managers".

Every ``poll_s`` it tries the leadership lock; when it gets it the server stops, and the
caller (:func:`sova.daemon.manager_app.run_manager`) takes over and serves as the leader
on the same port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from sova.daemon.config import ManagerSettings
from sova.daemon.leadership import LeaderRow, Leadership, leader_gauges, read_leader
from sova.daemon.manager_client import LEADER_HEADER
from sova.daemon.store import Store
from sova.daemon.store_admin import _version

log = logging.getLogger("sova.manager")


@dataclass
class Standby:
    """What the standby knows: the leader row it read last, and whether it won the lock."""

    leader: LeaderRow | None = None
    won: bool = False
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)


def standby_app(
    store: Store, lead: Leadership, on_won: Callable[[], object], *, poll_s: float = 0.5
) -> tuple[FastAPI, Standby]:
    """The standby's ASGI app; ``on_won()`` is called once the leadership lock is ours."""
    sb = Standby()
    role, epoch = leader_gauges(sb.registry)
    role.set(0)

    async def poll() -> None:
        loop = asyncio.get_running_loop()
        while True:
            sb.leader = await loop.run_in_executor(None, read_leader, store)
            epoch.set(sb.leader.epoch if sb.leader else 0)
            try:
                got = await loop.run_in_executor(None, lead.try_lock)
            except sa.exc.SQLAlchemyError as exc:
                log.warning("standby: cannot reach the store: %s", str(exc).splitlines()[0])
                got = False
            if got:
                sb.won = True
                on_won()
                return
            await asyncio.sleep(poll_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(poll())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app = FastAPI(title="Sova manager (standby)", lifespan=lifespan, openapi_url=None)

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

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(sb.registry), media_type=CONTENT_TYPE_LATEST)

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    async def elsewhere(request: Request, path: str) -> JSONResponse:
        # The body is not read: a standby acts on nothing, so it needs no credential either.
        headers = {"retry-after": "1"}
        if sb.leader is not None and sb.leader.url:
            headers[LEADER_HEADER] = sb.leader.url
        return JSONResponse(
            status_code=503,
            content={"detail": f"this manager is a standby: {where()}", "role": "standby"},
            headers=headers,
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

    app, sb = standby_app(store, lead, won)
    log.info(
        "sova manager %s: standby on port %d, %s holds the store's leadership",
        _version(),
        settings.port,
        lead.holder_now(),
    )
    server = notifying_uvicorn_server(config(app))
    server.run()
    return sb.won
