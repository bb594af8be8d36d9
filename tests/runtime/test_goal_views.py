"""A session's view of its goal is built again only when it may differ
(runtime/turn/planning.py ``GoalViews``): served for the same goal state inside the
window in which no other owner's claim expires, and never stale — a new goal state, a
claim that expired, a clock set back or a goal that became terminal each get exactly
what ``goal_view`` builds."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.kernel.support import add_todo, at, claim, new_goal
from turnkeeper.kernel import GoalState
from turnkeeper.kernel.proposals import OpenGate
from turnkeeper.runtime.turn import planning
from turnkeeper.runtime.turn.planning import GoalViews, goal_view
from turnkeeper.runtime.turn.writeback import claim_owner

SID = "00000000-0000-4000-8000-0000000000aa"


def viewed(views: GoalViews, state: GoalState, now: datetime) -> list[str]:
    view = views.view(state, SID, now)
    assert view == goal_view(state, SID, now)  # exactly what would be built
    return [todo.todo_id for todo in view.runnable_todos]


def test_the_same_goal_state_is_served_without_building_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    goal = new_goal()
    add_todo(goal, "t1")
    claim(goal, "t1", owner=claim_owner(SID), lease=60)  # our own claim
    views = GoalViews()
    first = views.view(goal.s, SID, at(1))
    built: list[datetime] = []
    real = planning._view_until

    def counted(state: GoalState, session_id: str, now: datetime) -> tuple[object, ...]:
        built.append(now)
        return real(state, session_id, now)

    monkeypatch.setattr(planning, "_view_until", counted)
    assert views.view(goal.s, SID, at(2)) is first
    assert views.view(goal.s, SID, at(3600)) is first  # our own claim's expiry moves nothing
    assert built == []
    # A state equal but not the same object (read anew from the store): built again.
    again = GoalState.model_validate(goal.s.model_dump())
    assert views.view(again, SID, at(4)) is not first
    assert built == [at(4)]


def test_a_claim_of_another_owner_is_seen_the_moment_it_expires() -> None:
    goal = new_goal()
    add_todo(goal, "t1")
    add_todo(goal, "t2")
    claim(goal, "t1", owner="someone-else", lease=60)  # expires at at(60)
    views = GoalViews()
    assert viewed(views, goal.s, at(1)) == ["t2"]
    assert viewed(views, goal.s, at(59)) == ["t2"]
    assert viewed(views, goal.s, at(60)) == ["t1", "t2"]
    assert viewed(views, goal.s, at(61)) == ["t1", "t2"]
    # A clock set back before the view was built: what that time shows.
    assert viewed(views, goal.s, at(30)) == ["t2"]


def test_a_new_goal_state_is_never_answered_from_the_last_view() -> None:
    goal = new_goal()
    add_todo(goal, "t1")
    views = GoalViews()
    assert viewed(views, goal.s, at(1)) == ["t1"]
    goal.apply(OpenGate(gate_id="gate-1", title="wait", scope=["t1"]), at(2))
    assert viewed(views, goal.s, at(3)) == []
    assert views.view(goal.s, SID, at(3)).blocking_gate_ids == ("gate-1",)
    add_todo(goal, "t2", at(4))
    assert viewed(views, goal.s, at(5)) == ["t2"]


def test_terminal_is_asked_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # A goal's terminal audit moves with the clock (a due monitor, stale evidence):
    # the served view is used only while the kernel still says the same.
    goal = new_goal()
    add_todo(goal, "t1")
    monkeypatch.setattr(planning, "is_terminal", lambda state, now: now >= at(10))
    views = GoalViews()
    assert not views.view(goal.s, SID, at(1)).terminal
    assert views.view(goal.s, SID, at(10)).terminal
    assert not views.view(goal.s, SID, at(9)).terminal  # the clock set back
    assert views.view(goal.s, SID, at(12)).terminal
