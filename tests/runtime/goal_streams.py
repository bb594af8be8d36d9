"""Goal-stream helpers shared by the runtime's stream tests (cache, heads)."""

from __future__ import annotations

from turnkeeper.kernel import GoalState
from turnkeeper.kernel.proposals import AddTodo, TodoSpec


def todo_ids(state: GoalState | None) -> list[str]:
    assert state is not None
    return sorted(state.todos)


def add_todo(todo_id: str) -> AddTodo:
    return AddTodo(todo=TodoSpec(todo_id=todo_id, title=f"todo {todo_id}"))
