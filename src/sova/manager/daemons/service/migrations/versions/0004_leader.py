"""The leader row: which manager plans on this store, and its epoch (the fencing token).

One row (id 1). A manager that takes the leadership lock raises ``epoch`` by one in the
same session; every write of decisions, leases, directives and operator changes checks in
its own transaction that the row still carries the writer's epoch (docs/design.md,
"Active and standby managers").

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    leader = op.create_table(
        "leader",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("holder", sa.String(200), nullable=False),
        sa.Column("url", sa.String(500), nullable=False),
        sa.Column("since_s", sa.Float(), nullable=False),
    )
    op.bulk_insert(leader, [{"id": 1, "epoch": 0, "holder": "", "url": "", "since_s": 0.0}])


def downgrade() -> None:
    op.drop_table("leader")
