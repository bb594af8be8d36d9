"""Shortened ids: one rule (``pick_id``), applied to the store's index and to a goal."""

from __future__ import annotations

import pytest

from turnkeeper.errors import InvalidArgument, NotFound
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, CriterionSpec, OpenGate, TodoSpec
from turnkeeper.runtime.log.ids import MAX_CANDIDATES, pick_id
from turnkeeper.runtime.services.goals import GoalService, id_in_goal
from turnkeeper.store import SqlEventStore


def test_an_exact_id_wins_over_the_longer_ids_it_starts() -> None:
    assert pick_id("criterion", "c1", ["c10", "c1", "c11"]) == "c1"


def test_a_unique_prefix_names_its_id() -> None:
    assert pick_id("todo", "todo-3f", ["todo-3f9c", "todo-4a"]) == "todo-3f9c"


def test_an_ambiguous_prefix_lists_at_most_ten_candidates() -> None:
    ids = [f"todo-{n:02d}" for n in range(12)]
    with pytest.raises(InvalidArgument) as err:
        pick_id("todo", "todo-", reversed(ids))
    assert err.value.reason == "ambiguous_id"
    assert err.value.details["candidates"] == ids[:MAX_CANDIDATES]
    assert err.value.details["matches"] == 12
    assert "2 more" in err.value.message


def test_no_match_is_not_found_named_by_kind() -> None:
    with pytest.raises(NotFound) as err:
        pick_id("gate", "gate-9", ["gate-1"])
    assert err.value.reason == "gate_not_found"


def test_an_empty_id_is_invalid() -> None:
    with pytest.raises(InvalidArgument) as err:
        pick_id("goal", "", ["goal-1"])
    assert err.value.reason == "empty_id"


def _goals(store: SqlEventStore) -> GoalService:
    goals = GoalService(store)
    for gid in ("goal-aa1", "goal-ab2"):
        criteria = [CriterionSpec(id=f"c{n}", text=f"criterion {n}") for n in (1, 10)]
        goals.create(CreateGoal(goal_id=gid, title=gid, criteria=criteria))
    goals.submit("goal-aa1", AddTodo(todo=TodoSpec(todo_id="todo-x1", title="one")))
    goals.submit("goal-ab2", AddTodo(todo=TodoSpec(todo_id="todo-x2", title="two")))
    goals.submit("goal-ab2", OpenGate(gate_id="gate-x1", title="decide"))
    return goals


def test_the_store_backed_resolution_checks_the_kind(store: SqlEventStore) -> None:
    goals = _goals(store)
    assert goals.resolve("goal", "goal-aa") == "goal-aa1"
    assert goals.resolve("goal", "goal-ab2") == "goal-ab2"
    assert goals.locate("todo", "todo-x2") == ("goal-ab2", "todo-x2")
    # "gate-x" names one gate, though todos and a gate share "x1"-like names.
    assert goals.locate("gate", "gate-x") == ("goal-ab2", "gate-x1")
    with pytest.raises(InvalidArgument) as err:
        goals.resolve("todo", "todo-x")
    assert err.value.details["candidates"] == ["todo-x1", "todo-x2"]
    with pytest.raises(NotFound) as missing:
        goals.resolve("gate", "todo-x1")  # a todo's id is no gate's
    assert missing.value.reason == "gate_not_found"


def test_ids_inside_a_goal_resolve_on_its_own_state(store: SqlEventStore) -> None:
    state = _goals(store).load("goal-aa1")
    assert id_in_goal(state, "criterion", "c1") == "c1"
    assert id_in_goal(state, "criterion", "c10") == "c10"
    assert id_in_goal(state, "todo", "todo") == "todo-x1"
    with pytest.raises(NotFound):
        id_in_goal(state, "todo", "todo-x2")  # another goal's todo
    with pytest.raises(InvalidArgument) as err:
        id_in_goal(state, "session", "s")
    assert err.value.reason == "unknown_id_kind"


def test_a_write_never_resolves_a_prefix_by_itself(store: SqlEventStore) -> None:
    """The runtime names goals by full id: ``submit`` on a prefix is NOT_FOUND."""
    goals = _goals(store)
    with pytest.raises(NotFound):
        goals.submit("goal-aa", AddTodo(todo=TodoSpec(todo_id="todo-y", title="y")))
    with pytest.raises(NotFound):
        goals.load("goal-aa")
