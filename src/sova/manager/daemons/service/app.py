"""``sova manager``: the cluster's Monitor, Analyse, Plan and Knowledge over HTTP (Sova Fig. 3).

This module builds the manager's app (the service, the guard, the 422 that names the
field, one router per OpenAPI tag), publishes the OpenAPI document, and starts the
server. The routes are in :mod:`sova.manager.daemons.service.routes_agents` and
:mod:`sova.manager.daemons.service.routes_operators`; the behaviour behind them is
:class:`sova.manager.daemons.service.service.ManagerService`; the guard in front of them (tokens,
body limits) is :mod:`sova.manager.daemons.service.guard`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import signal
import ssl
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from prometheus_client import CollectorRegistry

from sova import __version__
from sova.manager.daemons.config import ManagerSettings
from sova.manager.daemons.conn_guard import base_protocol, guarded
from sova.manager.daemons.gc_pacing import PACE_S, thresholds, young_collections
from sova.manager.daemons.schema import PROTOCOL
from sova.manager.daemons.security import exposure_check
from sova.manager.daemons.service.guard import GuardMiddleware
from sova.manager.daemons.service.http_errors import validation_error
from sova.manager.daemons.service.leadership import (
    Leadership,
    clock_offset,
    clock_refusal,
    leader_gauges,
    step_down,
)
from sova.manager.daemons.service.routes_agents import ReportFastPath
from sova.manager.daemons.service.routes_agents import router as agents_router
from sova.manager.daemons.service.routes_operators import router as operators_router
from sova.manager.daemons.service.service import ManagerService
from sova.manager.daemons.service.standby import WarmWindows, advertise_url, serve_standby
from sova.manager.daemons.service.store import Store
from sova.manager.daemons.service.web_console import console_router
from sova.orchestrator.base import Actuator

log = logging.getLogger("sova.manager")


def create_app(
    settings: ManagerSettings,
    store: Store,
    *,
    clock: Callable[[], float] | None = None,
    registry: CollectorRegistry | None = None,
    migrate: bool = True,
    fork_planner: bool = False,
    actuator_for: Callable[[str], Actuator] | None = None,
    monotonic: Callable[[], float] | None = None,
    epoch: int | None = None,
    warm: WarmWindows | None = None,
    gc_pace_s: float = 0.0,
) -> FastAPI:
    """The manager's ASGI app: migrates the store, restores state, wires the routers.
    ``epoch``: the leadership epoch this manager leads (PostgreSQL; None on SQLite);
    ``warm``: report windows a standby read ahead (the restore reads only what is new);
    ``gc_pace_s``: young garbage collections this often while serving (0: CPython's own,
    :mod:`sova.manager.daemons.gc_pacing`)."""
    if migrate:
        store.migrate()
    service = ManagerService(
        settings,
        store,
        clock=clock,
        registry=registry,
        fork_planner=fork_planner,
        actuator_for=actuator_for,
        monotonic=monotonic,
    )
    service.restore(warm)
    service.publish_peers()  # the standbys authorize with these credentials (peers.py)
    role_gauge, epoch_gauge = leader_gauges(service.metrics.registry)
    role_gauge.set(1)
    epoch_gauge.set(epoch or 0)
    app = FastAPI(
        title="Sova manager",
        version=f"{__version__} (wire protocol {PROTOCOL})",
        summary="Cluster manager of Sova: host reports in, migration directives out.",
        description=(
            "Agents POST a compact report each period and get their migration directive "
            "`<flag, target, vm>` in the response. Report fields have one-letter names to "
            "keep a report under 304 bytes; each field's description gives its meaning."
        ),
        lifespan=_lifespan,
    )
    # What the routers' dependencies read (routes.Service, /readyz's epoch).
    app.state.service = service
    app.state.epoch = epoch
    app.state.gc_pace_s = gc_pace_s
    # Added first, so it sits inside the guard (the last added is the outermost).
    app.add_middleware(ReportFastPath)
    app.add_middleware(GuardMiddleware, service=service)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.include_router(agents_router)
    app.include_router(operators_router)
    app.include_router(console_router())  # /console/: the web console (not in OpenAPI)
    return app


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The service's background tasks (timer rounds, flusher, pruner, watches) while the
    app serves; SIGHUP re-reads the credentials."""
    service: ManagerService = app.state.service
    bg = asyncio.create_task(service.run_background())
    pace: float = app.state.gc_pace_s
    tasks = [bg, *([asyncio.create_task(young_collections(pace))] if pace > 0 else [])]
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        # Token rotation without a restart (only where signals reach this loop).
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, service.reload_tokens)
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await service.close()


