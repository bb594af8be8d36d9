"""Reads answer from checked records only; verify leaves no table unguarded.

Each case flips one bit in a real SQLite file — in a table's row or in one of its
index's entries, found through ``sqlite_master`` — and checks that reads raise
``DATA_LOSS`` instead of a wrong answer (a ``None`` for a row that is there, a list
missing a row), and that ``verify`` reports the damage as damage.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.store.toy import KIND, CounterFolder, add
from turnkeeper.errors import DataLoss
from turnkeeper.store import EventRecord, IndexEntry, MismatchKind, SqlEventStore
from turnkeeper.store._checksum import index_checksum

ENTRY = IndexEntry(entity_id="todo-alpha", entity_kind="todo")


class IndexingCounterFolder(CounterFolder):
    """The toy folder, also telling which entities a stream's events register: every
    event with a ``"register"`` field registers that id as a ``todo``."""

    def fold_with_index(
        self, kind: str, events: Sequence[EventRecord]
    ) -> tuple[str, list[IndexEntry]]:
        entries: list[IndexEntry] = []
        seen: list[EventRecord] = []
        for event in events:
            seen.append(event)
            registered = json.loads(event.payload).get("register")
            if registered:
                entries.append(IndexEntry(entity_id=registered, entity_kind="todo"))
        return self.fold(kind, seen), entries


def _filled(store: SqlEventStore) -> None:
    from turnkeeper.store import NewEvent

    store.append(
        "s1",
        KIND,
        0,
        [
            NewEvent(
                type="counter.added", schema_version=1, payload='{"n": 1, "register": "todo-alpha"}'
            )
        ],
        json.dumps({"count": 1, "sum": 1}, sort_keys=True),
        1,
        [ENTRY],
    )
    add(store, "s2", [2, 3])
    add(store, "s3", [4])


def _page_of(path: Path, name: str) -> tuple[int, int]:
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,))
        return (int(root.fetchone()[0]) - 1) * page_size, page_size
    finally:
        conn.close()


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

    def flip(name: str, marker: bytes, offset: int, mask: int) -> SqlEventStore:
        flip_in(sqlite_file, name, marker, offset, mask)
        return open_new()

    return flip


def test_a_flipped_kind_in_an_entity_index_row_is_data_loss(
    damaged: Callable[[str, bytes, int, int], SqlEventStore],
) -> None:
    store = damaged("entity_index", b"todo-alphas1todo", len("todo-alphas1tod"), 0x04)
    with pytest.raises(DataLoss) as err:
        store.lookup("todo-alpha")  # "todk": before, a kind no caller asks for: NOT_FOUND
    assert err.value.reason == "checksum_mismatch"
    assert err.value.details["entity_id"] == "todo-alpha"
    report = store.verify(IndexingCounterFolder())
    assert report.data_loss
    assert {m.kind for m in report.mismatches} == {MismatchKind.INDEX}


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


def test_a_flipped_projection_kind_is_data_loss_not_a_shorter_list(
    damaged: Callable[[str, bytes, int, int], SqlEventStore],
) -> None:
    store = damaged("projections", b"s2counter", 2, 0x01)
    with pytest.raises(DataLoss):
        store.list_projections(KIND)  # before: s1 and s3 only, nothing said


def test_a_flipped_projection_key_is_data_loss_not_a_missing_stream(
    damaged: Callable[[str, bytes, int, int], SqlEventStore],
) -> None:
    store = damaged("sqlite_autoindex_projections_1", b"s3", 1, 0x04)  # 's3' -> 's7'
    with pytest.raises(DataLoss) as err:
        store.read_projection("s3")
    assert err.value.reason in ("index_damaged", "projection_missing")


def test_a_flipped_creation_time_is_data_loss_and_is_repaired(
    store: SqlEventStore, sqlite_file: Path, open_new: Callable[[], SqlEventStore]
) -> None:
    _filled(store)
    raw = sqlite3.connect(sqlite_file)
    flip_bit = "(created_at | 4096) - (created_at & 4096)"  # one bit, as XOR
    raw.execute(f"UPDATE projections SET created_at = {flip_bit} WHERE stream_id = 's2'")
    raw.commit()
    raw.close()
    with pytest.raises(DataLoss):
        store.list_projections(KIND)  # the order would change, silently
    report = store.verify(CounterFolder())
    assert report.data_loss
    assert [(m.stream_id, m.kind) for m in report.mismatches] == [("s2", MismatchKind.PROJECTION)]
    repaired = store.repair(CounterFolder())
    assert repaired.repaired == ["s2"] and repaired.after.ok
    assert [p.stream_id for p in store.list_projections(KIND)] == ["s1", "s2", "s3"]


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


def test_verify_recomputes_the_entity_index_from_the_events(
    store: SqlEventStore, sqlite_file: Path
) -> None:
    _filled(store)
    folder = IndexingCounterFolder()
    assert store.verify(folder).ok
    raw = sqlite3.connect(sqlite_file)
    raw.execute("DELETE FROM entity_index")
    # A row with a valid checksum that no event registered.
    checksum = index_checksum("ghost", "s3", "todo")
    raw.execute("INSERT INTO entity_index VALUES ('ghost', 's3', 'todo', ?)", (checksum,))
    raw.commit()
    raw.close()
    report = store.verify(folder)
    assert report.data_loss
    assert sorted((m.stream_id, m.kind) for m in report.mismatches) == [
        ("s1", MismatchKind.INDEX),
        ("s3", MismatchKind.INDEX),
    ]
