"""Damaged records are ``DATA_LOSS``, never a wrong answer; verify finds, repair rebuilds.

The damage is done the way another program would do it (tests/store/_damage.py:
plain SQL on a connection of its own, or the same change to an in-memory
database's rows): a changed character keeps the row readable but breaks its
checksum. Damage to a database file's bytes is SQLite's alone
(tests/store/test_sqlite_file_damage.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.store._damage import Damage
from tests.store.conftest import Backend, not_for_memory
from tests.store.toy import KIND, CounterFolder, IndexingCounterFolder, add, events_of, state_of
from turnkeeper.errors import DataLoss, FailedPrecondition, StreamConflict, TurnkeeperError
from turnkeeper.store import EventStore, IndexEntry, MismatchKind, NewEvent

ENTRY = IndexEntry(entity_id="todo-alpha", entity_kind="todo")


def tagged(values: list[int]) -> list[NewEvent]:
    return [
        NewEvent(
            type="counter.added",
            schema_version=1,
            payload=json.dumps({"n": v, "tag": f"MARK{v:04d}"}),
        )
        for v in values
    ]


def _filled(store: EventStore) -> None:
    """s1 registers todo-alpha (its event says so); s2 and s3 register nothing."""
    event = NewEvent(
        type="counter.added", schema_version=1, payload='{"n": 1, "register": "todo-alpha"}'
    )
    store.append("s1", KIND, 0, [event], state_of([1]), 1, [ENTRY])
    add(store, "s2", [2, 3])
    add(store, "s3", [4])


def test_a_changed_event_is_data_loss_naming_stream_and_seq(
    store: EventStore,
    backend: Backend,
    open_new: Callable[[], EventStore],
    folder: CounterFolder,
) -> None:
    store.append("s1", KIND, 0, tagged(list(range(1, 11))), state_of(range(1, 11)), 1)
    add(store, "s2", [5])
    Damage(backend).change_payload("s1", 7, "MARK0007", "MARK0006")

    for damaged in (store, open_new()):  # the open store and a freshly opened one
        with pytest.raises(DataLoss) as err:
            damaged.read_stream("s1")
        assert err.value.details["stream_id"] == "s1"
        assert err.value.details["seq"] == 7
        assert "'s1'" in err.value.message
        assert "seq 7" in err.value.message
        assert [e.seq for e in damaged.read_stream("s1", limit=6)] == [1, 2, 3, 4, 5, 6]
        assert [e.seq for e in damaged.read_stream("s1", after_seq=7)] == [8, 9, 10]
        assert damaged.head("s2") == 1

    report = store.verify(folder)  # reports, does not raise
    assert report.data_loss
    assert [(m.stream_id, m.kind, m.seq) for m in report.mismatches] == [
        ("s1", MismatchKind.SOURCE_WRITE, 7)
    ]
    assert report.streams_checked == 2
    assert report.events_checked == 11
    repaired = store.repair(folder)
    assert repaired.repaired == []
    assert [(m.stream_id, m.seq) for m in repaired.unrepairable] == [("s1", 7)]
    assert not repaired.after.ok


def test_every_bad_event_is_reported_not_just_the_first(
    store: EventStore, backend: Backend, folder: CounterFolder
) -> None:
    store.append("s1", KIND, 0, tagged(list(range(1, 15))), state_of(range(1, 15)), 1)
    Damage(backend).change_payload("s1", 3, "MARK0003", "MARK0002")
    Damage(backend).change_payload("s1", 11, "MARK0011", "MARK0010")
    report = store.verify(folder)
    assert [(m.kind, m.seq) for m in report.mismatches] == [
        (MismatchKind.SOURCE_WRITE, 3),
        (MismatchKind.SOURCE_WRITE, 11),
    ]
    assert report.events_checked == 14


def test_a_changed_projection_is_data_loss_and_is_repaired(
    store: EventStore, backend: Backend, folder: CounterFolder
) -> None:
    add(store, "p1", [12345])
    add(store, "p2", [1, 2])
    Damage(backend).change_state("p1", "12345", "12344")
    with pytest.raises(DataLoss) as err:
        store.read_projection("p1")
    assert err.value.details["stream_id"] == "p1"
    assert err.value.details["seq"] == 1
    with pytest.raises(DataLoss):
        store.list_projections(KIND)
    report = store.verify(folder)
    assert [(m.stream_id, m.kind) for m in report.mismatches] == [("p1", MismatchKind.PROJECTION)]

    result = store.repair(folder)
    assert result.repaired == ["p1"]
    assert result.unrepairable == []
    assert result.after.ok
    proj = store.read_projection("p1")
    assert proj is not None
    assert json.loads(proj.state) == {"count": 1, "sum": 12345}
    assert add(store, "p1", [1]) == 2  # the stream works again


def test_a_deleted_event_is_a_gap(
    store: EventStore, backend: Backend, folder: CounterFolder
) -> None:
    add(store, "s1", [1, 2, 3, 4])
    Damage(backend).delete_event("s1", 2)
    with pytest.raises(DataLoss) as err:
        store.read_stream("s1")
    assert err.value.reason == "sequence_gap"
    assert err.value.details["seq"] == 2
    report = store.verify(folder)
    assert [(m.kind, m.seq) for m in report.mismatches] == [(MismatchKind.SOURCE_WRITE, 2)]


def test_a_projection_behind_its_events_is_a_lag_not_damage(
    store: EventStore, backend: Backend, folder: CounterFolder
) -> None:
    add(store, "s1", [1, 2])
    old = store.read_projection("s1")
    assert old is not None
    add(store, "s1", [3])
    # Put back the row as it was at head 2: valid checksum, folded to an earlier seq,
    # as an append that leaves the projection behind would (projection_state=None).
    Damage(backend).put_projection("s1", old.head_seq, old.state, old.checksum)
    assert store.read_projection("s1") == old
    assert store.head("s1") == 3
    with pytest.raises(StreamConflict):  # the head is the events', not the row's
        store.append("s1", KIND, 2, events_of([9]), state_of([1, 2, 9]), 1)
    assert store.verify(folder).ok
    assert [p.stream_head for p in store.list_projections(KIND)] == [3]
    assert store.append("s1", KIND, 3, events_of([4]), None, 1) == 4
    assert store.verify(folder).ok
    assert add(store, "s1", [5]) == 5
    proj = store.read_projection("s1")
    assert proj is not None
    assert (proj.head_seq, proj.state) == (5, state_of([1, 2, 3, 4, 5]))


def test_a_projection_ahead_of_its_events_is_refused_and_repaired(
    store: EventStore, backend: Backend, folder: CounterFolder
) -> None:
    add(store, "s1", [1, 2, 3])
    add(store, "s2", [4])
    Damage(backend).delete_event("s1", 3)  # the row now leads its events
    with pytest.raises(FailedPrecondition) as err:  # appending would fork the stream
        store.append("s1", KIND, 2, events_of([9]), state_of([1, 2, 9]), 1)
    assert err.value.reason == "projection_stale"
    with pytest.raises(FailedPrecondition):
        store.append("s1", KIND, 2, events_of([9]), None, 1)
    assert store.head("s1") == 2

    report = store.verify(folder)
    assert [(m.stream_id, m.kind, m.seq) for m in report.mismatches] == [
        ("s1", MismatchKind.FRESHNESS, 3)
    ]
    result = store.repair(folder)
    assert result.repaired == ["s1"]
    assert result.after.ok
    proj = store.read_projection("s1")
    assert proj is not None
    assert (proj.head_seq, proj.state) == (2, state_of([1, 2]))
    assert add(store, "s1", [4]) == 3


def test_wrong_projection_state_is_repaired(store: EventStore, folder: CounterFolder) -> None:
    add(store, "s1", [1, 2])
    store.append("s2", KIND, 0, events_of([5]), state_of([6]), 1)  # a writer that folded wrong
    report = store.verify(folder)
    assert [(m.stream_id, m.kind) for m in report.mismatches] == [("s2", MismatchKind.PROJECTION)]
    result = store.repair(folder)
    assert result.repaired == ["s2"]
    assert result.after.ok


def test_migration_mismatches(store: EventStore) -> None:
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


def test_undecodable_event_is_a_source_write_mismatch(store: EventStore) -> None:
    bad = NewEvent(type="counter.added", schema_version=1, payload='{"m": 1}')
    store.append("s1", KIND, 0, [*events_of([1]), bad], state_of([1]), 1)
    report = store.verify(CounterFolder())
    assert [(m.kind, m.seq) for m in report.mismatches] == [(MismatchKind.SOURCE_WRITE, 2)]


def test_a_changed_creation_time_is_data_loss_and_is_repaired(
    store: EventStore, backend: Backend
) -> None:
    _filled(store)
    Damage(backend).flip_created_bit("s2")
    with pytest.raises(DataLoss):
        store.list_projections(KIND)  # the order would change, silently
    report = store.verify(CounterFolder())
    assert report.data_loss
    assert [(m.stream_id, m.kind) for m in report.mismatches] == [("s2", MismatchKind.PROJECTION)]
    repaired = store.repair(CounterFolder())
    assert repaired.repaired == ["s2"] and repaired.after.ok
    assert [p.stream_id for p in store.list_projections(KIND)] == ["s1", "s2", "s3"]


def test_a_changed_projection_kind_is_data_loss_not_a_shorter_list(
    store: EventStore, backend: Backend
) -> None:
    _filled(store)
    Damage(backend).change_kind("s2", "counteR")
    with pytest.raises(DataLoss):
        store.list_projections(KIND)  # before the guard: s1 and s3 only, nothing said


def test_a_changed_entity_kind_is_data_loss(store: EventStore, backend: Backend) -> None:
    _filled(store)
    Damage(backend).change_entity_kind("todo-alpha", "todk")
    with pytest.raises(DataLoss) as err:
        store.lookup("todo-alpha")  # "todk": a kind no caller asks for, not a NOT_FOUND
    assert err.value.reason == "checksum_mismatch"
    assert err.value.details["entity_id"] == "todo-alpha"
    with pytest.raises(DataLoss) as err:
        store.lookup_prefix("todo-al", "todo")
    assert err.value.reason == "checksum_mismatch"
    report = store.verify(IndexingCounterFolder())
    assert report.data_loss
    assert {m.kind for m in report.mismatches} == {MismatchKind.INDEX}


def test_verify_recomputes_the_entity_index_from_the_events(
    store: EventStore, backend: Backend
) -> None:
    _filled(store)
    folder = IndexingCounterFolder()
    assert store.verify(folder).ok
    # s1 loses the row its event registers; s3 holds one (valid checksum: written by a
    # real append) that none of its events registers.
    Damage(backend).delete_index_rows_of("s1")
    add(store, "s3", [5], index=[IndexEntry(entity_id="ghost", entity_kind="todo")])
    report = store.verify(folder)
    assert report.data_loss
    assert sorted((m.stream_id, m.kind) for m in report.mismatches) == [
        ("s1", MismatchKind.INDEX),
        ("s3", MismatchKind.INDEX),
    ]


@not_for_memory("it has no tables another program could rename")
def test_a_table_renamed_under_the_open_store_is_a_typed_error(
    store: EventStore, backend: Backend
) -> None:
    add(store, "s1", [1])
    # Another program renames the table under the open store (a foreign tool, a
    # downgrade gone wrong): never a raw driver exception.
    backend.execute("ALTER TABLE projections RENAME TO projections_moved")
    with pytest.raises(TurnkeeperError):
        store.list_projections(KIND)
    with pytest.raises(TurnkeeperError):
        store.read_projection("s1")
