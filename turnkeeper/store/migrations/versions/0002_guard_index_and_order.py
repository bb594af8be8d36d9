"""Checksums on the entity index rows and on each projection's creation time.

Before this revision a flipped bit in the entity index (a todo's kind, say) gave a
wrong answer — ``NOT_FOUND`` for a todo that exists — and one in ``created_at``
reordered every listing, both unseen by ``verify``. Rows already present get their
checksums computed from what they hold; ``verify`` compares the whole index with the
one the events imply and each creation time with the stream's first event, so damage
older than this revision is still found.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from turnkeeper.store._checksum import created_checksum, index_checksum

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column(
        "entity_index",
        sa.Column("checksum", sa.String(64), nullable=False, server_default=""),
    )
    op.add_column(
        "projections",
        sa.Column("created_check", sa.String(64), nullable=False, server_default=""),
    )
    conn = op.get_bind()
    index_rows = conn.execute(
        sa.text("SELECT entity_id, stream_id, entity_kind FROM entity_index")
    ).fetchall()
    if index_rows:
        conn.execute(
            sa.text("UPDATE entity_index SET checksum = :checksum WHERE entity_id = :entity_id"),
            [{"entity_id": e, "checksum": index_checksum(e, s, k)} for e, s, k in index_rows],
        )
    projection_rows = conn.execute(sa.text("SELECT stream_id, created_at FROM projections"))
    created = [{"stream_id": s, "check": created_checksum(s, c)} for s, c in projection_rows]
    if created:
        conn.execute(
            sa.text("UPDATE projections SET created_check = :check WHERE stream_id = :stream_id"),
            created,
        )


def downgrade() -> None:
    with op.batch_alter_table("projections") as batch:
        batch.drop_column("created_check")
    with op.batch_alter_table("entity_index") as batch:
        batch.drop_column("checksum")
