"""SqlEventStore's read internals, on every backend: the hot reads on the DBAPI
connection (store/_reads.py ``driver_rows``) against the SQLAlchemy statements they
replaced, and verify's chunked, lazy view of a stream (store/_verify.py).

Not part of the EventStore contract (tests/store/conformance): these reach into
``store._reader`` and patch ``_verify.CHUNK``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import func, select

from tests.store._damage import Damage
from tests.store.conformance import reads
from tests.store.conformance.damage import tagged
from tests.store.conftest import Backend
from tests.store.toy import KIND, CounterFolder, add, state_of
from turnkeeper.store import MismatchKind, SqlEventStore, _verify
from turnkeeper.store._reads import Reader
from turnkeeper.store._schema import EVENT_COLUMNS, PROJECTION_COLUMNS, events, projections
from turnkeeper.store._source import AnyRow


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


filled = reads.filled  # the fixture, shared with the contract's reads

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
    if stream_id == "long":
        assert fast is not None and fast[2] == 14


def test_verify_streams_large_streams_in_chunks(
    store: SqlEventStore, folder: CounterFolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_verify, "CHUNK", 64)
    values = list(range(1000))
    for start in range(0, 1000, 250):
        add(store, "big", values[start : start + 250])
    seen: list[int] = []
    real_events = store._reader.events

    def spy(
        stream_id: str, after_seq: int, upto_seq: int | None = None, limit: int | None = None
    ) -> Sequence[AnyRow]:
        rows = real_events(stream_id, after_seq, upto_seq, limit)
        seen.append(len(rows))
        return rows

    monkeypatch.setattr(store._reader, "events", spy)
    report = store.verify(folder)
    assert report.ok
    assert report.events_checked == 1000
    assert max(seen) <= 64  # never the whole stream at once
    assert folder.folds == 1  # one pass: the fold itself checked every event


def test_every_bad_event_is_reported_across_chunks(
    store: SqlEventStore,
    backend: Backend,
    folder: CounterFolder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_verify, "CHUNK", 4)  # several chunks, bad records in two of them
    store.append("s1", KIND, 0, tagged(list(range(1, 15))), state_of(range(1, 15)), 1)
    Damage(backend).change_payload("s1", 3, "MARK0003", "MARK0002")
    Damage(backend).change_payload("s1", 11, "MARK0011", "MARK0010")
    report = store.verify(folder)
    assert [(m.kind, m.seq) for m in report.mismatches] == [
        (MismatchKind.SOURCE_WRITE, 3),
        (MismatchKind.SOURCE_WRITE, 11),
    ]
    assert report.events_checked == 14


def test_stream_view_is_a_sequence(store: SqlEventStore) -> None:
    add(store, "s1", [10, 20, 30])
    view = _verify.StreamView(store._reader, "s1", 3)
    assert len(view) == 3
    assert [e.seq for e in view] == [1, 2, 3]
    assert view[0].seq == 1
    assert view[-1].seq == 3
    assert [e.seq for e in view[1:]] == [2, 3]
    with pytest.raises(IndexError):
        view[3]