def openapi_document(app: FastAPI) -> str:
    # The published document names the wire protocol, not the build: it changes with the
    # API, not with every commit (a live manager's /openapi.json names its build too).
    doc = {**app.openapi()}
    doc["info"] = {**doc["info"], "version": f"wire protocol {PROTOCOL}"}
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def run_manager(settings: ManagerSettings) -> None:
    """Serve until SIGINT/SIGTERM (uvicorn's handlers), then flush the store and exit."""

    from sova.manager.daemons.logs import configure as configure_logging
    from sova.manager.daemons.logs import dump_stacks_on_signal
    from sova.manager.daemons.systemd import Watchdog, notifying_uvicorn_server, round_progress

    configure_logging(settings.log_level)
    dump_stacks_on_signal()
    # A planning round runs in a worker thread; with the default 5 ms GIL switch interval it
    # can hold up a report for tens of ms. 1 ms keeps the event loop responsive during it.
    sys.setswitchinterval(0.001)
    _raise_nofile(settings.http.max_connections + 256)
    warnings = exposure_check(settings)  # refuses an exposed manager without auth/TLS
    store = Store(settings.database_url, lease_s=settings.leader_lease_s)
    taken = _become_writer(store, settings)
    if taken is None:
        store.close()
        return  # stopped while a standby
    lead, warm = taken
    took = time.monotonic()
    app = create_app(
        settings,
        store,
        fork_planner=True,
        actuator_for=_actuators(settings),
        epoch=lead.epoch if lead else None,
        warm=warm,
        gc_pace_s=PACE_S,
    )
    if lead is not None:
        log.info(
            "leader at epoch %s: store restored in %.1f s (%s)",
            lead.epoch,
            time.monotonic() - took,
            "windows read ahead by this standby" if warm else "windows read now",
        )
    # Warned once the store is ours and migrated: a manager refused for its store then
    # prints that one line alone.
    for warning in warnings:
        log.warning(warning)
    # The manager keeps ~100 objects per host alive (windows, VM loads) and every report
    # makes short-lived garbage; with CPython's default thresholds a full collection walks
    # all of them every few seconds (tens of ms at 10,000 hosts). Young objects are
    # collected on a pace (gc_pacing: CPython's own trigger let a period of reports pile
    # up, 100-240 ms a pass), full passes rarely; restored state is frozen out of the
    # collector.
    if warm is None:
        # A warm standby froze its rows before; a full pass now (~1 s at 10,000 hosts)
        # would delay its first answer for at most a restore's few cyclic leftovers.
        gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds())
    config = uvicorn_config(app, settings)
    log.info(
        "sova manager %s on %s://%s:%d, store %s",
        __version__,
        "https" if settings.tls_certfile else "http",
        settings.listen,
        settings.port,
        store.dialect,
    )
    try:
        svc = app.state.service
        # Pinged only while planning makes progress: a round hung past WatchdogSec restarts
        # the manager (a ping from the HTTP loop alone would keep a dead planner alive).
        watchdog = Watchdog(round_progress(lambda: svc.rounds, lambda: svc.planning))
        notifying_uvicorn_server(config, watchdog).run()
    finally:
        if lead is not None:
            lead.close()
        store.close()


