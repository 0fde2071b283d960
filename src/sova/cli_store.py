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
import sys
import time
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
    from sova.daemon.config import ConfigError, load_manager_settings
    from sova.daemon.store import Store

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
    from sova.daemon.config import ConfigError

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
    from sova.daemon.config import ConfigError
    from sova.daemon.store import AuditRow, RoundWrite

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


def register(app: typer.Typer) -> None:
    """Add ``sova store`` to the ``sova`` CLI."""
    app.add_typer(store_app)
