"""SQLite only: bytes flipped in the database file itself, garbage pages, a file that is
no database, the file's write lock. Reads raise ``DATA_LOSS`` instead of a wrong answer
(a ``None`` for a row that is there, a list missing a row); verify reports damage as
damage. (Damage done through SQL, on every backend: tests/store/conformance/damage.py.)
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.store.conformance.damage import _filled, tagged
from tests.store.conftest import sqlite_only
from tests.store.toy import KIND, CounterFolder, IndexingCounterFolder, add, state_of
from turnkeeper.errors import DataLoss, Unavailable
from turnkeeper.store import MismatchKind, SqlEventStore, open_store


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


def _page_of(path: Path, name: str) -> tuple[int, int]:
    checkpointed(path)
    page_size = int(str(raw(path, "PRAGMA page_size")[0][0]))
    root = raw(path, "SELECT rootpage FROM sqlite_master WHERE name = ?", (name,))
    return (int(str(root[0][0])) - 1) * page_size, page_size


def flip_in(path: Path, name: str, marker: bytes, offset: int, mask: int) -> None:
    """Flip one bit of ``marker`` where it occurs on the root page of table or index
    ``name`` (every test store here is small enough for one page each)."""
    start, size = _page_of(path, name)
    data = bytearray(path.read_bytes())
    page = bytes(data[start : start + size])
    at = page.find(marker)
    assert at >= 0 and page.find(marker, at + 1) < 0, f"{marker!r} not once on {name}"
    data[start + at + offset] ^= mask
    path.write_bytes(bytes(data))


@pytest.fixture
def damaged(
    store: SqlEventStore, sqlite_file: Path, open_new: Callable[[], SqlEventStore]
) -> Callable[[str, bytes, int, int], SqlEventStore]:
    _filled(store)
    store.close()

    def flip_and_open(name: str, marker: bytes, offset: int, mask: int) -> SqlEventStore:
        flip_in(sqlite_file, name, marker, offset, mask)
        return open_new()

    return flip_and_open


@sqlite_only
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
    assert (err.value.details["stream_id"], err.value.details["seq"]) == ("s1", 7)
    assert [e.seq for e in damaged.read_stream("s1", limit=6)] == [1, 2, 3, 4, 5, 6]
    assert [e.seq for e in damaged.read_stream("s1", after_seq=7)] == [8, 9, 10]
    report = damaged.verify(folder)  # reports, does not raise
    assert [(m.stream_id, m.kind, m.seq) for m in report.mismatches] == [
        ("s1", MismatchKind.SOURCE_WRITE, 7)
    ]
    assert (report.streams_checked, report.events_checked) == (2, 11)
    repaired = damaged.repair(folder)
    assert repaired.repaired == []
    assert [(m.stream_id, m.seq) for m in repaired.unrepairable] == [("s1", 7)]


@sqlite_only
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
    result = damaged.repair(folder)
    assert result.repaired == ["p1"]
    assert result.after.ok
    assert add(damaged, "p1", [1]) == 2  # the stream works again


def test_garbage_file_is_data_loss(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database at all " * 200)
    with pytest.raises(DataLoss) as err:
        open_store(path)
    assert err.value.reason == "not_a_database"


@sqlite_only
def test_damaged_page_header_is_data_loss(
    store: SqlEventStore,
    sqlite_file: Path,
    open_new: Callable[[], SqlEventStore],
    folder: CounterFolder,
) -> None:
    add(store, "s1", [1, 2, 3])
    store.close()
    start, _size = _page_of(sqlite_file, "events")
    data = bytearray(sqlite_file.read_bytes())
    data[start] = 0x00  # not a valid b-tree page type
    sqlite_file.write_bytes(bytes(data))

    damaged = open_new()
    with pytest.raises(DataLoss) as err:
        damaged.read_stream("s1")
    assert err.value.reason == "database_corrupt"
    assert err.value.details["stream_id"] == "s1"
    report = damaged.verify(folder)  # must report, not raise
    assert not report.ok
    assert {m.kind for m in report.mismatches} == {MismatchKind.SOURCE_WRITE}


def garble_tables(path: Path) -> None:
    """Overwrite every page from the projections table's root onwards with random
    bytes; the schema page and alembic's table stay intact, so the file still opens."""
    checkpointed(path)
    page_size = int(str(raw(path, "PRAGMA page_size")[0][0]))
    roots = {str(n): int(str(r)) for n, r in raw(path, "SELECT name, rootpage FROM sqlite_master")}
    first = roots["projections"]
    assert first > roots["alembic_version"]  # the layout this relies on
    data = bytearray(path.read_bytes())
    rng = random.Random(20261130)
    for start in range((first - 1) * page_size, len(data), page_size):
        data[start : start + page_size] = rng.randbytes(page_size)
    path.write_bytes(bytes(data))


