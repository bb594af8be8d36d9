"""``heads_read_together`` (runtime/log/streams.py): a controller's step confirms its
cached session, goal and settings by one read of their heads, on a real SQLite file.

Two ``SqlEventStore`` objects on one file stand in for two processes. Inside the block
the cached states are served against the heads read at its start; a state that moved
since — written in the block, or by the other store — is read again, never served stale
past the block.
"""

from __future__ import annotations

import pytest

from tests.runtime.goal_streams import add_todo, todo_ids
from turnkeeper.kernel.proposals import CreateGoal
from turnkeeper.runtime.log.streams import heads_read_together, load_stream
from turnkeeper.runtime.services.goals import GOAL_CODEC, GoalService, goal_stream
from turnkeeper.store import SqlEventStore


class CountedHeads:
    """Counts the single-stream head queries a store is asked (the method is wrapped on
    the real store object: every query still runs)."""

    def __init__(self, store: SqlEventStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.asked: list[str] = []
        real = store.head

        def head(stream_id: str) -> int:
            self.asked.append(stream_id)
            return real(stream_id)

        monkeypatch.setattr(store, "head", head)


def goals_a_and_b(store: SqlEventStore, *loaded_in: SqlEventStore) -> None:
    """Goals ``a`` and ``b`` created through ``store``, each loaded (so cached) through
    every store of ``loaded_in``."""
    goals = GoalService(store)
    goals.create(CreateGoal(goal_id="a", title="a"))
    goals.create(CreateGoal(goal_id="b", title="b"))
    for each in loaded_in:
        load_stream(each, GOAL_CODEC, goal_stream("a"))
        load_stream(each, GOAL_CODEC, goal_stream("b"))


def test_cached_states_are_confirmed_by_the_heads_read_at_the_start_of_the_block(
    two_stores: tuple[SqlEventStore, SqlEventStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = two_stores
    goals_a_and_b(store, store)
    counted = CountedHeads(store, monkeypatch)
    with heads_read_together(store, [goal_stream("a"), goal_stream("b")]):
        assert load_stream(store, GOAL_CODEC, goal_stream("a"))[1] == 1
        assert load_stream(store, GOAL_CODEC, goal_stream("b"))[1] == 1
    assert counted.asked == []  # both confirmed by the one query of the block
    load_stream(store, GOAL_CODEC, goal_stream("a"))
    assert counted.asked == [goal_stream("a")]  # past the block: a query of its own


def test_another_writers_append_is_seen_at_the_next_block(
    two_stores: tuple[SqlEventStore, SqlEventStore],
) -> None:
    store, other = two_stores
    GoalService(store).create(CreateGoal(goal_id="g", title="g"))
    stream = goal_stream("g")
    load_stream(store, GOAL_CODEC, stream)
    with heads_read_together(store, [stream]):
        GoalService(other).submit("g", add_todo("t1"))  # lands after the heads were read
        state, head = load_stream(store, GOAL_CODEC, stream)
        assert (head, todo_ids(state)) == (1, [])  # as of the block's one moment
    with heads_read_together(store, [stream]):
        state, head = load_stream(store, GOAL_CODEC, stream)
        assert (head, todo_ids(state)) == (2, ["t1"])


def test_a_write_in_the_block_is_read_back_not_the_looked_head(
    two_stores: tuple[SqlEventStore, SqlEventStore],
) -> None:
    store, _ = two_stores
    goals = GoalService(store)
    goals.create(CreateGoal(goal_id="g", title="g"))
    stream = goal_stream("g")
    with heads_read_together(store, [stream]):
        goals.submit("g", add_todo("t1"))  # this thread's own write, after the look
        state, head = load_stream(store, GOAL_CODEC, stream)
        assert (head, todo_ids(state)) == (2, ["t1"])
        assert todo_ids(goals.load("g")) == ["t1"]


def test_the_heads_hold_only_for_their_store_and_their_streams(
    two_stores: tuple[SqlEventStore, SqlEventStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, other = two_stores
    goals_a_and_b(store, store, other)
    mine, theirs = CountedHeads(store, monkeypatch), CountedHeads(other, monkeypatch)
    with heads_read_together(store, [goal_stream("a")]):
        load_stream(store, GOAL_CODEC, goal_stream("b"))  # not read together
        load_stream(other, GOAL_CODEC, goal_stream("a"))  # another store
    assert mine.asked == [goal_stream("b")]
    assert theirs.asked == [goal_stream("a")]
