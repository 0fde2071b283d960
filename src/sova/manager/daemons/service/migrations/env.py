"""Alembic environment: always handed a live connection by :meth:`Store.migrate`.

The manager migrates its own schema on start-up (there is no separate ``alembic upgrade``
step for an operator to forget). To write a new revision during development:

    alembic -c /dev/null -x url=sqlite:///dev.db revision -m "..."   # then edit the file

``render_as_batch`` makes ALTERs work on SQLite, which cannot alter columns in place.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from sova.manager.daemons.service.store_schema import metadata

config = context.config
connection = config.attributes.get("connection")

if connection is not None:
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
else:  # pragma: no cover - command-line use during development
    url = context.get_x_argument(as_dictionary=True).get("url", "sqlite:///sova-manager.db")
    with create_engine(url).connect() as conn:
        context.configure(connection=conn, target_metadata=metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
