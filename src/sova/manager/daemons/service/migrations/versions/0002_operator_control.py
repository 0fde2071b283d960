"""Operator control: proposed plans, fences, modes and the audit log.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "plans",
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
    )
    op.create_index("ix_plans_state", "plans", ["state", "id"])
    op.create_table(
        "fences",
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("set_by", sa.String(128), nullable=False),
        sa.Column("since_s", sa.Float(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
    )
    op.create_table(
        "modes",
        sa.Column("scope", sa.String(64), primary_key=True),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("set_by", sa.String(128), nullable=False),
        sa.Column("since_s", sa.Float(), nullable=False),
    )
    op.create_table(
        "audit",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("time_s", sa.Float(), nullable=False),
        sa.Column("who", sa.String(128), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("subject", sa.String(160), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    for table in ("audit", "modes", "fences"):
        op.drop_table(table)
    op.drop_index("ix_plans_state", table_name="plans")
    op.drop_table("plans")
