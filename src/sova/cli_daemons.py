"""``sova agent``, ``sova manager`` and ``sova demo``: the daemons' command lines.

Kept out of ``sova.cli`` so the simulator's CLI does not import FastAPI, SQLAlchemy or
uvicorn; ``sova.cli`` calls :func:`register` to add these commands. Every option also has a
config-file key and an environment variable (see ``docs/operations.md``); the command
line wins, then the environment, then the file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

err = Console(stderr=True, emoji=False)  # ":x:" in a value is text, not an emoji

DriverOpt = Annotated[
    str | None,
    typer.Option("--driver", help="libvirt | sim | mock | remote (sim: --connect scenario.yaml)."),
]


LogFormatOpt = Annotated[
    str | None,
    typer.Option(
        "--log-format",
        help="auto (journal under systemd, else text) | journal | json | text "
        "[env: SOVA_LOG_FORMAT].",
    ),
]


def _fail(msg: str, code: int = 2) -> typer.Exit:
    from sova.manager.daemons.logs import stderr_is_journal

    if stderr_is_journal():  # one journal entry at priority err, no colour codes
        print(f"<3>error: {msg}", file=sys.stderr, flush=True)
    else:
        err.print(f"[red]error:[/red] {escape(msg)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _fatal(role: str, exc: BaseException) -> typer.Exit:
    """Any error that stops a daemon, as one line; the traceback only at debug level."""
    import logging

    logging.getLogger(f"sova.{role}").debug("fatal error", exc_info=exc)
    first = (str(exc).strip().splitlines() or [""])[0]
    return _fail(f"sova {role} stopped: {type(exc).__name__}: {first}", code=1)


def _log_format(value: str | None) -> None:
    import os

    from sova.manager.daemons.logs import FORMATS

    if value is None:
        return
    if value not in FORMATS:
        raise _fail(f"--log-format: {value!r} is not one of {', '.join(FORMATS)}")
    os.environ["SOVA_LOG_FORMAT"] = value


def agent(
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Agent TOML file (see deploy/agent.toml)."),
    ] = None,
    driver: DriverOpt = None,
    connect: Annotated[
        str | None,
        typer.Option("--connect", help="libvirt URI, scenario file (sim) or world URL (remote)."),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option("--host", help="This host's name at the manager."),
    ] = None,
    manager_url: Annotated[
        str | None,
        typer.Option("--manager-url", help="Manager base URL; omit to run standalone."),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Decide and log every action; submit none."),
    ] = False,
    loop: Annotated[
        bool,
        typer.Option(
            "--loop",
            help="With --driver libvirt --dry-run: keep running and logging instead of "
            "printing the inventory once.",
        ),
    ] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", help="Serve Prometheus metrics on this port."),
    ] = None,
    metrics_addr: Annotated[
        str | None,
        typer.Option(
            "--metrics-addr",
            help="Address the metrics port binds [default: 127.0.0.1; 0.0.0.0 or :: for a "
            "central Prometheus].",
        ),
    ] = None,
    speed: Annotated[
        float | None,
        typer.Option("--speed", help="--driver sim: simulated seconds per real second."),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option("--policy", help="--driver sim/remote: the scenario policy to run."),
    ] = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Run the host agent: local VF scheduling and bandwidth allocation, reports to the manager.

    Keeps scheduling when the manager is unreachable. On start it adopts what the driver
    shows (VF holders, limits, migrations in flight). With --driver libvirt --dry-run it
    opens libvirt read-only, prints the host and the actions it would take, and exits.
    """
    from sova.cli_agent import AgentExit, run_agent_command

    try:
        code = run_agent_command(
            config=config,
            driver=driver,
            connect=connect,
            host=host,
            manager_url=manager_url,
            dry_run=dry_run,
            loop=loop,
            metrics_port=metrics_port,
            metrics_addr=metrics_addr,
            speed=speed,
            policy=policy,
            log_format=log_format,
        )
    except AgentExit as stop:
        raise (_fail(stop.message, stop.code) if stop.message else typer.Exit(stop.code)) from None
    raise typer.Exit(code)


def manager(
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Manager TOML file (see deploy/manager.toml)."),
    ] = None,
    listen: Annotated[
        str | None,
        typer.Option("--listen", help="Address to bind [default: 127.0.0.1]."),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", help="Port [default: 8700]."),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option("--database-url", help="SQLAlchemy URL: sqlite:///path or postgresql://…"),
    ] = None,
    openapi: Annotated[
        Path | None,
        typer.Option("--openapi", help="Write the OpenAPI document to this file and exit."),
    ] = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Run the cluster manager: reports in, migration directives out, decision log, metrics."""
    from sova.manager.daemons.config import ConfigError, load_manager_settings

    _log_format(log_format)
    try:
        settings = load_manager_settings(
            config, overrides={"listen": listen, "port": port, "database_url": database_url}
        )
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    from sova.manager.daemons.service.app import create_app, openapi_document, run_manager
    from sova.manager.daemons.service.store import Store

    if openapi is not None:
        openapi.write_text(openapi_document(create_app(settings, Store("sqlite://"))))
        typer.echo(f"wrote {openapi}")
        return
    from sova.manager.daemons.preflight import check_manager

    try:
        check_manager(settings)
        run_manager(settings)
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    except Exception as exc:
        bad = _bad_store(exc, settings.database_url)
        if bad is not None:
            raise _fail(bad) from None
        raise _fatal("manager", exc) from None


def _bad_store(exc: BaseException, url: str) -> str | None:
    """A store the operator pointed at that cannot be this manager's (bad input, exit 2),
    as one line naming database_url; None for any other failure."""
    from sova.cli_operator import _redact

    text = (str(exc).strip().splitlines() or [""])[0]
    where = f"database_url = {_redact(url)!r}"
    if type(exc).__name__ == "DatabaseError" and "not a database" in text:
        return f"{where}: not a SQLite database (file is not a database)"
    if type(exc).__name__ == "CommandError" and "Can't locate revision" in text:
        rev = text.rsplit(" ", 1)[-1]
        return (
            f"{where}: the store's schema revision {rev} is unknown to sova "
            f"(written by a newer version?): upgrade sova or use another store"
        )
    return None


def register(app: typer.Typer) -> None:
    """Add the daemon commands to the ``sova`` CLI."""
    app.command()(agent)
    app.command()(manager)
    try:
        from sova.demo import demo
    except ImportError:  # pragma: no cover - the demo needs the simulator
        return
    app.command()(demo)


if __name__ == "__main__":  # python -m sova.cli_daemons …, before sova.cli registers us
    _app = typer.Typer(add_completion=False, no_args_is_help=True)
    register(_app)
    _app()
