"""Start-up checks for the daemons: a bad setting is one line naming it, not a traceback.

The manager and the agent would otherwise discover a wrong database URL, an unreachable
PostgreSQL, a missing certificate or a port in use deep inside SQLAlchemy, ssl, uvicorn or
prometheus_client, and die with tens to hundreds of lines of stack. Each check here tries
the one thing the daemon is about to do (parse, open, load, bind) with a short timeout and
turns its failure into a :class:`ConfigError` that names the setting and its value; the
command line prints it and exits 2. Nothing is created or written here beyond a probe file
that is removed at once, so a daemon that fails preflight has touched nothing.
"""

from __future__ import annotations

import errno
import os
import socket
import ssl
import tempfile
from pathlib import Path

from sova.manager.daemons.config import (
    AGENT_REPORT_TIMEOUT_S,
    AgentSettings,
    ConfigError,
    ManagerSettings,
)

# An operator waits this long at most for a verdict on an unreachable database.
DB_CONNECT_TIMEOUT_S = 5


def check_manager(settings: ManagerSettings) -> None:
    """Raise ConfigError for the first manager setting the daemon could not start with."""
    check_takeover_timers(settings)
    check_database_url(settings.database_url)
    if settings.tls_certfile is not None and settings.tls_keyfile is not None:
        check_tls_pair(settings.tls_certfile, settings.tls_keyfile)
    check_port_free("port", settings.listen, settings.port)
    check_cloud(settings)
    check_webhook_secrets(settings)


def check_webhook_secrets(settings: ManagerSettings) -> None:
    """Every webhook endpoint's secret_file holds a key: checked at start, so a standby
    with a bad file says so now, not when it takes over."""
    from sova.manager.daemons.service.webhooks import signing_key

    for ep in settings.webhooks.endpoints.values():
        signing_key(ep)


def check_cloud(settings: ManagerSettings) -> None:
    """orchestrator = "openstack": openstacksdk is installed and clouds.yaml has the entry
    ``cloud`` names (read now; the cloud itself is asked at the first approval). Without
    this check the manager started and failed at the first approved plan (issue 38)."""
    if settings.orchestrator != "openstack" or settings.cloud is None:
        return
    from sova.orchestrator.base import CloudConfigError
    from sova.orchestrator.openstack import connect

    try:
        connect(settings.cloud, settings.openstack.api_timeout_s)
    except CloudConfigError as exc:
        raise ConfigError(str(exc)) from None


def check_takeover_timers(settings: ManagerSettings) -> None:
    """Active/standby managers (PostgreSQL): the directive TTL and the staleness bound must
    outlast what an agent needs to reach a manager that starts hearing it again (a new
    leader, or one back from a stall): one report period plus one report timeout against
    the silent manager before the next URL. Shorter, and that manager's first rounds end
    the lease of a migration the agent applied and send its source a second one
    (issue 37; docs/design.md, "Timers across a takeover"). The leader lease does not
    enter: both timers start when the manager starts hearing again, however long it was
    away. Simulated time (``clock = "agent"``) and a lone SQLite manager are not checked
    (no frozen leader beside a standby; tests run those with sub-second periods)."""
    period = settings.plan_period_s
    if period <= 0 or settings.clock == "agent":
        return
    if not settings.database_url.startswith(("postgresql:", "postgresql+")):
        return
    reach = period + AGENT_REPORT_TIMEOUT_S
    p = settings.planner
    for name, periods in (
        ("planner.directive_ttl_periods", float(p.directive_ttl_periods)),
        ("planner.stale_after_periods", p.stale_after_periods),
    ):
        if periods * period <= reach:
            raise ConfigError(
                f"{name} = {periods:g} x plan_period_s = {periods * period:g} s is not longer "
                f"than an agent needs to reach a new leader (plan_period_s + its "
                f"{AGENT_REPORT_TIMEOUT_S:g} s report timeout = {reach:g} s): a takeover "
                "would end migrations in flight; raise it"
            )


