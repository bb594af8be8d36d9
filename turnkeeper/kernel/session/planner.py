"""Choosing the next turn: continuation, retry, replan or self-repair — or stop.

The goal kernel is seen only through :class:`GoalView`, a small input model, so this
module does not depend on it. Rules, first match wins:

1. the session cannot run a turn (closed, crashed, suspended, a turn in flight) -> stop
2. goal terminal -> stop; budget exhausted -> stop
3. projection mismatch -> ``repair`` (do not build on an inconsistent control plane)
4. open replan obligations -> ``replan`` (goal-level replan before any waiting)
5. a failed/lost turn: unresolved -> stop; resolved -> its ``continuation``/``retry``
6. the last completed todo is still runnable and the host session resumable -> ``continuation``
7. a runnable todo -> ``start``
8. blocking gates -> stop (gate_blocked); otherwise stop (nothing_runnable)
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from turnkeeper.errors import InvalidArgument
from turnkeeper.kernel.session._model import Id, KernelModel, ShortText
from turnkeeper.kernel.session.envelope import InteractionContract, NextTurn, TurnEnvelope
from turnkeeper.kernel.session.state import SessionState

_MAX_LISTED = 10  # ids named in instructions; the rest are summarised by count


class RunnableTodo(KernelModel):
    todo_id: Id
    title: ShortText
    attempts: int = Field(default=0, ge=0)  # attempts already made on this todo


class GoalView(KernelModel):
    """What the planner needs from the goal kernel, computed by the caller."""

    goal_id: Id
    terminal: bool = False
    replan_obligation_ids: tuple[Id, ...] = ()
    runnable_todos: tuple[RunnableTodo, ...] = ()  # in the order the goal kernel prefers
    blocking_gate_ids: tuple[Id, ...] = ()
    projection_mismatch: bool = False
    budget_left: float | None = None  # None: no budget limit


StopReason = Literal[
    "goal_terminal",
    "gate_blocked",
    "budget",
    "nothing_runnable",
    "turn_in_flight",
    "recovery_unresolved",
    "session_suspended",
    "session_crashed",
    "session_closed",
]


class Stop(KernelModel):
    decision: Literal["stop"] = "stop"
    reason: StopReason
    ids: tuple[str, ...] = ()
    message: str


def _listed(ids: tuple[str, ...]) -> str:
    shown = ", ".join(ids[:_MAX_LISTED])
    more = len(ids) - _MAX_LISTED
    return f"{shown} and {more} more" if more > 0 else shown


def _session_stop(session: SessionState, goal: GoalView) -> Stop | None:
    if session.status in ("closed", "crashed", "suspended"):
        return Stop(reason=f"session_{session.status}", message=f"session is {session.status}")
    if session.in_flight is not None:
        turn_id = session.in_flight.envelope.turn_id
        return Stop(reason="turn_in_flight", ids=(turn_id,), message="a turn is in flight")
    if goal.terminal:
        return Stop(reason="goal_terminal", message=f"goal {goal.goal_id} is terminal")
    if goal.budget_left is not None and goal.budget_left <= 0:
        return Stop(reason="budget", message="the goal's budget is exhausted")
    return None


def _repair(goal: GoalView, resumable: bool) -> NextTurn:
    # Goal-level turns resume the bound host session when there is one: starting a fresh
    # one would rebind the handle and orphan a pending recovery record bound to the old.
    return NextTurn(
        kind="repair",
        todo_id=None,
        attempt=1,
        resume_host_session=resumable,
        instructions=(
            f"Self-repair goal {goal.goal_id}: its status projection disagrees with the event "
            "log. Identify the authoritative source, repair through the owning protocol, then "
            "recompute and validate. Do not lower gates or guess permissions."
        ),
    )


def _replan(goal: GoalView, resumable: bool) -> NextTurn:
    return NextTurn(
        kind="replan",
        todo_id=None,
        attempt=1,
        resume_host_session=resumable,
        instructions=(
            f"Replan goal {goal.goal_id}: resolve replan obligations "
            f"{_listed(goal.replan_obligation_ids)}. Produce an observable delta (todos, "
            "vision, acceptance, successors) or a structured no-follow-up."
        ),
    )


def plan_next_turn(session: SessionState, goal: GoalView, now: datetime) -> NextTurn | Stop:
    """The next turn to accept, or why none should run. ``now`` is reserved for
    time-based rules (due monitors) and keeps the signature stable."""
    del now
    if goal.goal_id != session.goal_id:
        raise InvalidArgument("goal view is for another goal", reason="goal_mismatch")
    stop = _session_stop(session, goal)
    if stop is not None:
        return stop
    resumable = session.host_session_handle is not None
    if goal.projection_mismatch:
        return _repair(goal, resumable)
    if goal.replan_obligation_ids:
        return _replan(goal, resumable)
    pending = session.recovery
    if pending is not None:
        if pending.status == "resolved" and pending.next is not None:
            return pending.next
        return Stop(
            reason="recovery_unresolved",
            ids=(pending.turn_id,),
            message=f"turn {pending.turn_id} failed; resolve its host recovery record first",
        )
    todos = {todo.todo_id: todo for todo in goal.runnable_todos}
    last = session.last_completed
    if last is not None and last.todo_id in todos and resumable:
        todo = todos[last.todo_id]
        return NextTurn(
            kind="continuation",
            todo_id=todo.todo_id,
            attempt=last.attempt,
            resume_host_session=True,
            instructions=(
                f"Continue todo {todo.todo_id}: {todo.title}. Re-check the current guard "
                "before acting; the resumed session's memory is not proof of the present."
            ),
        )
    if goal.runnable_todos:
        todo = goal.runnable_todos[0]
        return NextTurn(
            kind="start",
            todo_id=todo.todo_id,
            attempt=todo.attempts + 1,
            resume_host_session=False,
            instructions=f"Start todo {todo.todo_id}: {todo.title} (attempt {todo.attempts + 1}).",
        )
    if goal.blocking_gate_ids:
        return Stop(
            reason="gate_blocked",
            ids=goal.blocking_gate_ids,
            message=f"blocked by gates {_listed(goal.blocking_gate_ids)}",
        )
    return Stop(reason="nothing_runnable", message="no runnable todo and no obligation")


def envelope_for(
    session: SessionState, spec: NextTurn, turn_id: str, contract: InteractionContract
) -> TurnEnvelope:
    """The envelope to accept for a planned turn (the caller supplies the id)."""
    return TurnEnvelope.create(
        turn_id=turn_id,
        session_id=session.session_id,
        generation=session.generation,
        goal_id=session.goal_id,
        spec=spec,
        contract=contract,
    )
