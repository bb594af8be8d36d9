"""Reads: ranges, unknown streams, freshness across connections, id prefixes."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.store.toy import KIND, add, state_of
from turnkeeper.errors import InvalidArgument
from turnkeeper.store import EventStore, IndexEntry, NewEvent


@pytest.fixture
def filled(store: EventStore) -> EventStore:
    add(store, "long", list(range(1, 13)))
    add(store, "long", [100, 200], expected=12)  # a second append: seqs 13, 14
    add(store, "short", [7])
    add(store, "long-neighbour", [1, 2])  # a prefix match must not leak its rows
    return store


def test_heads_are_each_streams_head_in_the_order_asked(filled: EventStore) -> None:
    asked = ["short", "unknown:stream", "long", "long-neighbour", "long"]
    assert filled.heads(asked) == [filled.head(s) for s in asked] == [1, 0, 14, 2, 14]
    assert filled.heads([]) == []


def test_heads_see_another_connections_append(
    filled: EventStore, open_new: Callable[[], EventStore]
) -> None:
    other = open_new()
    assert filled.heads(["short", "long"]) == [1, 14]
    add(other, "short", [8], expected=1)
    assert filled.heads(["short", "long"]) == [2, 14]


def test_heads_refuse_an_id_no_backend_can_store(filled: EventStore) -> None:
    with pytest.raises(InvalidArgument):
        filled.heads(["long", "bad\x00id"])


def test_the_public_reads_on_known_empty_and_unknown_streams(filled: EventStore) -> None:
    assert filled.head("long") == 14
    assert filled.head("short") == 1
    assert filled.head("unknown:stream") == 0
    assert filled.read_projection("unknown:stream") is None
    assert filled.read_stream("unknown:stream") == []
    assert [e.seq for e in filled.read_stream("long", after_seq=12)] == [13, 14]
    assert [e.seq for e in filled.read_stream("long", after_seq=2, limit=3)] == [3, 4, 5]
    assert filled.read_stream("long", limit=0) == []
    assert [e.seq for e in filled.read_stream("long", after_seq=10, limit=100)] == [
        11,
        12,
        13,
        14,
    ]
    assert filled.read_stream("long", after_seq=20) == []
    assert [e.seq for e in filled.read_stream("long-neighbour")] == [1, 2]
    projection = filled.read_projection("long")
    assert projection is not None
    assert (projection.kind, projection.head_seq) == (KIND, 14)
    assert projection.state == state_of([*range(1, 13), 100, 200])


def test_reads_see_an_append_made_through_another_store(
    filled: EventStore, open_new: Callable[[], EventStore]
) -> None:
    # Pooled read connections must not keep a snapshot open across reads.
    other = open_new()
    assert filled.head("short") == 1
    assert filled.read_projection("short") is not None
    add(other, "short", [8], expected=1)
    assert filled.head("short") == 2
    projection = filled.read_projection("short")
    assert projection is not None and projection.head_seq == 2
    assert [e.seq for e in filled.read_stream("short")] == [1, 2]


def _register(store: EventStore, stream: str, entries: list[IndexEntry]) -> None:
    event = NewEvent(type="counter.added", schema_version=1, payload='{"n": 1}')
    state = json.dumps({"count": 1, "sum": 1}, sort_keys=True)
    store.append(stream, KIND, 0, [event], state, 1, entries)


def test_a_prefix_names_the_ids_of_its_kind_in_order(store: EventStore) -> None:
    _register(
        store,
        "s1",
        [
            IndexEntry(entity_id="todo-b2", entity_kind="todo"),
            IndexEntry(entity_id="todo-a1", entity_kind="todo"),
            IndexEntry(entity_id="todo-gate", entity_kind="gate"),
        ],
    )
    _register(store, "s2", [IndexEntry(entity_id="todo-a10", entity_kind="todo")])
    assert store.lookup_prefix("todo-", "todo") == ["todo-a1", "todo-a10", "todo-b2"]
    assert store.lookup_prefix("todo-a1", "todo") == ["todo-a1", "todo-a10"]
    assert store.lookup_prefix("todo-", "gate") == ["todo-gate"]
    assert store.lookup_prefix("todo-c", "todo") == []
    # A prefix is compared character by character, not as a LIKE pattern.
    assert store.lookup_prefix("todo-%", "todo") == []
    assert store.lookup_prefix("todo-_1", "todo") == []


def test_an_empty_prefix_is_refused(store: EventStore) -> None:
    with pytest.raises(InvalidArgument) as err:
        store.lookup_prefix("", "todo")
    assert err.value.reason == "empty_id"


@pytest.mark.parametrize("call", ["head", "read_stream", "read_projection", "lookup", "append"])
def test_an_id_with_a_nul_character_is_invalid_on_every_backend(
    store: EventStore, call: str
) -> None:
    bad = "stream\x00id"
    calls: dict[str, Callable[[], object]] = {
        "head": lambda: store.head(bad),
        "read_stream": lambda: store.read_stream(bad),
        "read_projection": lambda: store.read_projection(bad),
        "lookup": lambda: store.lookup(bad),
        "append": lambda: store.append(
            bad, KIND, 0, [NewEvent(type="t", schema_version=1, payload="{}")], "{}", 1
        ),
    }
    with pytest.raises(InvalidArgument) as raised:
        calls[call]()
    assert raised.value.reason == "bad_text"
    assert store.list_projections(KIND) == []  # nothing was written
