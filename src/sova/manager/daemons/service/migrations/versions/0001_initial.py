"""Initial knowledge store: report history, decisions, leases, directives, migrations.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite autoincrements INTEGER only


def upgrade() -> None:
    op.create_table(
        "host_reports",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("host", sa.String(64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("agent_t", sa.Float(), nullable=False),
        sa.Column("received_s", sa.Float(), nullable=False),
        sa.Column("cpu", sa.Float(), nullable=False),
        sa.Column("mem", sa.Float(), nullable=False),
        sa.Column("net", sa.Float(), nullable=False),
        sa.Column("vms", sa.JSON(), nullable=False),
    )
    op.create_index("ix_host_reports_host_id", "host_reports", ["host", "id"])
    op.create_index("ix_host_reports_received", "host_reports", ["received_s"])
    op.create_table(
        "decisions",
        sa.Column("id", _ID, primary_key=True, autoincrement=False),
        sa.Column("time_s", sa.Float(), nullable=False),
        sa.Column("host", sa.String(64), nullable=False),
        sa.Column("flag", sa.Boolean(), nullable=False),
        sa.Column("target", sa.String(64), nullable=True),
        sa.Column("vm", sa.String(64), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("hot_resources", sa.JSON(), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
    )
    op.create_index("ix_decisions_host", "decisions", ["host", "id"])
    op.create_table(
        "leases",
        sa.Column("vm", sa.String(64), primary_key=True),
        sa.Column("src", sa.String(64), nullable=False),
        sa.Column("dst", sa.String(64), nullable=False),
        sa.Column("since_s", sa.Float(), nullable=False),
        sa.Column("decision_id", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "directives",
        sa.Column("host", sa.String(64), primary_key=True),
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("flag", sa.Boolean(), nullable=False),
        sa.Column("target", sa.String(64), nullable=True),
        sa.Column("vm", sa.String(64), nullable=True),
        sa.Column("issued_s", sa.Float(), nullable=False),
        sa.Column("acked", sa.Boolean(), nullable=False),
    )
    op.create_table(
        "migrations",
        sa.Column("id", _ID, primary_key=True, autoincrement=False),
        sa.Column("vm", sa.String(64), nullable=False),
        sa.Column("src", sa.String(64), nullable=False),
        sa.Column("dst", sa.String(64), nullable=False),
        sa.Column("started_s", sa.Float(), nullable=False),
        sa.Column("ended_s", sa.Float(), nullable=True),
        sa.Column("result", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
    )
    op.create_index("ix_migrations_vm", "migrations", ["vm", "id"])


def downgrade() -> None:
    op.drop_table("migrations")
    op.drop_table("directives")
    op.drop_table("leases")
    op.drop_index("ix_decisions_host", "decisions")
    op.drop_table("decisions")
    op.drop_index("ix_host_reports_received", "host_reports")
    op.drop_index("ix_host_reports_host_id", "host_reports")
    op.drop_table("host_reports")
