"""The contract of single appends and plain reads: sequences, heads, the index, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.store.conftest import Backend, not_for_memory
from tests.store.toy import KIND, add, events_of, state_of
from turnkeeper.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    StreamConflict,
    TurnkeeperError,
    Unavailable,
)
from turnkeeper.store import EventStore, IndexEntry, NewEvent, open_store

PROJECT_ROOT = Path(__file__).resolve().parents[3]


def test_append_read_round_trip(store: EventStore) -> None:
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


def test_unknown_stream(store: EventStore) -> None:
    assert store.head("nope") == 0
    assert store.read_stream("nope") == []
    assert store.read_projection("nope") is None
    assert store.lookup("nope") is None
    assert store.list_projections(KIND) == []


def test_sequences_are_contiguous_across_appends(store: EventStore) -> None:
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


def test_list_projections_oldest_stream_first(store: EventStore) -> None:
    for name in ["zeta", "alpha", "mid"]:
        add(store, name, [1])
    store.append("other", "another-kind", 0, events_of([1]), "{}", 1)
    add(store, "alpha", [2])  # updating a stream does not make it younger
    assert [p.stream_id for p in store.list_projections(KIND)] == ["zeta", "alpha", "mid"]
    assert [p.stream_id for p in store.list_projections("another-kind")] == ["other"]


def test_list_projections_of_several_kinds_is_each_listing(store: EventStore) -> None:
    for name in ["zeta", "alpha"]:
        add(store, name, [1])
    store.append("other", "another-kind", 0, events_of([1]), "{}", 1)
    listed = store.list_projections_of([KIND, "another-kind", "no-such-kind"])
    assert listed == {
        KIND: store.list_projections(KIND),
        "another-kind": store.list_projections("another-kind"),
        "no-such-kind": [],
    }
    assert [p.stream_id for p in listed[KIND]] == ["zeta", "alpha"]


@pytest.mark.parametrize("expected", [0, 1, 3, 9])
def test_expected_seq_conflict_writes_nothing(store: EventStore, expected: int) -> None:
    add(store, "s1", [1, 2])
    before = (store.read_stream("s1"), store.read_projection("s1"))
    with pytest.raises(StreamConflict) as err:
        store.append("s1", KIND, expected, events_of([100]), state_of([100]), 1)
    assert err.value.details["stream_id"] == "s1"
    assert err.value.details["actual_seq"] == 2
    assert (store.read_stream("s1"), store.read_projection("s1")) == before


def test_expected_seq_on_new_stream_must_be_zero(store: EventStore) -> None:
    with pytest.raises(StreamConflict):
        store.append("fresh", KIND, 2, events_of([1]), state_of([1]), 1)
    assert store.head("fresh") == 0
    assert store.read_projection("fresh") is None


def test_index_entries_and_lookup(store: EventStore) -> None:
    add(store, "s1", [1], index=[IndexEntry(entity_id="todo-1", entity_kind="todo")])
    add(store, "s1", [2], index=[IndexEntry(entity_id="todo-1", entity_kind="todo")])  # same owner
    assert store.lookup("todo-1") == ("s1", "todo")


def test_index_collision_is_atomic(store: EventStore) -> None:
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


def test_an_entity_claimed_by_two_stores_at_once_has_one_owner(
    open_new: Callable[[], EventStore],
) -> None:
    """Two store instances (two connections) register one entity id for two streams."""
    stores = [open_new(), open_new()]
    start = threading.Barrier(2)
    outcome: dict[str, object] = {}

    def claim(i: int) -> None:
        start.wait()
        entry = IndexEntry(entity_id="contested", entity_kind="todo")
        try:
            outcome[f"s{i}"] = add(stores[i], f"s{i}", [i], expected=0, index=[entry])
        except TurnkeeperError as exc:
            outcome[f"s{i}"] = exc

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    winners = [s for s, o in outcome.items() if o == 1]
    losers = [o for o in outcome.values() if isinstance(o, AlreadyExists)]
    assert len(winners) == 1 and len(losers) == 1, outcome
    loser = "s1" if winners == ["s0"] else "s0"
    assert stores[0].lookup("contested") == (winners[0], "todo")
    assert stores[1].head(loser) == 0
    assert stores[1].read_projection(loser) is None


def test_invalid_arguments_write_nothing(store: EventStore) -> None:
    with pytest.raises(InvalidArgument):
        store.append("s1", KIND, 0, [], state_of([]), 1)
    with pytest.raises(InvalidArgument):
        store.append("s1", KIND, -1, events_of([1]), state_of([1]), 1)
    with pytest.raises(InvalidArgument):
        store.append("", KIND, 0, events_of([1]), state_of([1]), 1)
    bad = NewEvent(type="t", schema_version=1, payload='{"n": "\udcff"}')
    with pytest.raises(InvalidArgument):
        store.append("s1", KIND, 0, [bad], state_of([1]), 1)
    with pytest.raises(InvalidArgument):
        store.read_stream("s1", after_seq=-1)
    assert store.head("s1") == 0


def test_stream_kind_is_fixed(store: EventStore) -> None:
    add(store, "s1", [1])
    with pytest.raises(InvalidArgument) as err:
        store.append("s1", "other-kind", 1, events_of([2]), state_of([1, 2]), 1)
    assert err.value.reason == "stream_kind_mismatch"
    assert store.head("s1") == 1


def test_reopen_keeps_everything(open_new: Callable[[], EventStore]) -> None:
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


def test_closed_store_refuses(store: EventStore) -> None:
    store.close()
    store.close()  # idempotent
    with pytest.raises(FailedPrecondition) as err:
        add(store, "s1", [1], expected=0)
    assert err.value.reason == "store_closed"
    with pytest.raises(FailedPrecondition):
        store.read_stream("s1")


@not_for_memory("it is in this process: there is no database to fail to reach")
def test_an_unreachable_database_is_unavailable(backend: Backend) -> None:
    with pytest.raises(Unavailable) as err:
        open_store(backend.unreachable_url)
    assert err.value.reason == "database_unavailable"


@not_for_memory("its database lives in one process: nothing outlives the writer's")
@pytest.mark.parametrize("mode", ["durable", "lazy"])
def test_acknowledged_appends_survive_a_crashed_writer_process(
    backend: Backend, open_new: Callable[[], EventStore], mode: str
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


def test_the_database_clock_is_utc_and_close_to_ours(store: EventStore) -> None:
    before = datetime.now(UTC)
    now = store.now()
    after = datetime.now(UTC)
    assert now.utcoffset() == timedelta(0)
    # The test server runs on this machine: its clock agrees with ours closely.
    assert before - timedelta(seconds=5) <= now <= after + timedelta(seconds=5)


def test_a_wait_for_work_ends_by_its_timeout_and_says_whether_it_was_woken(
    open_new: Callable[[], EventStore],
) -> None:
    waiter, signaller = open_new(), open_new()
    timeout = 1.0
    result: dict[str, object] = {}

    def wait() -> None:
        started = time.monotonic()
        result["woken"] = waiter.wait_for_work(timeout)
        result["elapsed"] = time.monotonic() - started

    thread = threading.Thread(target=wait)
    thread.start()
    while thread.is_alive():  # a wake-up is a hint: keep hinting until the wait ends
        signaller.signal_work()
        thread.join(0.05)
    elapsed = result["elapsed"]
    assert isinstance(elapsed, float) and elapsed < timeout + 5
    # Woken early (a backend with wake-ups), or not woken and the whole timeout waited.
    if result["woken"] is True:
        assert elapsed < timeout
    else:
        assert result["woken"] is False
        assert elapsed >= timeout - 0.05