def _become_writer(
    store: Store, settings: ManagerSettings
) -> tuple[Leadership | None, WarmWindows | None] | None:
    """This manager's right to write the store. PostgreSQL: the leadership, after serving
    as a standby while another manager leads, and the report windows it read meanwhile;
    SQLite: the store's writer lock, no leadership. None: stopped while a standby."""
    if store.dialect != "postgresql":
        store.lock_writer()  # a second manager on one SQLite store exits here (StoreBusy)
        return None, None
    lead = Leadership(
        store, advertise_url(settings), lease_s=settings.leader_lease_s, on_lost=step_down
    )
    serving = lambda standby: uvicorn_config(standby, settings)  # noqa: E731
    warm: WarmWindows | None = None
    # A clock too far from the store's waits as a standby (which says why) instead.
    if clock_refusal(clock_offset(store)) is not None or not lead.try_lock():
        # A warm standby: the windows are read while it waits, not when it takes over.
        warm = WarmWindows(store, settings.planner.n)
        if not serve_standby(store, lead, settings, serving, warm):
            lead.close()
            return None
    lead.start_heartbeat()  # from now on: a long migration must not idle the lock out
    t0 = time.monotonic()
    store.migrate()  # only a leader migrates: a newer standby waits for its turn
    t1 = time.monotonic()
    lead.take_over()
    # Each step of a takeover timed in the journal: a slow one says which step was slow.
    log.info(
        "takeover steps: schema checked in %.2f s, epoch raised in %.2f s",
        t1 - t0,
        time.monotonic() - t1,
    )
    if warm is not None and store.migrated:
        warm = None  # the schema changed under the rows read: read them afresh
    return lead, warm


def uvicorn_config(app: Any, settings: ManagerSettings) -> Any:
    """How the manager (leader or standby) is served: one connection guard, TLS in it."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=settings.listen,
        port=settings.port,
        log_level=settings.log_level,
        log_config=None,  # uvicorn logs through the handler configure_logging installed
        access_log=False,  # 1,000 reports/s would drown the journal
        timeout_keep_alive=int(max(1, settings.http.idle_timeout_s)),
        # uvicorn's limit counts idle connections too (idle clients would 503 everyone);
        # the guard bounds connections instead, evicting idle ones first.
        limit_concurrency=None,
        h11_max_incomplete_event_size=settings.http.max_header_bytes,
        # TLS in the connection guard, so a handshake is limited and timed (issue 21)
        http=guarded(base_protocol(), settings.http, server_tls(settings)),
        backlog=4096,
    )


def server_tls(settings: ManagerSettings) -> ssl.SSLContext | None:
    """The manager's TLS context (uvicorn's defaults: TLS 1.2+, the certificate chain)."""
    if settings.tls_certfile is None or settings.tls_keyfile is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(settings.tls_certfile), str(settings.tls_keyfile))
    return ctx


def _actuators(settings: ManagerSettings) -> Callable[[str], Actuator] | None:
    """orchestrator = "openstack": approved plans are carried out through Nova by the
    manager (one actuator per source host, made when first needed)."""
    if settings.orchestrator != "openstack":
        return None
    from sova.orchestrator.settings import openstack_actuator

    made: dict[str, Actuator] = {}

    def actuator_for(host: str) -> Actuator:
        if host not in made:
            made[host] = openstack_actuator(settings, host)
        return made[host]

    return actuator_for


def _raise_nofile(want: int) -> None:
    """Room for ``max_connections`` sockets: the default soft limit (often 1,024) would make
    accept() fail long before the guard's limits apply."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def main(argv: list[str] | None = None) -> None:
    """``python -m sova.manager.daemons.service.app --openapi docs/openapi.json`` publishes the spec."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--openapi", type=Path, required=True)
    args = ap.parse_args(argv)
    app = create_app(ManagerSettings(), Store("sqlite://"))
    args.openapi.write_text(openapi_document(app))


if __name__ == "__main__":
    main()
