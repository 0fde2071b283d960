"""Host capacity and the agent's boot id with each report.

The capacity is what the shares are parts of (heterogeneous hosts); the boot id lets a
restarted manager still refuse a replayed report of an agent's earlier boot.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("host_reports") as batch:
        batch.add_column(sa.Column("capacity", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("boot", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("host_reports") as batch:
        batch.drop_column("boot")
        batch.drop_column("capacity")
