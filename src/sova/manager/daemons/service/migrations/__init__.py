"""Alembic environment of the manager's knowledge store (run by ``Store.migrate``)."""
