"""The webhooks' outbox: events recorded with what they report, and each endpoint's
pending and done deliveries (issue 38, notifications; src/sova/manager/daemons/service/store_outbox.py).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "outbox",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("uid", sa.String(32), nullable=False, unique=True),
        sa.Column("key", sa.String(120), nullable=True, unique=True),
        sa.Column("kind", sa.String(48), nullable=False),
        sa.Column("time_s", sa.Float(), nullable=False),
        sa.Column("subject", sa.String(160), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
    )
    op.create_index("ix_outbox_time", "outbox", ["time_s"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("endpoint", sa.String(64), primary_key=True),
        sa.Column("event_id", sa.BigInteger(), primary_key=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_s", sa.Float(), nullable=False),
        sa.Column("delivered_s", sa.Float(), nullable=True),
        sa.Column("given_up", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
    )
    op.create_index(
        "ix_webhook_pending",
        "webhook_deliveries",
        ["endpoint", "delivered_s", "given_up", "event_id"],
    )


def downgrade() -> None:
    op.drop_index("ix_webhook_pending", "webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_index("ix_outbox_time", "outbox")
    op.drop_table("outbox")
