"""The store's SQL, in one place: every statement the store runs outside a migration.

Statements are written with ``?`` placeholders; a dialect rewrites them to its
driver's style (``Dialect.sql``). The columns are those of the schema
(_schema.py), listed in the order the row decoders (_rows.py) unpack them. The
migrations (migrations/versions) keep their own SQL: a migration is frozen at its
revision. A test checks that no other module of the store holds SQL
(tests/store/test_statements_module.py).

What is here, by who runs it:

* the append path (_writer.py): one conditional projection write per stream, its
  events and index entries, and what a failed head check reads to say why;
* the reads (_reads.py): by index for the everyday questions, past the index
  (``{projections}``/``{entity_index}`` are filled with the dialect's unindexed table
  name) to confirm a miss and to list and verify every row;
* the schema's bookkeeping (_migrate.py) and SQLite's connection set-up, locks,
  schema description, stamp and integrity check (_dialect_sqlite.py);
* PostgreSQL's schema description, stamp, integrity check, migration lock and clock
  (_dialect_postgres.py), and the demo's throwaway databases (pg_admin.py).

A statement that cannot take a parameter (a pragma, a comment, a database's name, a
number the dialect writes in itself) is a template here, or a function where SQLite's are; the
module that runs it fills it in.
"""

from __future__ import annotations

import functools

# -- transactions (the append path and the dialects begin and end them themselves) -----

BEGIN = "BEGIN"
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"
# A group's head checks, undone together when a later part fails (_writer.py).
SAVEPOINT_GROUP = "SAVEPOINT tk_group"
ROLLBACK_TO_GROUP = "ROLLBACK TO SAVEPOINT tk_group"
RELEASE_GROUP = "RELEASE SAVEPOINT tk_group"
# One request of a batch on the safe path, undone alone when it fails.
SAVEPOINT_APPEND = "SAVEPOINT tk_append"
ROLLBACK_TO_APPEND = "ROLLBACK TO SAVEPOINT tk_append"
RELEASE_APPEND = "RELEASE SAVEPOINT tk_append"

# -- the append path ----------------------------------------------------------------------

