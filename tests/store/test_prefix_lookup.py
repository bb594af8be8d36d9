"""``lookup_prefix``: the ids of one kind a prefix names, from checked rows only."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.store.test_guarded_reads import damaged  # noqa: F401 - a fixture
from tests.store.toy import KIND
from turnkeeper.errors import DataLoss, InvalidArgument
from turnkeeper.store import IndexEntry, NewEvent, SqlEventStore


def _register(store: SqlEventStore, stream: str, entries: list[IndexEntry]) -> None:
    event = NewEvent(type="counter.added", schema_version=1, payload='{"n": 1}')
    state = json.dumps({"count": 1, "sum": 1}, sort_keys=True)
    store.append(stream, KIND, 0, [event], state, 1, entries)


def test_a_prefix_names_the_ids_of_its_kind_in_order(store: SqlEventStore) -> None:
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


def test_an_empty_prefix_is_refused(store: SqlEventStore) -> None:
    with pytest.raises(InvalidArgument) as err:
        store.lookup_prefix("", "todo")
    assert err.value.reason == "empty_id"


def test_a_row_with_a_damaged_kind_is_data_loss_not_a_shorter_list(
    damaged: Callable[[str, bytes, int, int], SqlEventStore],  # noqa: F811
) -> None:
    store = damaged("entity_index", b"todo-alphas1todo", len("todo-alphas1tod"), 0x04)
    with pytest.raises(DataLoss) as err:
        store.lookup_prefix("todo-al", "todo")
    assert err.value.reason == "checksum_mismatch"
