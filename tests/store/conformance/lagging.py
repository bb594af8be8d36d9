"""Appends that leave the projection row behind (``projection_state=None``): the head
is the events', listings hand each projection over with its tail, verify accepts the
lag, and writers racing on a lagging stream still end in one winner, no gap, no fork."""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Callable

import pytest

from tests.store.toy import KIND, CounterFolder, add, events_of, state_of, values_of
from turnkeeper.errors import InvalidArgument, StreamConflict
from turnkeeper.store import EventStore, StreamAppend


def _lagging(store: EventStore, stream_id: str, values: list[int], behind: list[int]) -> None:
    """A counter stream of ``values`` whose projection is folded to them, then
    ``behind`` appended without a projection."""
    add(store, stream_id, values)
    for n, value in enumerate(behind):
        store.append(stream_id, KIND, len(values) + n, events_of([value]), None, 1)


def _folded(store: EventStore, stream_id: str) -> str:
    """The counter state of a listed projection with its tail folded in."""
    [projection] = [p for p in store.list_projections(KIND) if p.stream_id == stream_id]
    state = json.loads(projection.state)
    for record in projection.tail:
        state["count"] += 1
        state["sum"] += int(json.loads(record.payload)["n"])
    return json.dumps(state, sort_keys=True)


def test_an_append_without_a_projection_leaves_the_row_behind(
    store: EventStore, folder: CounterFolder
) -> None:
    _lagging(store, "s", [1, 2], [3, 4])
    assert store.head("s") == 4
    projection = store.read_projection("s")
    assert projection is not None
    assert (projection.head_seq, projection.state) == (2, state_of([1, 2]))
    assert projection.tail == ()  # read_projection: the caller reads the stream itself
    assert values_of(store, "s") == [1, 2, 3, 4]
    assert store.verify(folder).ok


def test_a_listing_hands_each_projection_over_with_its_tail(store: EventStore) -> None:
    _lagging(store, "lags", [1], [2, 3])
    add(store, "current", [5, 6])
    listed = {p.stream_id: p for p in store.list_projections(KIND)}
    assert [r.seq for r in listed["lags"].tail] == [2, 3]
    assert listed["lags"].stream_head == 3
    assert listed["current"].tail == ()
    assert listed["current"].stream_head == 2
    assert _folded(store, "lags") == state_of([1, 2, 3])
    of_kinds = store.list_projections_of([KIND, "other"])
    assert [r.seq for r in of_kinds[KIND][0].tail] == [2, 3]
    assert of_kinds["other"] == []


def test_a_snapshot_catches_the_row_up(store: EventStore, folder: CounterFolder) -> None:
    _lagging(store, "s", [1], [2, 3])
    store.append("s", KIND, 3, events_of([4]), state_of([1, 2, 3, 4]), 1)
    projection = store.read_projection("s")
    assert projection is not None and projection.head_seq == 4
    assert store.list_projections(KIND)[0].tail == ()
    assert store.verify(folder).ok


def test_a_new_stream_needs_its_projection(store: EventStore) -> None:
    with pytest.raises(InvalidArgument) as err:
        store.append("new", KIND, 0, events_of([1]), None, 1)
    assert err.value.reason == "projection_required"
    with pytest.raises(InvalidArgument):
        store.append_many(
            [
                StreamAppend(
                    stream_id="new",
                    kind=KIND,
                    expected_seq=0,
                    events=tuple(events_of([1])),
                    projection_state=None,
                    projection_schema_version=1,
                )
            ]
        )
    assert store.head("new") == 0


def test_a_lagging_stream_keeps_its_head_check_and_kind(store: EventStore) -> None:
    _lagging(store, "s", [1], [2])
    for expected in (1, 3):  # the row's head, and one past the events'
        with pytest.raises(StreamConflict) as err:
            store.append("s", KIND, expected, events_of([9]), None, 1)
        assert err.value.details["actual_seq"] == 2
    with pytest.raises(InvalidArgument) as kind_err:
        store.append("s", "other", 2, events_of([9]), None, 1)
    assert kind_err.value.reason == "stream_kind_mismatch"
    assert store.head("s") == 2


def test_a_wrong_fold_behind_the_head_is_found(store: EventStore, folder: CounterFolder) -> None:
    add(store, "s", [1])
    store.append("s", KIND, 1, events_of([2]), state_of([7, 7]), 1)  # folded wrong
    store.append("s", KIND, 2, events_of([3]), None, 1)
    report = store.verify(folder)
    assert [(m.stream_id, m.kind.value, m.seq) for m in report.mismatches] == [
        ("s", "projection", 2)
    ]
    result = store.repair(folder)
    assert result.repaired == ["s"] and result.after.ok
    projection = store.read_projection("s")
    assert projection is not None
    assert (projection.head_seq, projection.state) == (3, state_of([1, 2, 3]))


@pytest.mark.parametrize("snapshot", ["neither", "one", "both"])
def test_writers_racing_on_a_lagging_stream_one_wins(
    open_new: Callable[[], EventStore], snapshot: str
) -> None:
    """Writers on stores of their own append at the head they all read, with or without
    a projection: one wins each round, the others conflict; no gap, no fork."""
    writers, rounds = 4, 12
    seed = open_new()
    _lagging(seed, "contested", [100], [101])
    mine = [open_new() for _ in range(writers)]
    barrier = threading.Barrier(writers)
    outcomes: dict[int, list[str]] = defaultdict(list)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        store = mine[w]
        with_projection = snapshot == "both" or (snapshot == "one" and w == 0)
        try:
            for r in range(rounds):
                barrier.wait()
                head = store.head("contested")
                before = values_of(store, "contested")
                barrier.wait()  # every writer holds the same head now
                state = state_of([*before, w]) if with_projection else None
                try:
                    store.append("contested", KIND, head, events_of([w]), state, 1)
                    outcome = "won"
                except StreamConflict as exc:
                    outcome = "lost" if exc.details["actual_seq"] == head + 1 else repr(exc)
                with lock:
                    outcomes[r].append(outcome)
                barrier.wait()
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    for r in range(rounds):
        assert sorted(outcomes[r]) == ["lost"] * (writers - 1) + ["won"], (r, outcomes[r])
    reader = open_new()
    assert [e.seq for e in reader.read_stream("contested")] == list(range(1, rounds + 3))
    assert reader.head("contested") == rounds + 2
    projection = reader.read_projection("contested")
    assert projection is not None and projection.head_seq <= rounds + 2
    assert reader.verify(CounterFolder()).ok
    assert _folded(reader, "contested") == state_of(values_of(reader, "contested"))
