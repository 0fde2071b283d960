"""``sova store backup PATH`` / ``sova store restore PATH``: the manager's knowledge store
(docs/operations.md, "Backup and restore").

Both read ``database_url`` from the manager's configuration (``--config``, the
``SOVA_MANAGER_*`` environment) or ``--database-url``. A backup is taken while the manager
runs (SQLite's online backup API; ``pg_dump`` for PostgreSQL). A restore needs the manager
stopped: on SQLite it takes the same writer lock as a manager, so it refuses to run under
one. The restored store is migrated to this Sova's schema, and the next manager start
gives decision ids a new, higher epoch, so no agent mistakes a new directive for one it
already applied.

Exit codes: 0 done; 2 bad input, or the store is in use or newer than this Sova.
"""

from __future__ import annotations

import getpass
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

store_app = typer.Typer(
    name="store",
    help="Back up or restore the manager's knowledge store.",
    no_args_is_help=True,
)

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="The manager's config file (for database_url)."),
]
UrlOpt = Annotated[
    str | None,
    typer.Option("--database-url", help="SQLAlchemy URL: sqlite:///path or postgresql://…"),
]


def _fail(msg: str) -> typer.Exit:
    print(f"error: {msg}", file=sys.stderr, flush=True)
    return typer.Exit(2)


def _open(config: Path | None, database_url: str | None):  # type: ignore[no-untyped-def]
    from sova.manager.daemons.config import ConfigError, load_manager_settings
    from sova.manager.daemons.service.store import Store

    try:
        settings = load_manager_settings(config, overrides={"database_url": database_url})
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    return Store(settings.database_url)


@store_app.command("backup")
def backup(
    path: Annotated[Path, typer.Argument(help="Where to write the backup (replaced).")],
    config: ConfigOpt = None,
    database_url: UrlOpt = None,
) -> None:
    """A consistent copy of the store, taken while the manager runs."""
    from sova.manager.daemons.config import ConfigError

    store = _open(config, database_url)
    try:
        store.backup(path)
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    finally:
        store.close()
    typer.echo(f"backed up the {store.dialect} store to {path}")


@store_app.command("restore")
def restore(
    path: Annotated[Path, typer.Argument(help="A backup made by `sova store backup`.")],
    config: ConfigOpt = None,
    database_url: UrlOpt = None,
) -> None:
    """Replace the store with a backup (stop the manager first)."""
    from sova.manager.daemons.config import ConfigError
    from sova.manager.daemons.service.store import AuditRow, RoundWrite

    store = _open(config, database_url)
    try:
        store.lock_writer()  # SQLite: refuses while a manager runs on this store
        store.restore(path)
        store.write_round(
            RoundWrite(audit=[AuditRow(time.time(), _who(), "store restore", str(path), "")])
        )
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    finally:
        store.close()
    typer.echo(f"restored the {store.dialect} store from {path}; start the manager")


def _who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "sova"


# ``sova webhooks``: the newest webhook deliveries, read from the store like ``sova store``
# (docs/operations.md#webhooks). Exit codes: 0 listed; 2 bad input or a store without the
# outbox (older than revision 0006).
def webhooks(
    config: ConfigOpt = None,
    database_url: UrlOpt = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Newest deliveries shown.")] = 20,
    output: Annotated[
        str, typer.Option("--output", "-o", help="table or json.", case_sensitive=False)
    ] = "table",
) -> None:
    """The newest webhook deliveries, newest first."""
    import sqlalchemy as sa

    if output not in ("table", "json"):
        raise _fail(f"--output {output!r}: table or json")
    store = _open(config, database_url)
    try:
        rows = store.deliveries(limit)
    except sa.exc.DBAPIError:
        raise _fail(
            "the store has no webhook outbox (schema older than 0006): start a manager of "
            "this version on it first"
        ) from None
    finally:
        store.close()
    if output == "json":
        typer.echo(json.dumps([asdict(r) for r in rows], indent=2))
        return
    typer.echo(f"{'EVENT':>8}  {'KIND':<22} {'ENDPOINT':<16} {'STATE':<10} {'TRIES':>5}  ERROR")
    for r in rows:
        state = (
            "delivered"
            if r.delivered_s is not None
            else "given up"
            if r.given_up
            else "retrying"
            if r.attempts
            else "pending"
        )
        typer.echo(
            f"{r.event_id:>8}  {r.kind:<22} {r.endpoint:<16} {state:<10} {r.attempts:>5}  "
            f"{r.error}".rstrip()
        )


def register(app: typer.Typer) -> None:
    """Add ``sova store`` and ``sova webhooks`` to the ``sova`` CLI."""
    app.add_typer(store_app)
    app.command("webhooks")(webhooks)
