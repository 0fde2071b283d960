"""The tables of the manager's store (:mod:`sova.manager.daemons.service.store`), one declaration each.

Apart from the queries (store.py, store_round.py, store_logs.py), which all read them,
and because Alembic's environment (``migrations/env.py``) compares a store against them.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from sova.manager.daemons.service.store_outbox import outbox_metadata

metadata = sa.MetaData()
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

host_reports = sa.Table(
    "host_reports",
    metadata,
    sa.Column("id", _ID, primary_key=True, autoincrement=True),
    sa.Column("host", sa.String(64), nullable=False),
    sa.Column("seq", sa.BigInteger(), nullable=False),
    sa.Column("agent_t", sa.Float(), nullable=False),
    sa.Column("received_s", sa.Float(), nullable=False),
    sa.Column("cpu", sa.Float(), nullable=False),
    sa.Column("mem", sa.Float(), nullable=False),
    sa.Column("net", sa.Float(), nullable=False),
    sa.Column("vms", sa.JSON(), nullable=False),
    sa.Column("capacity", sa.JSON(), nullable=True),  # [cores, MiB, Mbit/s] (revision 0003)
    sa.Column("boot", sa.String(16), nullable=True),  # the agent's boot id (revision 0003)
    sa.Index("ix_host_reports_host_id", "host", "id"),
    sa.Index("ix_host_reports_received", "received_s"),
)
decisions = sa.Table(
    "decisions",
    metadata,
    sa.Column("id", _ID, primary_key=True, autoincrement=False),
    sa.Column("time_s", sa.Float(), nullable=False),
    sa.Column("host", sa.String(64), nullable=False),
    sa.Column("flag", sa.Boolean(), nullable=False),
    sa.Column("target", sa.String(64), nullable=True),
    sa.Column("vm", sa.String(64), nullable=True),
    sa.Column("reason", sa.Text(), nullable=False),
    sa.Column("hot_resources", sa.JSON(), nullable=False),
    sa.Column("inputs", sa.JSON(), nullable=False),
    sa.Index("ix_decisions_host", "host", "id"),
)
leases = sa.Table(
    "leases",
    metadata,
    sa.Column("vm", sa.String(64), primary_key=True),
    sa.Column("src", sa.String(64), nullable=False),
    sa.Column("dst", sa.String(64), nullable=False),
    sa.Column("since_s", sa.Float(), nullable=False),
    sa.Column("decision_id", sa.BigInteger(), nullable=False),
)
directives = sa.Table(
    "directives",
    metadata,
    sa.Column("host", sa.String(64), primary_key=True),
    sa.Column("id", sa.BigInteger(), nullable=False),
    sa.Column("flag", sa.Boolean(), nullable=False),
    sa.Column("target", sa.String(64), nullable=True),
    sa.Column("vm", sa.String(64), nullable=True),
    sa.Column("issued_s", sa.Float(), nullable=False),
    sa.Column("acked", sa.Boolean(), nullable=False),
)
migrations = sa.Table(
    "migrations",
    metadata,
    sa.Column("id", _ID, primary_key=True, autoincrement=False),
    sa.Column("vm", sa.String(64), nullable=False),
    sa.Column("src", sa.String(64), nullable=False),
    sa.Column("dst", sa.String(64), nullable=False),
    sa.Column("started_s", sa.Float(), nullable=False),
    sa.Column("ended_s", sa.Float(), nullable=True),
    sa.Column("result", sa.String(16), nullable=False),
    sa.Column("detail", sa.Text(), nullable=False),
    sa.Index("ix_migrations_vm", "vm", "id"),
)

plans = sa.Table(
    "plans",
    metadata,
    sa.Column("id", _ID, primary_key=True, autoincrement=False),
    sa.Column("created_s", sa.Float(), nullable=False),
    sa.Column("expires_s", sa.Float(), nullable=False),
    sa.Column("host", sa.String(64), nullable=False),
    sa.Column("vm", sa.String(64), nullable=False),
    sa.Column("dst", sa.String(64), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text(), nullable=False),
    sa.Column("inputs", sa.JSON(), nullable=False),
    sa.Column("expected", sa.JSON(), nullable=False),
    sa.Column("decided_by", sa.String(128), nullable=True),
    sa.Column("decided_s", sa.Float(), nullable=True),
    sa.Column("detail", sa.Text(), nullable=False),
    sa.Index("ix_plans_state", "state", "id"),
)

fences = sa.Table(
    "fences",
    metadata,
    sa.Column("kind", sa.String(16), primary_key=True),
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("set_by", sa.String(128), nullable=False),
    sa.Column("since_s", sa.Float(), nullable=False),
    sa.Column("reason", sa.Text(), nullable=False),
    sa.Column("until_s", sa.Float(), nullable=True),  # 0007: lifted by the round after it
)

modes = sa.Table(
    "modes",
    metadata,
    sa.Column("scope", sa.String(64), primary_key=True),  # "*" = the cluster, else a host
    sa.Column("mode", sa.String(16), nullable=False),
    sa.Column("set_by", sa.String(128), nullable=False),
    sa.Column("since_s", sa.Float(), nullable=False),
)

audit = sa.Table(
    "audit",
    metadata,
    sa.Column("id", _ID, primary_key=True, autoincrement=True),
    sa.Column("time_s", sa.Float(), nullable=False),
    sa.Column("who", sa.String(128), nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("subject", sa.String(160), nullable=False),
    sa.Column("detail", sa.Text(), nullable=False),
)

# Who plans on this store and its epoch, the fencing token (revision 0004; one row, id 1):
# raised by every takeover, checked by every write of decisions, leases and directives.
leader = sa.Table(
    "leader",
    metadata,
    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("epoch", sa.BigInteger(), nullable=False),
    sa.Column("holder", sa.String(200), nullable=False),
    sa.Column("url", sa.String(500), nullable=False),
    sa.Column("since_s", sa.Float(), nullable=False),
)

# What the leader publishes for its standbys (revision 0005; one row, id 1): its operator
# credentials (digests only) and a digest of its safety-relevant settings.
peer_config = sa.Table(
    "peer_config",
    metadata,
    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("generation", sa.BigInteger(), nullable=False),
    sa.Column("epoch", sa.BigInteger(), nullable=False),
    sa.Column("operators", sa.JSON(), nullable=False),
    sa.Column("digest", sa.JSON(), nullable=False),
    sa.Column("since_s", sa.Float(), nullable=False),
)
# The webhooks' outbox (store_outbox.py, revision 0006) is one of the store's tables too:
# what walks every table (a reset, a copy, the check of an unversioned store) sees it.
for _t in outbox_metadata.tables.values():
    _t.to_metadata(metadata)

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
