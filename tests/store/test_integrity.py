"""Checksums, damaged files, verify and repair."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.store.toy import KIND, CounterFolder, add, events_of, state_of
from turnkeeper.errors import DataLoss, FailedPrecondition, Unavailable
from turnkeeper.store import MismatchKind, NewEvent, SqlEventStore, _verify, open_store
from turnkeeper.store._checksum import projection_checksum
from turnkeeper.store._reads import AnyRow


def tagged(values: list[int]) -> list[NewEvent]:
    return [
        NewEvent(
            type="counter.added",
            schema_version=1,
            payload=json.dumps({"n": v, "tag": f"MARK{v:04d}"}),
        )
        for v in values
    ]


def checkpointed(path: Path) -> None:
    """Move everything from the WAL into the main file, so its bytes are all there."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def flip(path: Path, marker: bytes, offset: int = 0, mask: int = 0x01) -> None:
    checkpointed(path)
    data = bytearray(path.read_bytes())
    at = data.find(marker)
    assert at >= 0, f"{marker!r} not in the file"
    assert data.find(marker, at + 1) == -1, f"{marker!r} is not unique in the file"
    data[at + offset] ^= mask
    path.write_bytes(bytes(data))


def raw(path: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("mask", [0x01, 0x80], ids=["ascii", "invalid-utf8"])
def test_flipped_byte_in_an_event(
    store: SqlEventStore,
    sqlite_file: Path,
    open_new: Callable[[], SqlEventStore],
    folder: CounterFolder,
    mask: int,
) -> None:
    store.append("s1", KIND, 0, tagged(list(range(1, 11))), state_of(range(1, 11)), 1)
    add(store, "s2", [5])
    store.close()
    flip(sqlite_file, b"MARK0007", mask=mask)

    damaged = open_new()
    with pytest.raises(DataLoss) as err:
        damaged.read_stream("s1")
    assert err.value.details["stream_id"] == "s1"
    assert err.value.details["seq"] == 7
    assert "'s1'" in err.value.message
    assert "seq 7" in err.value.message
    assert [e.seq for e in damaged.read_stream("s1", limit=6)] == [1, 2, 3, 4, 5, 6]
    assert [e.seq for e in damaged.read_stream("s1", after_seq=7)] == [8, 9, 10]
    assert damaged.head("s2") == 1

    report = damaged.verify(folder)  # reports, does not raise
    assert [(m.stream_id, m.kind, m.seq) for m in report.mismatches] == [
        ("s1", MismatchKind.SOURCE_WRITE, 7)
    ]
    assert report.streams_checked == 2
    assert report.events_checked == 11
    repaired = damaged.repair(folder)
    assert repaired.repaired == []
    assert [(m.stream_id, m.seq) for m in repaired.unrepairable] == [("s1", 7)]
    assert not repaired.after.ok


def test_every_bad_event_is_reported_not_just_the_first(
    store: SqlEventStore,
    sqlite_file: Path,
    open_new: Callable[[], SqlEventStore],
    folder: CounterFolder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_verify, "CHUNK", 4)  # several chunks, bad records in two of them
    store.append("s1", KIND, 0, tagged(list(range(1, 15))), state_of(range(1, 15)), 1)
    store.close()
    flip(sqlite_file, b"MARK0003")
    flip(sqlite_file, b"MARK0011")
    report = open_new().verify(folder)
    assert [(m.kind, m.seq) for m in report.mismatches] == [
        (MismatchKind.SOURCE_WRITE, 3),
        (MismatchKind.SOURCE_WRITE, 11),
    ]
    assert report.events_checked == 14


def test_flipped_byte_in_a_projection_is_repaired(
    store: SqlEventStore,
    sqlite_file: Path,
    open_new: Callable[[], SqlEventStore],
    folder: CounterFolder,
) -> None:
    add(store, "p1", [12345])
    add(store, "p2", [1, 2])
    store.close()
    flip(sqlite_file, b'"sum": 12345}', offset=len('"sum": '))

    damaged = open_new()
    with pytest.raises(DataLoss) as err:
        damaged.read_projection("p1")
    assert err.value.details["stream_id"] == "p1"
    assert err.value.details["seq"] == 1
    with pytest.raises(DataLoss):
        damaged.list_projections(KIND)
    report = damaged.verify(folder)
    assert [(m.stream_id, m.kind) for m in report.mismatches] == [("p1", MismatchKind.PROJECTION)]

    result = damaged.repair(folder)
    assert result.repaired == ["p1"]
    assert result.unrepairable == []
    assert result.after.ok
    proj = damaged.read_projection("p1")
    assert proj is not None
    assert json.loads(proj.state) == {"count": 1, "sum": 12345}
    assert add(damaged, "p1", [1]) == 2  # the stream works again


def test_garbage_file_is_data_loss(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database at all " * 200)
    with pytest.raises(DataLoss) as err:
        open_store(path)
    assert err.value.reason == "not_a_database"


def test_damaged_page_header_is_data_loss(
    store: SqlEventStore,
    sqlite_file: Path,
    open_new: Callable[[], SqlEventStore],
    folder: CounterFolder,
) -> None:
    add(store, "s1", [1, 2, 3])
    store.close()
    checkpointed(sqlite_file)
    page_size = int(str(raw(sqlite_file, "PRAGMA page_size")[0][0]))
    root_sql = "SELECT rootpage FROM sqlite_master WHERE name = 'events'"
    root = int(str(raw(sqlite_file, root_sql)[0][0]))
    data = bytearray(sqlite_file.read_bytes())
    data[(root - 1) * page_size] = 0x00  # not a valid b-tree page type
    sqlite_file.write_bytes(bytes(data))

    damaged = open_new()
    with pytest.raises(DataLoss) as err:
        damaged.read_stream("s1")
    assert err.value.reason == "database_corrupt"
    assert err.value.details["stream_id"] == "s1"
    report = damaged.verify(folder)  # must report, not raise
    assert not report.ok
    assert {m.kind for m in report.mismatches} == {MismatchKind.SOURCE_WRITE}


def test_deleted_event_is_a_gap(
    store: SqlEventStore,
    sqlite_file: Path,
    open_new: Callable[[], SqlEventStore],
    folder: CounterFolder,
) -> None:
    add(store, "s1", [1, 2, 3, 4])
    store.close()
    raw(sqlite_file, "DELETE FROM events WHERE stream_id = 's1' AND seq = 2")
    damaged = open_new()
    with pytest.raises(DataLoss) as err:
        damaged.read_stream("s1")
    assert err.value.reason == "sequence_gap"
    assert err.value.details["seq"] == 2
    report = damaged.verify(folder)
    assert [(m.kind, m.seq) for m in report.mismatches] == [(MismatchKind.SOURCE_WRITE, 2)]


def _stale_projection(path: Path, stream_id: str, values: list[int]) -> None:
    """Rewrite a projection as of an older head, with a valid checksum."""
    head, state = len(values), state_of(values)
    checksum = projection_checksum(stream_id, KIND, head, 1, state)
    raw(
        path,
        "UPDATE projections SET head_seq = ?, state = ?, checksum = ? WHERE stream_id = ?",
        (head, state, checksum, stream_id),
    )


def test_freshness_mismatch_detected_and_repaired(
    store: SqlEventStore, sqlite_file: Path, folder: CounterFolder
) -> None:
    add(store, "s1", [1, 2, 3])
    add(store, "s2", [4])
    _stale_projection(sqlite_file, "s1", [1, 2])
    assert store.read_projection("s1") is not None  # a valid row, just behind
    with pytest.raises(FailedPrecondition) as err:
        store.append("s1", KIND, 3, events_of([9]), state_of([1, 2, 3, 9]), 1)
    assert err.value.reason == "projection_stale"
    with pytest.raises(FailedPrecondition):  # appending at the projection's head would fork
        store.append("s1", KIND, 2, events_of([9]), state_of([1, 2, 9]), 1)
    assert store.head("s1") == 3

    report = store.verify(folder)
    assert [(m.stream_id, m.kind, m.seq) for m in report.mismatches] == [
        ("s1", MismatchKind.FRESHNESS, 2)
    ]
    result = store.repair(folder)
    assert result.repaired == ["s1"]
    assert result.after.ok
    proj = store.read_projection("s1")
    assert proj is not None
    assert (proj.head_seq, proj.state) == (3, state_of([1, 2, 3]))
    assert add(store, "s1", [4]) == 4


def test_wrong_projection_state_is_repaired(
    store: SqlEventStore, sqlite_file: Path, folder: CounterFolder
) -> None:
    add(store, "s1", [1, 2])
    store.append("s2", KIND, 0, events_of([5]), state_of([6]), 1)  # a writer that folded wrong
    report = store.verify(folder)
    assert [(m.stream_id, m.kind) for m in report.mismatches] == [("s2", MismatchKind.PROJECTION)]
    result = store.repair(folder)
    assert result.repaired == ["s2"]
    assert result.after.ok


def test_migration_mismatches(store: SqlEventStore) -> None:
    add(store, "old", [1])
    # Projection written by older code: repairable by folding with the new version.
    report = store.verify(CounterFolder(projection_version=2))
    assert [(m.stream_id, m.kind) for m in report.mismatches] == [("old", MismatchKind.MIGRATION)]
    result = store.repair(CounterFolder(projection_version=2))
    assert result.repaired == ["old"]
    assert result.after.ok
    proj = store.read_projection("old")
    assert proj is not None
    assert proj.schema_version == 2
    # An event this code cannot read: a migration problem, not repairable here.
    store.append("new", KIND, 0, events_of([1], schema_version=5), state_of([1]), 2)
    report = store.verify(CounterFolder(projection_version=2))
    assert [(m.stream_id, m.kind, m.seq) for m in report.mismatches] == [
        ("new", MismatchKind.MIGRATION, 1)
    ]
    result = store.repair(CounterFolder(projection_version=2))
    assert result.repaired == []
    assert [m.stream_id for m in result.unrepairable] == ["new"]
    # A projection from newer code is reported, and left alone.
    report = store.verify(CounterFolder(projection_version=1))
    assert ("old", MismatchKind.MIGRATION) in [(m.stream_id, m.kind) for m in report.mismatches]
    assert "old" not in store.repair(CounterFolder(projection_version=1)).repaired


def test_undecodable_event_is_a_source_write_mismatch(store: SqlEventStore) -> None:
    bad = NewEvent(type="counter.added", schema_version=1, payload='{"m": 1}')
    store.append("s1", KIND, 0, [*events_of([1]), bad], state_of([1]), 1)
    report = store.verify(CounterFolder())
    assert [(m.kind, m.seq) for m in report.mismatches] == [(MismatchKind.SOURCE_WRITE, 2)]


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


def test_locked_past_the_timeout_is_unavailable(sqlite_file: Path) -> None:
    store = open_store(sqlite_file, busy_timeout_s=0.3)
    try:
        add(store, "s1", [1])
        blocker = sqlite3.connect(sqlite_file, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another process holding the write lock
        try:
            with pytest.raises(Unavailable) as err:
                add(store, "s1", [2], expected=1)
            assert err.value.reason == "database_locked"
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert add(store, "s1", [2], expected=1) == 2  # and it recovers once the lock is gone
    finally:
        store.close()