@sqlite_only
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


@sqlite_only
def test_a_flipped_kind_in_an_entity_index_row_is_data_loss(
    damaged: Callable[[str, bytes, int, int], SqlEventStore],
) -> None:
    store = damaged("entity_index", b"todo-alphas1todo", len("todo-alphas1tod"), 0x04)
    with pytest.raises(DataLoss) as err:
        store.lookup("todo-alpha")  # "todk": before, a kind no caller asks for: NOT_FOUND
    assert err.value.reason == "checksum_mismatch"
    with pytest.raises(DataLoss) as err:
        store.lookup_prefix("todo-al", "todo")
    assert err.value.reason == "checksum_mismatch"
    report = store.verify(IndexingCounterFolder())
    assert report.data_loss
    assert {m.kind for m in report.mismatches} == {MismatchKind.INDEX}


@sqlite_only
def test_a_flipped_key_in_the_entity_index_is_data_loss_not_a_miss(
    damaged: Callable[[str, bytes, int, int], SqlEventStore],
) -> None:
    store = damaged("sqlite_autoindex_entity_index_1", b"todo-alpha", 5, 0x01)
    with pytest.raises(DataLoss) as err:
        store.lookup("todo-alpha")
    assert err.value.reason == "index_damaged"
    report = store.verify(IndexingCounterFolder())
    assert report.data_loss
    assert any("integrity check" in m.detail for m in report.mismatches)


@sqlite_only
def test_a_flipped_projection_kind_is_data_loss_not_a_shorter_list(
    damaged: Callable[[str, bytes, int, int], SqlEventStore],
) -> None:
    store = damaged("projections", b"s2counter", 2, 0x01)
    with pytest.raises(DataLoss):
        store.list_projections(KIND)  # before: s1 and s3 only, nothing said


@sqlite_only
def test_a_flipped_projection_key_is_data_loss_not_a_missing_stream(
    damaged: Callable[[str, bytes, int, int], SqlEventStore],
) -> None:
    store = damaged("sqlite_autoindex_projections_1", b"s3", 1, 0x04)  # 's3' -> 's7'
    with pytest.raises(DataLoss) as err:
        store.read_projection("s3")
    assert err.value.reason in ("index_damaged", "projection_missing")


@sqlite_only
def test_a_flip_in_a_tables_copy_of_an_indexed_column_fails_verify(
    damaged: Callable[[str, bytes, int, int], SqlEventStore],
) -> None:
    # s2's second event row: reads find it through the index, whose copy is intact.
    store = damaged("events", b"s2\x02counter.added", 1, 0x04)
    assert [e.seq for e in store.read_stream("s2")] == [1, 2]
    report = store.verify(CounterFolder())
    assert report.data_loss
    assert any(
        m.stream_id == "*" and "sqlite_autoindex_events_1" in m.detail for m in report.mismatches
    )


@sqlite_only
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


def test_a_plain_path_under_a_file_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "a-file").touch()
    with pytest.raises(Unavailable):
        open_store(tmp_path / "a-file" / "store.db")
