"""The brief's count of the other todos (``work``): every status counted, the todo of
the turn left out, and the first unfinished ones listed in goal order — read from the
goal's tally, as a walk over every todo would count them."""

from __future__ import annotations

from collections import Counter

from tests.kernel.support import add_todo, at, claim, new_goal
from turnkeeper.brief import MAX_LISTED
from turnkeeper.kernel.model import RUNNABLE_TODO_STATUSES, GoalState
from turnkeeper.kernel.proposals import BlockTodo, CompleteTodo, SupersedeTodo
from turnkeeper.runtime.turn.brief import work_counts


def _walked(state: GoalState, current: str | None) -> tuple[Counter[str], list[str], int]:
    others = [t for t in state.todos.values() if t.id != current]
    unfinished = [t.id for t in others if t.status in RUNNABLE_TODO_STATUSES]
    return Counter(t.status.value for t in others), unfinished[:MAX_LISTED], len(unfinished)


def test_work_counts_what_a_walk_over_the_todos_counts() -> None:
    goal = new_goal()
    for n in range(MAX_LISTED + 6):
        add_todo(goal, f"t{n}")
    goal.apply(BlockTodo(todo_id="t0", reason="waits on a person"), at(1))
    goal.apply(CompleteTodo(todo_id="t1", fence=claim(goal, "t1", now=at(1))), at(2))
    goal.apply(SupersedeTodo(todo_id="t2", reason="split in two"), at(3))
    claim(goal, "t3", owner="someone-else", now=at(3))
    for current in (None, "t3", "t5", "t0", "t1"):
        work = work_counts(goal.s, current)
        counts, listed, unfinished = _walked(goal.s, current)
        assert {
            "open": work.open,
            "claimed": work.claimed,
            "done": work.done,
            "blocked": work.blocked,
            "superseded": work.superseded,
        } == {
            status: counts[status]
            for status in ("open", "claimed", "done", "blocked", "superseded")
        }
        assert [ref.id for ref in work.listed] == listed
        assert work.listed_more == unfinished - len(listed) > 0