# A stream's head is its events' last seq; its projection row may be folded to an
# earlier one (an append may leave it behind), so every head check reads the events.
# A row folded past the expected head leads its events: damage, refused (params: the
# expected head, the stream id, the expected head).
_AT_HEAD = "head_seq <= ? AND (SELECT coalesce(max(seq), 0) FROM events WHERE stream_id = ?) = ?"
# The projection written at a checked head: the statement path checked the head first
# (SELECT_HEAD_AND_KIND, under the batch's write transaction); ``kind = ?`` keeps a
# stream's kind.
UPDATE_PROJECTION = (
    "UPDATE projections SET head_seq = ?, schema_version = ?, state = ?, checksum = ?"
    " WHERE stream_id = ? AND kind = ?"
)
# The head check and the projection write in one statement (the pipeline's): params
# as UPDATE_PROJECTION's, then the stream id and the expected head again.
UPDATE_PROJECTION_AT_HEAD = UPDATE_PROJECTION + " AND " + _AT_HEAD
INSERT_PROJECTION = (
    "INSERT INTO projections"
    " (stream_id, kind, head_seq, schema_version, state, checksum, created_at, created_check)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (stream_id) DO NOTHING"
)
INSERT_EVENT = (
    "INSERT INTO events"
    " (stream_id, seq, type, schema_version, payload, recorded_at, checksum)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)
INSERT_INDEX = (
    "INSERT INTO entity_index (entity_id, stream_id, entity_kind, checksum) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (entity_id) DO NOTHING"
)
# The same three writes, each failing (division by zero, SQLSTATE 22012) when it wrote
# nothing it should have: where a whole transaction is sent in one exchange with the
# server (PostgreSQL's pipeline, _dialect_postgres.py), no rowcount can be looked at
# before the COMMIT goes, so a failed head check must abort the transaction itself.
# The index entry passes when this stream already holds it, unchanged (a repeated
# registration); its other parameters are the entry's four columns again.
CHECKED_UPDATE_PROJECTION = (
    "WITH written AS (" + UPDATE_PROJECTION_AT_HEAD + " RETURNING 1)"
    " SELECT 1 / count(*) FROM written"
)
# An append that leaves the projection row as it is: the head and kind checked alone
# (params: stream id, kind, then _AT_HEAD's).
CHECKED_HEAD = (
    "SELECT 1 / count(*) FROM projections WHERE stream_id = ? AND kind = ? AND " + _AT_HEAD
)
CHECKED_INSERT_PROJECTION = (
    "WITH written AS (" + INSERT_PROJECTION + " RETURNING 1) SELECT 1 / count(*) FROM written"
)
CHECKED_INSERT_INDEX = (
    "WITH written AS (" + INSERT_INDEX + " RETURNING 1)"
    " SELECT 1 / (count(*) + (SELECT count(*) FROM entity_index WHERE entity_id = ?"
    " AND stream_id = ? AND entity_kind = ? AND checksum = ?)) FROM written"
)
# A head an append_many must find unchanged (a stream with no events has head 0),
# failing the transaction otherwise. A pipeline's events go in after all its checks,
# so a batch where such a check follows an append to its stream is not pipelined
# (pipeline_steps): the check could not see that append.
CHECKED_UNCHANGED = (
    "SELECT 1 / (CASE WHEN (SELECT coalesce(max(seq), 0) FROM events WHERE stream_id = ?)"
    " = ? THEN 1 ELSE 0 END)"
)
SELECT_INDEX = "SELECT stream_id, entity_kind, checksum FROM entity_index WHERE entity_id = ?"
SELECT_PROJECTION_HEAD = "SELECT head_seq, kind FROM projections WHERE stream_id = ?"
# The statement path's head check: the events' head, the projection row's kind and
# head (no row: NULLs), params: the stream id twice.
SELECT_HEAD_AND_KIND = (
    "SELECT (SELECT coalesce(max(seq), 0) FROM events WHERE stream_id = ?), kind, head_seq"
    " FROM (SELECT 1) AS one LEFT JOIN projections ON stream_id = ?"
)
SELECT_EVENTS_HEAD = "SELECT MAX(seq) FROM events WHERE stream_id = ?"

# -- reads --------------------------------------------------------------------------------

_EVENTS = (
    "SELECT stream_id, seq, type, schema_version, payload, recorded_at, checksum "
    "FROM events WHERE stream_id = ? AND seq > ?"
)
HEAD = "SELECT max(seq) FROM events WHERE stream_id = ?"


@functools.cache
def events(upto: bool, limit: bool) -> str:
    """A stream's events after a seq (params: stream id, after seq), then ``upto``:
    up to a seq, ``limit``: at most so many, in that order; by seq."""
    return (
        _EVENTS
        + (" AND seq <= ?" if upto else "")
        + " ORDER BY seq"
        + (" LIMIT ?" if limit else "")
    )


@functools.cache
def events_with_head(limit: bool) -> str:
    """A stream's events after a seq with its projection's head in front of every row,
    as of the same moment (params: after seq, stream id, then ``limit``), by seq. A stream
    with no events in the range gives one row of its head and nulls; a stream with no
    projection row gives none. One statement where the head and the events were two
    reads: a read of a session's recent turns is one round trip on PostgreSQL."""
    return (
        "SELECT p.head_seq, e.stream_id, e.seq, e.type, e.schema_version, e.payload, "
        "e.recorded_at, e.checksum FROM projections p LEFT JOIN events e "
        "ON e.stream_id = p.stream_id AND e.seq > ? WHERE p.stream_id = ? ORDER BY e.seq"
        + (" LIMIT ?" if limit else "")
    )


@functools.cache
def heads(count: int) -> str:
    """One row of ``count`` heads (``HEAD`` as a subquery each)."""
    return f"SELECT {', '.join([f'({HEAD})'] * count)}"


PROJECTION = (
    "SELECT stream_id, kind, head_seq, schema_version, state, checksum "
    "FROM projections WHERE stream_id = ?"
)


@functools.cache
def tails(kinds: int, lateral: bool) -> str:
    """The events after their projection's ``head_seq`` of every stream of ``kinds``
    kinds (params: the kinds), by stream and seq: what a listing folds onto the
    projections it lists (a projection may lag its stream).

    ``lateral`` (PostgreSQL): each projection's events read by its own index range
    scan. A plain join leaves the planner guessing how many events lie past each
    projection's head (a third, by default), and it scans every event of the
    database; ``OFFSET 0`` keeps the subquery from being flattened into that join.
    SQLite, which has no LATERAL, plans the plain join as the loop."""
    marks = ", ".join(["?"] * kinds)
    columns = "e.stream_id, e.seq, e.type, e.schema_version, e.payload, e.recorded_at, e.checksum"
    if lateral:
        return (
            f"SELECT {columns} FROM projections p CROSS JOIN LATERAL"
            " (SELECT * FROM events WHERE events.stream_id = p.stream_id"
            " AND events.seq > p.head_seq OFFSET 0) e"
            f" WHERE p.kind IN ({marks}) ORDER BY e.stream_id, e.seq"
        )
    return (
        f"SELECT {columns} FROM projections p JOIN events e"
        " ON e.stream_id = p.stream_id AND e.seq > p.head_seq"
        f" WHERE p.kind IN ({marks}) ORDER BY e.stream_id, e.seq"
    )


CREATED = "SELECT created_at, created_check FROM projections WHERE stream_id = ?"
LOOKUP = "SELECT stream_id, entity_kind, checksum FROM entity_index WHERE entity_id = ?"
# The same questions asked of the tables past their indexes: what a miss is checked
# with (a damaged index entry must not turn into a wrong NOT_FOUND), and how listings
# and verify read every row (a row whose indexed column is damaged is still seen).
PROJECTION_SCAN = (
    "SELECT stream_id, kind, head_seq, schema_version, state, checksum, created_at, "
    "created_check FROM {projections}"
)
PROJECTION_SCAN_OF_STREAM = PROJECTION_SCAN + " WHERE stream_id = ?"
LOOKUP_SCAN = (
    "SELECT entity_id, stream_id, entity_kind, checksum FROM {entity_index} WHERE entity_id = ?"
)
# Ids that start with a prefix, read past the index like every listing (a row whose
# kind is damaged fails its checksum instead of dropping out); ``substr`` counts
# characters in SQLite and PostgreSQL alike.
PREFIX_SCAN = (
    "SELECT entity_id, stream_id, entity_kind, checksum FROM {entity_index}"
    " WHERE substr(entity_id, 1, ?) = ?"
)
# Verify's walk over every stream: projected ids in key order, a page at a time, and
# the ids of events without a projection row.
STREAM_IDS = "SELECT stream_id FROM projections ORDER BY stream_id LIMIT ?"
STREAM_IDS_AFTER = (
    "SELECT stream_id FROM projections WHERE stream_id > ? ORDER BY stream_id LIMIT ?"
)
ORPHANS = (
    "SELECT DISTINCT stream_id FROM events"
    " WHERE stream_id NOT IN (SELECT stream_id FROM projections) ORDER BY stream_id"
)
INDEX_PAGE = (
    "SELECT {row_key}, entity_id, stream_id, entity_kind, checksum FROM {entity_index}"
    " WHERE {row_key} > ? ORDER BY {row_key} LIMIT ?"
)

# -- the schema's bookkeeping ---------------------------------------------------------------

REVISIONS = "SELECT version_num FROM alembic_version"

# -- SQLite ---------------------------------------------------------------------------------

SQLITE_BEGIN_IMMEDIATE = "BEGIN IMMEDIATE"  # takes the write lock up front
SQLITE_WAL = "PRAGMA journal_mode = WAL"
SQLITE_FOREIGN_KEYS = "PRAGMA foreign_keys = ON"
SQLITE_SCHEMA = (
    "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master"
    " WHERE name NOT LIKE 'sqlite_stat%' AND name <> 'sqlite_sequence'"
    " ORDER BY type, name"
)
SQLITE_READ_STAMP = "PRAGMA user_version"
SQLITE_INTEGRITY_CHECK = "PRAGMA integrity_check(100)"


def sqlite_busy_timeout(milliseconds: int) -> str:
    return f"PRAGMA busy_timeout = {int(milliseconds)}"


def sqlite_synchronous(durable: bool) -> str:
    """FULL: a commit waits for its fsync; NORMAL (WAL): the next FULL one's covers it."""
    return f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}"


