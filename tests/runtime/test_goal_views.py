"""A session's view of its goal is built again only when it may differ
(runtime/turn/planning.py ``GoalViews``): served for the same goal state inside the
window in which no other owner's claim expires, and never stale — a new goal state, a
claim that expired, a clock set back or a goal that became terminal each get exactly
what ``goal_view`` builds. The view shows the first runnable todos in goal order, a
bounded few, and the session's continuing todo wherever it stands."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.kernel.support import add_todo, at, claim, new_goal
from tests.kernel_session.helpers import SID, new_session
from turnkeeper.kernel import GoalState
from turnkeeper.kernel.proposals import BlockTodo, OpenGate
from turnkeeper.kernel.session import CompletedTurn, SessionState, SnapshotRef
from turnkeeper.runtime.turn import planning
from turnkeeper.runtime.turn.planning import RUNNABLE_SHOWN, GoalViews, goal_view
from turnkeeper.runtime.turn.writeback import claim_owner

SESSION = new_session().s


def continuing(todo_id: str) -> SessionState:
    """The session with its last completed turn on ``todo_id``."""
    snapshot = SnapshotRef(kernel_seq=1, workspace_revision=None, host_artifact_digest=None)
    last = CompletedTurn(
        turn_id="turn-1", todo_id=todo_id, attempt=1, snapshot=snapshot, completed_at=at(0)
    )
    return SESSION.model_copy(update={"last_completed": last})


def viewed(
    views: GoalViews, state: GoalState, now: datetime, session: SessionState = SESSION
) -> list[str]:
    view = views.view(state, session, now)
    assert view == goal_view(state, session, now)  # exactly what would be built
    return [todo.todo_id for todo in view.runnable_todos]


def test_the_same_goal_state_is_served_without_building_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    goal = new_goal()
    add_todo(goal, "t1")
    claim(goal, "t1", owner=claim_owner(SID), lease=60)  # our own claim
    views = GoalViews()
    first = views.view(goal.s, SESSION, at(1))
    built: list[datetime] = []
    real = planning._view_until

    def counted(
        state: GoalState, session_id: str, now: datetime, last: str | None
    ) -> tuple[object, ...]:
        built.append(now)
        return real(state, session_id, now, last)

    monkeypatch.setattr(planning, "_view_until", counted)
    assert views.view(goal.s, SESSION, at(2)) is first
    assert views.view(goal.s, SESSION, at(3600)) is first  # our own claim's expiry moves nothing
    assert built == []
    # A state equal but not the same object (read anew from the store): built again.
    again = GoalState.model_validate(goal.s.model_dump())
    assert views.view(again, SESSION, at(4)) is not first
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
    assert views.view(goal.s, SESSION, at(3)).blocking_gate_ids == ("gate-1",)
    add_todo(goal, "t2", at(4))
    assert viewed(views, goal.s, at(5)) == ["t2"]


def test_terminal_is_asked_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # A goal's terminal audit moves with the clock (a due monitor, stale evidence):
    # the served view is used only while the kernel still says the same.
    goal = new_goal()
    add_todo(goal, "t1")
    monkeypatch.setattr(planning, "is_terminal", lambda state, now: now >= at(10))
    views = GoalViews()
    assert not views.view(goal.s, SESSION, at(1)).terminal
    assert views.view(goal.s, SESSION, at(10)).terminal
    assert not views.view(goal.s, SESSION, at(9)).terminal  # the clock set back
    assert views.view(goal.s, SESSION, at(12)).terminal


def test_the_view_shows_the_first_runnable_todos_and_the_continuing_one() -> None:
    # A goal that lives for days has thousands of todos: the view walks the unfinished
    # ones in goal order only until it holds the first few runnable, and adds the todo
    # the session continues wherever it stands, so the planner decides as before.
    goal = new_goal()
    for n in range(RUNNABLE_SHOWN + 5):
        add_todo(goal, f"t{n}")
    goal.apply(BlockTodo(todo_id="t0", reason="waits on a person"), at(1))
    claim(goal, "t1", owner="someone-else", lease=60)  # expires at at(60)
    views = GoalViews()
    first = [f"t{n}" for n in range(2, RUNNABLE_SHOWN + 2)]
    assert viewed(views, goal.s, at(2)) == first
    last = f"t{RUNNABLE_SHOWN + 4}"
    assert viewed(views, goal.s, at(2), continuing(last)) == [*first, last]
    assert viewed(views, goal.s, at(2), continuing("t3")) == first  # shown already
    assert viewed(views, goal.s, at(2), continuing("t0")) == first  # blocked: not runnable
    # The other owner's claim expires: t1 comes first again, the last shown drops off.
    assert viewed(views, goal.s, at(60)) == ["t1", *first[:-1]]
