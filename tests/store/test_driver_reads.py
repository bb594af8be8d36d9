"""The hot reads on the DBAPI connection (store/_reads.py: events, events_head,
projection through ``driver_rows``).

They replaced SQLAlchemy statements for speed, so they must return exactly what
those statements return — rows, order, bounds, empty and unknown streams — and a
driver error must still reach the caller as the typed taxonomy, never as a raw
``sqlite3`` exception. (test_integrity.py covers a damaged events page through
``read_stream``; these cover the head and projection queries and pages of garbage.)
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from tests.store.toy import KIND, add, state_of
from turnkeeper.errors import DataLoss, TurnkeeperError
from turnkeeper.store import SqlEventStore
from turnkeeper.store._reads import EVENT_COLUMNS, PROJECTION_COLUMNS, Reader
from turnkeeper.store._schema import events, projections


def sqlalchemy_events(
    reader: Reader, stream_id: str, after: int, upto: int | None, limit: int | None
) -> list[tuple[Any, ...]]:
    """The statement ``Reader.events`` ran before it moved to the driver."""
    stmt = select(*EVENT_COLUMNS).where(events.c.stream_id == stream_id, events.c.seq > after)
    if upto is not None:
        stmt = stmt.where(events.c.seq <= upto)
    stmt = stmt.order_by(events.c.seq)
    if limit is not None:
        stmt = stmt.limit(limit)
    return [tuple(r) for r in reader.rows(stmt)]


def sqlalchemy_head(reader: Reader, stream_id: str) -> int:
    rows = reader.rows(select(func.max(events.c.seq)).where(events.c.stream_id == stream_id))
    return int(rows[0][0]) if rows and rows[0][0] is not None else 0


def sqlalchemy_projection(reader: Reader, stream_id: str) -> tuple[Any, ...] | None:
    rows = reader.rows(select(*PROJECTION_COLUMNS).where(projections.c.stream_id == stream_id))
    return tuple(rows[0]) if rows else None


@pytest.fixture
def filled(store: SqlEventStore) -> SqlEventStore:
    add(store, "long", list(range(1, 13)))
    add(store, "long", [100, 200], expected=12)  # a second append: seqs 13, 14
    add(store, "short", [7])
    add(store, "long-neighbour", [1, 2])  # a prefix match must not leak its rows
    return store


# A stream with no events has no rows at all: "unknown:stream" is the empty stream.
STREAMS = ["long", "short", "long-neighbour", "unknown:stream"]
RANGES: list[tuple[int, int | None, int | None]] = [
    (0, None, None),
    (0, None, 5),
    (3, None, None),
    (3, 9, None),
    (3, 9, 2),
    (0, 14, 100),
    (13, None, None),
    (14, None, None),
    (20, None, None),
    (9, 3, None),  # upto below after: nothing
    (0, None, 0),
    (0, 0, None),
]


@pytest.mark.parametrize("stream_id", STREAMS)
def test_events_equal_the_sqlalchemy_statement(filled: SqlEventStore, stream_id: str) -> None:
    reader = filled._reader
    for after, upto, limit in RANGES:
        fast = [tuple(r) for r in reader.events(stream_id, after, upto, limit)]
        slow = sqlalchemy_events(reader, stream_id, after, upto, limit)
        assert fast == slow, (stream_id, after, upto, limit)
    # And a range that is not trivially empty did return rows (the comparison above
    # would also hold if both sides were always empty).
    if stream_id == "long":
        rows = reader.events("long", 3, 9, 2)
        assert [r[1] for r in rows] == [4, 5]
        assert [r[1] for r in reader.events("long", 10, None, None)] == [11, 12, 13, 14]


@pytest.mark.parametrize("stream_id", STREAMS)
def test_head_and_projection_equal_the_sqlalchemy_statements(
    filled: SqlEventStore, stream_id: str
) -> None:
    reader = filled._reader
    assert reader.events_head(stream_id) == sqlalchemy_head(reader, stream_id)
    fast = reader.projection(stream_id)
    assert (None if fast is None else tuple(fast)) == sqlalchemy_projection(reader, stream_id)


def test_the_public_reads_on_known_empty_and_unknown_streams(filled: SqlEventStore) -> None:
    assert filled.head("long") == 14
    assert filled.head("short") == 1
    assert filled.head("unknown:stream") == 0
    assert filled.read_projection("unknown:stream") is None
    assert filled.read_stream("unknown:stream") == []
    assert [e.seq for e in filled.read_stream("long", after_seq=12)] == [13, 14]
    assert [e.seq for e in filled.read_stream("long", after_seq=2, limit=3)] == [3, 4, 5]
    projection = filled.read_projection("long")
    assert projection is not None
    assert (projection.kind, projection.head_seq) == (KIND, 14)
    assert projection.state == state_of([*range(1, 13), 100, 200])


def test_reads_see_an_append_made_after_the_connection_was_pooled(
    filled: SqlEventStore, open_new: Callable[[], SqlEventStore]
) -> None:
    # The driver connection comes back to the pool between reads; it must not keep
    # a read snapshot open across them (an unfinished cursor would pin one in WAL).
    other = open_new()
    assert filled.head("short") == 1
    assert filled.read_projection("short") is not None
    add(other, "short", [8], expected=1)
    assert filled.head("short") == 2
    projection = filled.read_projection("short")
    assert projection is not None and projection.head_seq == 2
    assert [e.seq for e in filled.read_stream("short")] == [1, 2]


def garble_tables(path: Path) -> None:
    """Overwrite every page from the projections table's root onwards with random
    bytes; the schema page and alembic's table stay intact, so the file still opens."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        roots = dict(conn.execute("SELECT name, rootpage FROM sqlite_master").fetchall())
    finally:
        conn.close()
    first = int(roots["projections"])
    assert first > int(roots["alembic_version"])  # the layout this relies on
    data = bytearray(path.read_bytes())
    rng = random.Random(20261130)
    for start in range((first - 1) * page_size, len(data), page_size):
        data[start : start + page_size] = rng.randbytes(page_size)
    path.write_bytes(bytes(data))


def test_pages_of_garbage_are_data_loss_on_every_hot_read(
    store: SqlEventStore, sqlite_file: Path, open_new: Callable[[], SqlEventStore]
) -> None:
    add(store, "s1", [1, 2, 3])
    store.close()
    garble_tables(sqlite_file)
    damaged = open_new()
    reads: dict[str, Callable[[], object]] = {
        "head": lambda: damaged.head("s1"),
        "head of an unknown stream": lambda: damaged.head("nope"),
        "projection": lambda: damaged.read_projection("s1"),
        "events": lambda: damaged.read_stream("s1", after_seq=1, limit=1),
    }
    for what, read in reads.items():
        with pytest.raises(DataLoss) as err:
            read()
        assert err.value.reason == "database_corrupt", what
        assert "stream_id" in err.value.details, what


def test_an_unmapped_driver_error_is_still_a_typed_error(
    store: SqlEventStore, sqlite_file: Path
) -> None:
    add(store, "s1", [1])
    # Another program renames the table under the open store (a foreign tool, a
    # downgrade gone wrong): SQLite reports SQLITE_ERROR, which has no typed mapping.
    conn = sqlite3.connect(sqlite_file, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("ALTER TABLE projections RENAME TO projections_moved")
    finally:
        conn.close()
    # The statement path, for reference: a typed error (reason "internal").
    with pytest.raises(TurnkeeperError):
        store.list_projections(KIND)
    with pytest.raises(TurnkeeperError):
        store.read_projection("s1")
