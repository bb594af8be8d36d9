"""``GoalService.audit_of``: the audit of a state the caller read already (``status``
audits the goals it listed) is the audit of the goal read again."""

from __future__ import annotations

from pathlib import Path

from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.runtime.services.goals import GOAL_KIND, GoalService
from turnkeeper.store import open_store


def test_the_audit_of_a_listed_state_is_the_goals_audit(tmp_path: Path) -> None:
    with open_store(tmp_path / "audit.db") as store:
        goals = GoalService(store)
        goals.create(CreateGoal(goal_id="g1", title="a goal"))
        goals.submit("g1", AddTodo(todo=TodoSpec(todo_id="t1", title="open work")))
        goals.create(CreateGoal(goal_id="g2", title="an empty goal"))
        listed = goals.goals_of(store.list_projections(GOAL_KIND))
        audits = {state.goal.id: goals.audit_of(state) for state in listed}
        assert audits == {"g1": goals.audit("g1"), "g2": goals.audit("g2")}
        assert audits["g1"].open_todos == 1  # the two goals' audits differ: a real check
        assert audits["g2"].open_todos == 0
