"""PostgreSQL's append path: a whole transaction in one round trip, checked in itself.

The store is reached through the benchmark's counting relay (benchmarks/_pg_wire.py),
which counts what crosses the wire outside the client library: each append, and each
``append_many`` however many streams and index entries it carries, is one round trip
and one ``COMMIT``. A write whose check fails in the pipeline (a moved head, another
stream's entity) aborts the transaction there, writes nothing, and gets its own typed
error from the statement-by-statement path.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks._pg_wire import WireTap
from tests.store.toy import KIND, add, events_of, part, state_of
from turnkeeper.errors import AlreadyExists, StreamConflict
from turnkeeper.store import HeadCheck, IndexEntry, SqlEventStore, open_store


@pytest.fixture
def tapped(postgres_url: str) -> Iterator[tuple[WireTap, SqlEventStore]]:
    tap = WireTap(postgres_url)
    store = open_store(tap.url(postgres_url))
    try:
        yield tap, store
    finally:
        store.close()
        tap.close()


def test_an_append_is_one_round_trip_and_one_commit(
    tapped: tuple[WireTap, SqlEventStore],
) -> None:
    tap, store = tapped
    add(store, "warm", [1])  # the writer's connection opened, its statements prepared
    add(store, "s1", [1], expected=0)
    with tap.counting() as count:
        store.append("s1", KIND, 1, events_of([2]), state_of([1, 2]), 1)
    assert (count.round_trips, count.tags["COMMIT"]) == (1, 1)
    assert store.head("s1") == 2


def test_a_group_with_index_entries_is_one_round_trip(
    tapped: tuple[WireTap, SqlEventStore],
) -> None:
    tap, store = tapped
    add(store, "warm", [1], index=[IndexEntry(entity_id="w1", entity_kind="todo")])
    add(store, "a", [1], expected=0)
    entries = [IndexEntry(entity_id="e1", entity_kind="todo")]
    with tap.counting() as count:
        store.append_many([part("a", [1], [2]), part("b", [], [1], index=entries)])
    assert (count.round_trips, count.tags["COMMIT"]) == (1, 1)
    assert (store.head("a"), store.head("b"), store.lookup("e1")) == (2, 1, ("b", "todo"))
    # The same stream registering the same entity again passes in the pipeline.
    with tap.counting() as count:
        store.append_many([part("b", [1], [2], index=entries)])
    assert (count.round_trips, count.tags["COMMIT"]) == (1, 1)


def test_a_failed_check_writes_nothing_and_is_typed(
    tapped: tuple[WireTap, SqlEventStore],
) -> None:
    tap, store = tapped
    add(store, "s1", [1, 2])
    add(store, "owner", [1], index=[IndexEntry(entity_id="taken", entity_kind="todo")])
    with tap.counting() as count, pytest.raises(StreamConflict):
        store.append("s1", KIND, 1, events_of([9]), state_of([1, 9]), 1)  # the head is 2
    assert count.tags["COMMIT"] == 0  # the pipeline's transaction was rolled back
    with pytest.raises(AlreadyExists):
        store.append_many(
            [
                part("s1", [1, 2], [3]),
                part("thief", [], [1], index=[IndexEntry(entity_id="taken", entity_kind="todo")]),
            ]
        )
    with pytest.raises(StreamConflict):  # a new stream that exists already
        store.append("owner", KIND, 0, events_of([5]), state_of([5]), 1)
    assert (store.head("s1"), store.head("thief"), store.head("owner")) == (2, 0, 1)
    assert store.lookup("taken") == ("owner", "todo")


def test_a_head_check_rides_the_pipeline(tapped: tuple[WireTap, SqlEventStore]) -> None:
    tap, store = tapped
    add(store, "warm", [1])
    add(store, "s1", [1])
    add(store, "goal", [1, 2])
    held = [HeadCheck(stream_id="goal", head_seq=2)]
    with tap.counting() as count:
        store.append_many([part("s1", [1], [2])], unchanged=held)
    assert (count.round_trips, count.tags["COMMIT"]) == (1, 1)
    with tap.counting() as count, pytest.raises(StreamConflict) as err:
        store.append_many(
            [part("s1", [1, 2], [3])], unchanged=[HeadCheck(stream_id="goal", head_seq=1)]
        )
    assert count.tags["COMMIT"] == 0  # the pipeline's transaction was rolled back
    assert (err.value.details["stream_id"], err.value.details["actual_seq"]) == ("goal", 2)
    assert (store.head("s1"), store.head("goal")) == (2, 2)
