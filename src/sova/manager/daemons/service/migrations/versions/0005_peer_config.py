"""What the leader publishes for its standbys: its operator credentials and a digest of
its safety-relevant settings (issue 37, Medium 1 and 2).

One row (id 1). ``generation`` rises with every publication (the leader's start, every
credentials reload); a standby polls it and, when it moves, reads the rest: the operator
book (names, roles, SHA-256 digests of the secrets — never a secret) it authorizes with
from then on, and ``digest`` (setting -> a short hash of its value) it compares with its
own configuration (docs/design.md, "Peers agree or say so").

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    peer = op.create_table(
        "peer_config",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("operators", sa.JSON(), nullable=False),
        sa.Column("digest", sa.JSON(), nullable=False),
        sa.Column("since_s", sa.Float(), nullable=False),
    )
    op.bulk_insert(
        peer,
        [{"id": 1, "generation": 0, "epoch": 0, "operators": {}, "digest": {}, "since_s": 0.0}],
    )


def downgrade() -> None:
    op.drop_table("peer_config")
