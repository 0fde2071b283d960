"""``sova webhooks``: the newest webhook deliveries, read from the manager's store
(docs/operations.md#webhooks): which event went to which endpoint, delivered, retrying or
given up, after how many attempts, and the last error.

Like ``sova store``, it reads ``database_url`` from the manager's configuration
(``--config``, the ``SOVA_MANAGER_*`` environment) or ``--database-url``, on a machine
that reaches the store. Exit codes: 0 listed; 2 bad input or a store without the outbox.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer

from sova.cli_store import ConfigOpt, UrlOpt, _fail, _open


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
            "delivered" if r.delivered_s is not None else "given up" if r.given_up else "retrying"
        )
        typer.echo(
            f"{r.event_id:>8}  {r.kind:<22} {r.endpoint:<16} {state:<10} {r.attempts:>5}  "
            f"{r.error}".rstrip()
        )


def register(app: typer.Typer) -> None:
    """Add ``sova webhooks`` to the ``sova`` CLI."""
    app.command("webhooks")(webhooks)
