"""The store's schema at the head revision, defined once, in SQLAlchemy Core.

This is the one description of the tables, columns, types, nullability, keys and
indexes the store runs on. The migrations in ``migrations/versions`` build it step
by step and must not import this module (a migration describes the schema as of its
own revision, which later code must not change under it); a test runs them on a
fresh SQLite file and a fresh PostgreSQL database and checks that the result is
exactly this metadata (tests/store/test_schema_definition.py). A new revision
therefore changes this module and adds a migration in the same change.

Imported only where SQLAlchemy is (repair's rewrite, the tests): the everyday reads
and appends run fixed SQL on driver connections (_reads.py, _writer.py).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

events = Table(
    "events",
    metadata,
    Column("stream_id", String(200), ForeignKey("projections.stream_id"), primary_key=True),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("type", String(200), nullable=False),
    Column("schema_version", Integer, nullable=False),
    Column("payload", Text, nullable=False),
    Column("recorded_at", BigInteger, nullable=False),  # microseconds since the epoch, UTC
    Column("checksum", String(64), nullable=False),
)

projections = Table(
    "projections",
    metadata,
    Column("stream_id", String(200), primary_key=True),
    Column("kind", String(100), nullable=False),
    Column("head_seq", BigInteger, nullable=False),
    Column("schema_version", Integer, nullable=False),
    Column("state", Text, nullable=False),
    Column("checksum", String(64), nullable=False),
    # Creation order for list_projections ("oldest stream first"): fixed at the first
    # append (the first event's recorded_at), guarded by its own checksum.
    Column("created_at", BigInteger, nullable=False),
    Column("created_check", String(64), nullable=False),
    # kind/created_at never change after insert, so the hot-path UPDATE of a
    # projection row does not touch this index.
    Index("ix_projections_kind_created", "kind", "created_at"),
)

entity_index = Table(
    "entity_index",
    metadata,
    Column("entity_id", String(200), primary_key=True),
    Column("stream_id", String(200), ForeignKey("projections.stream_id"), nullable=False),
    Column("entity_kind", String(100), nullable=False),
    Column("checksum", String(64), nullable=False),
)

# The columns of the store's fixed SQL reads (_reads.py), in the order its row
# decoders unpack them.
EVENT_COLUMNS = (
    events.c.stream_id,
    events.c.seq,
    events.c.type,
    events.c.schema_version,
    events.c.payload,
    events.c.recorded_at,
    events.c.checksum,
)
PROJECTION_COLUMNS = (
    projections.c.stream_id,
    projections.c.kind,
    projections.c.head_seq,
    projections.c.schema_version,
    projections.c.state,
    projections.c.checksum,
)