def check_agent(settings: AgentSettings) -> None:
    """Raise ConfigError for the first agent setting the daemon could not start with."""
    if settings.ca_file is not None:
        check_ca_file(settings.ca_file)
    if settings.metrics_port is not None:
        check_port_free("metrics_port", settings.metrics_addr, settings.metrics_port)


def _readable_file(setting: str, path: Path) -> None:
    try:
        if not path.is_file():
            why = "does not exist" if not path.exists() else "is not a regular file"
            raise ConfigError(f"{setting}: {str(path)!r} {why}")
        with path.open("rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read {str(path)!r}: {exc.strerror}") from None


def check_tls_pair(certfile: Path, keyfile: Path) -> None:
    _readable_file("tls_certfile", certfile)
    _readable_file("tls_keyfile", keyfile)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(str(certfile), str(keyfile))
    except ssl.SSLError as exc:
        raise ConfigError(
            f"tls_certfile/tls_keyfile: {str(certfile)!r} and {str(keyfile)!r} are not a "
            f"matching PEM certificate and key ({exc.reason or exc})"
        ) from None


def check_ca_file(path: Path) -> None:
    _readable_file("ca_file", path)
    try:
        ssl.create_default_context(cafile=str(path))
    except (ssl.SSLError, ValueError) as exc:
        raise ConfigError(
            f"ca_file: {str(path)!r} is not a PEM CA bundle ({getattr(exc, 'reason', None) or exc})"
        ) from None


def check_port_free(setting: str, addr: str, port: int) -> None:
    """Bind and release ``addr:port`` as the server will (SO_REUSEADDR, like uvicorn)."""
    if port == 0:
        return  # the kernel picks a free one
    try:
        infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"{setting}: cannot resolve address {addr!r}: {exc.strerror}") from None
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(sockaddr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(f"{setting}: {port} on {addr} is already in use") from None
            raise ConfigError(f"{setting}: cannot bind {addr}:{port}: {exc.strerror}") from None


def check_database_url(url: str) -> None:
    """Parse the URL, then open the database the way the store will (with a timeout)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
    from sqlalchemy.pool import NullPool

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise ConfigError(
            f"database_url: not a database URL (got {url!r}; e.g. sqlite:///path or "
            "postgresql://user@host/db)"
        ) from None
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite":
        _check_sqlite(parsed.database, shown)
        return
    connect_args: dict[str, object] = {}
    if parsed.get_backend_name() == "postgresql":
        connect_args["connect_timeout"] = DB_CONNECT_TIMEOUT_S
    try:
        engine = create_engine(parsed, connect_args=connect_args, poolclass=NullPool)
    except NoSuchModuleError:
        raise ConfigError(
            f"database_url: unsupported database {parsed.drivername!r} (got {shown!r})"
        ) from None
    except ImportError as exc:
        raise ConfigError(
            f"database_url: the driver for {parsed.drivername!r} is not installed "
            f"({exc.name or exc}; got {shown!r})"
        ) from None
    except ArgumentError as exc:
        raise ConfigError(f"database_url: {exc} (got {shown!r})") from None
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except DBAPIError as exc:
        first = str(exc.orig).strip().splitlines()
        raise ConfigError(
            f"database_url: cannot connect to {shown!r}: {first[0] if first else exc}"
        ) from None
    finally:
        engine.dispose()


def _check_sqlite(database: str | None, shown: str) -> None:
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ConfigError(f"database_url: the directory {str(folder)!r} does not exist ({shown})")
    if path.exists():
        if not path.is_file():
            raise ConfigError(f"database_url: {str(path)!r} is not a file ({shown})")
        if not os.access(path, os.R_OK | os.W_OK):
            raise ConfigError(f"database_url: {str(path)!r} is not writable ({shown})")
    # SQLite also writes a journal beside the file, so the directory must take a new file.
    try:
        fd, probe = tempfile.mkstemp(prefix=".sova-preflight-", dir=folder)
    except OSError as exc:
        raise ConfigError(
            f"database_url: cannot write in {str(folder)!r}: {exc.strerror} ({shown})"
        ) from None
    os.close(fd)
    os.unlink(probe)
