"""Host capacity with each report: what the shares are parts of (heterogeneous hosts).

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


def downgrade() -> None:
    with op.batch_alter_table("host_reports") as batch:
        batch.drop_column("capacity")
