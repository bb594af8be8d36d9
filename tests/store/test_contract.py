"""The EventStore contract: every backend must pass these unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.store.conftest import Backend
from tests.store.toy import KIND, add, events_of, state_of
from turnkeeper.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    StreamConflict,
)
from turnkeeper.store import IndexEntry, NewEvent, SqlEventStore

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def test_append_read_round_trip(store: SqlEventStore) -> None:
    before = datetime.now(UTC)
    events = [
        NewEvent(type="counter.added", schema_version=1, payload='{"n": 1}'),
        NewEvent(type="counter.noted", schema_version=3, payload='{"n": 2, "text": "é ✓ 𝄞"}'),
    ]
    head = store.append("s1", KIND, 0, events, state_of([1, 2]), 7)
    assert head == 2
    assert store.head("s1") == 2
    got = store.read_stream("s1")
    assert [(e.stream_id, e.seq, e.type, e.schema_version, e.payload) for e in got] == [
        ("s1", 1, "counter.added", 1, '{"n": 1}'),
        ("s1", 2, "counter.noted", 3, '{"n": 2, "text": "é ✓ 𝄞"}'),
    ]
    assert all(len(e.checksum) == 32 for e in got)
    assert got[0].checksum != got[1].checksum
    assert before - timedelta(seconds=1) <= got[0].recorded_at <= datetime.now(UTC)
    proj = store.read_projection("s1")
    assert proj is not None
    assert (proj.stream_id, proj.kind, proj.head_seq, proj.schema_version, proj.state) == (
        "s1",
        KIND,
        2,
        7,
        state_of([1, 2]),
    )


def test_unknown_stream(store: SqlEventStore) -> None:
    assert store.head("nope") == 0
    assert store.read_stream("nope") == []
    assert store.read_projection("nope") is None
    assert store.lookup("nope") is None
    assert store.list_projections(KIND) == []


def test_sequences_are_contiguous_across_appends(store: SqlEventStore) -> None:
    assert add(store, "s1", [1, 2, 3]) == 3
    assert add(store, "s1", [4]) == 4
    assert add(store, "s1", [5, 6]) == 6
    assert [e.seq for e in store.read_stream("s1")] == [1, 2, 3, 4, 5, 6]
    assert [e.seq for e in store.read_stream("s1", after_seq=2, limit=3)] == [3, 4, 5]
    assert store.read_stream("s1", after_seq=6) == []
    proj = store.read_projection("s1")
    assert proj is not None
    assert proj.head_seq == 6
    assert json.loads(proj.state) == {"count": 6, "sum": 21}


def test_list_projections_oldest_stream_first(store: SqlEventStore) -> None:
    for name in ["zeta", "alpha", "mid"]:
        add(store, name, [1])
    store.append("other", "another-kind", 0, events_of([1]), "{}", 1)
    add(store, "alpha", [2])  # updating a stream does not make it younger
    assert [p.stream_id for p in store.list_projections(KIND)] == ["zeta", "alpha", "mid"]
    assert [p.stream_id for p in store.list_projections("another-kind")] == ["other"]


@pytest.mark.parametrize("expected", [0, 1, 3, 9])
def test_expected_seq_conflict_writes_nothing(store: SqlEventStore, expected: int) -> None:
    add(store, "s1", [1, 2])
    before = (store.read_stream("s1"), store.read_projection("s1"))
    with pytest.raises(StreamConflict) as err:
        store.append("s1", KIND, expected, events_of([100]), state_of([100]), 1)
    assert err.value.details["stream_id"] == "s1"
    assert err.value.details["actual_seq"] == 2
    assert (store.read_stream("s1"), store.read_projection("s1")) == before


def test_expected_seq_on_new_stream_must_be_zero(store: SqlEventStore) -> None:
    with pytest.raises(StreamConflict):
        store.append("fresh", KIND, 2, events_of([1]), state_of([1]), 1)
    assert store.head("fresh") == 0
    assert store.read_projection("fresh") is None


def test_index_entries_and_lookup(store: SqlEventStore) -> None:
    add(store, "s1", [1], index=[IndexEntry(entity_id="todo-1", entity_kind="todo")])
    add(store, "s1", [2], index=[IndexEntry(entity_id="todo-1", entity_kind="todo")])  # same owner
    assert store.lookup("todo-1") == ("s1", "todo")


def test_index_collision_is_atomic(store: SqlEventStore) -> None:
    add(store, "s1", [1], index=[IndexEntry(entity_id="gate-1", entity_kind="gate")])
    # A new stream whose append collides: no events, no projection, no other index rows.
    with pytest.raises(AlreadyExists) as err:
        add(
            store,
            "s2",
            [5, 6],
            index=[
                IndexEntry(entity_id="todo-9", entity_kind="todo"),
                IndexEntry(entity_id="gate-1", entity_kind="gate"),
            ],
        )
    assert err.value.details["entity_id"] == "gate-1"
    assert err.value.details["stream_id"] == "s1"
    assert store.head("s2") == 0
    assert store.read_projection("s2") is None
    assert store.lookup("todo-9") is None
    # An existing stream whose append collides keeps its old head and projection.
    add(store, "s3", [1])
    before = store.read_projection("s3")
    with pytest.raises(AlreadyExists):
        add(store, "s3", [2], index=[IndexEntry(entity_id="gate-1", entity_kind="gate")])
    assert store.head("s3") == 1
    assert store.read_projection("s3") == before
    assert store.lookup("gate-1") == ("s1", "gate")


def test_invalid_arguments_write_nothing(store: SqlEventStore) -> None:
    with pytest.raises(InvalidArgument):
        store.append("s1", KIND, 0, [], state_of([]), 1)
    with pytest.raises(InvalidArgument):
        store.append("s1", KIND, -1, events_of([1]), state_of([1]), 1)
    with pytest.raises(InvalidArgument):
        store.append("", KIND, 0, events_of([1]), state_of([1]), 1)
    bad = NewEvent(type="t", schema_version=1, payload='{"n": "\udcff"}')
    with pytest.raises(InvalidArgument):
        store.append("s1", KIND, 0, [bad], state_of([1]), 1)
    assert store.head("s1") == 0


def test_stream_kind_is_fixed(store: SqlEventStore) -> None:
    add(store, "s1", [1])
    with pytest.raises(InvalidArgument) as err:
        store.append("s1", "other-kind", 1, events_of([2]), state_of([1, 2]), 1)
    assert err.value.reason == "stream_kind_mismatch"
    assert store.head("s1") == 1


def test_reopen_keeps_everything(open_new: Callable[[], SqlEventStore]) -> None:
    first = open_new()
    add(first, "s1", [1, 2], index=[IndexEntry(entity_id="e1", entity_kind="todo")])
    add(first, "s2", [3])
    first.close()
    second = open_new()
    assert [e.seq for e in second.read_stream("s1")] == [1, 2]
    assert second.lookup("e1") == ("s1", "todo")
    proj = second.read_projection("s2")
    assert proj is not None
    assert proj.state == state_of([3])
    assert add(second, "s1", [4]) == 3


def test_closed_store_refuses(store: SqlEventStore) -> None:
    store.close()
    store.close()  # idempotent
    with pytest.raises(FailedPrecondition) as err:
        add(store, "s1", [1], expected=0)
    assert err.value.reason == "store_closed"
    with pytest.raises(FailedPrecondition):
        store.read_stream("s1")


@pytest.mark.parametrize("mode", ["durable", "lazy"])
def test_acknowledged_appends_survive_a_crashed_writer_process(
    backend: Backend, open_new: Callable[[], SqlEventStore], mode: str
) -> None:
    """Write in another process that dies without closing; read everything here."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.store._workers", backend.url, "3", "5", mode],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == (0 if mode == "durable" else -9), proc.stderr
    acked = [line.split() for line in proc.stdout.splitlines() if line.startswith("ack")]
    assert len(acked) == 15
    store = open_new()
    for _, stream, head in acked:
        assert store.head(stream) >= int(head)
    for i in range(3):
        assert [e.seq for e in store.read_stream(f"s{i}")] == [1, 2, 3, 4, 5]
        proj = store.read_projection(f"s{i}")
        assert proj is not None
        assert proj.state == state_of(range(5))
