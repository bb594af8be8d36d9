"""Initial schema: events, projections, entity index.

Revision ID: 0001
Revises:
Create Date: 2026-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "projections",
        sa.Column("stream_id", sa.String(200), primary_key=True),
        sa.Column("kind", sa.String(100), nullable=False),
        sa.Column("head_seq", sa.BigInteger, nullable=False),
        sa.Column("schema_version", sa.Integer, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("checksum", sa.String(64), nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
    )
    # kind/created_at never change after insert, so the hot-path UPDATE of a
    # projection row does not touch this index.
    op.create_index("ix_projections_kind_created", "projections", ["kind", "created_at"])
    op.create_table(
        "events",
        sa.Column(
            "stream_id", sa.String(200), sa.ForeignKey("projections.stream_id"), primary_key=True
        ),
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("type", sa.String(200), nullable=False),
        sa.Column("schema_version", sa.Integer, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("recorded_at", sa.BigInteger, nullable=False),
        sa.Column("checksum", sa.String(64), nullable=False),
    )
    op.create_table(
        "entity_index",
        sa.Column("entity_id", sa.String(200), primary_key=True),
        sa.Column(
            "stream_id", sa.String(200), sa.ForeignKey("projections.stream_id"), nullable=False
        ),
        sa.Column("entity_kind", sa.String(100), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("entity_index")
    op.drop_table("events")
    op.drop_index("ix_projections_kind_created", "projections")
    op.drop_table("projections")
