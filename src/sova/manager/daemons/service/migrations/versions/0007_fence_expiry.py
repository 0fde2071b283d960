"""Fences that expire: each fence's end (``until_s``, the manager's clock; null = until
lifted), after which the next planning round lifts it and audits it (issue 38).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("fences", sa.Column("until_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("fences") as b:
        b.drop_column("until_s")