def sqlite_write_stamp(stamp: int) -> str:
    return f"PRAGMA user_version = {int(stamp)}"


def sqlite_unindexed(table: str) -> str:
    """``table`` read past its indexes, row by row."""
    return f"{table} NOT INDEXED"


# -- PostgreSQL (_dialect_postgres.py) -------------------------------------------------------
# Run as written on the driver's connection: none has a ``?`` for the dialect to rewrite.
# A ``{field}`` is a value the dialect fills in itself (``str.format``) before running it.

# The schema as the catalog describes it, for the schema check's digest (_migrate.py).
POSTGRES_SCHEMA = """
SELECT 'table', table_name::text, table_name::text, ''
  FROM information_schema.tables WHERE table_schema = current_schema()
UNION ALL
SELECT 'column', table_name || '.' || column_name, data_type,
       is_nullable || ' ' || coalesce(column_default, '')
  FROM information_schema.columns WHERE table_schema = current_schema()
UNION ALL
SELECT 'index', indexname::text, tablename::text,
       replace(indexdef, current_schema() || '.', '')
  FROM pg_indexes WHERE schemaname = current_schema()
UNION ALL
SELECT 'constraint', conname::text, conrelid::regclass::text, pg_get_constraintdef(oid)
  FROM pg_constraint WHERE connamespace = current_schema()::regnamespace
ORDER BY 1, 2
"""
# The stamp is a comment on the version table. ``{comment}``: the stamp's text; a
# COMMENT takes a literal, not a parameter.
POSTGRES_READ_STAMP = "SELECT obj_description(to_regclass('alembic_version'), 'pg_class')"
POSTGRES_WRITE_STAMP = "COMMENT ON TABLE alembic_version IS '{comment}'"
# The integrity check: only where the amcheck extension is installed, one B-tree index
# of the schema at a time. ``{index_oid}``: the index's oid, from POSTGRES_INDEXES.
POSTGRES_AMCHECK_INSTALLED = "SELECT 1 FROM pg_extension WHERE extname = 'amcheck'"
POSTGRES_INDEXES = (
    "SELECT c.oid, c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
    " WHERE c.relnamespace = current_schema()::regnamespace ORDER BY c.relname"
)
POSTGRES_INDEX_CHECK = "SELECT bt_index_check({index_oid})"
# Serialises migrations until the transaction ends. ``{lock_key}``: the dialect's
# 64-bit number.
POSTGRES_LOCK_MIGRATIONS = "SELECT pg_advisory_xact_lock({lock_key})"
# The server's clock, in microseconds since the epoch.
POSTGRES_CLOCK_US = "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint"

# -- PostgreSQL: the demo's throwaway databases (pg_admin.py) -------------------------------
# Run on a psycopg connection of their own, not through a dialect: ``%s`` is psycopg's
# placeholder. ``{name}``: the database, which CREATE and DROP take as a name, not a
# parameter; pg_admin.py fills it in.

POSTGRES_CREATE_DATABASE = 'CREATE DATABASE "{name}"'
# A database's leftover connections are ended first: DROP DATABASE fails while one is open.
POSTGRES_END_CONNECTIONS = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
    " WHERE datname = %s AND pid <> pg_backend_pid()"
)
POSTGRES_DROP_DATABASE = 'DROP DATABASE IF EXISTS "{name}"'
