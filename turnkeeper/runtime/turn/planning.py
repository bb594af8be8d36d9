"""What the session planner sees of a goal: runnable todos, obligations, blocking gates."""

from __future__ import annotations

from datetime import datetime

from turnkeeper.kernel import GoalState, dependency_met
from turnkeeper.kernel.audit import is_terminal
from turnkeeper.kernel.limits import fit_title
from turnkeeper.kernel.model import GateStatus, TodoStatus
from turnkeeper.kernel.session import GoalView, RunnableTodo
from turnkeeper.runtime.turn.writeback import claim_owner


def _gated(state: GoalState, todo_id: str) -> bool:
    return any(
        gate.blocking
        and gate.status is GateStatus.OPEN
        and (not gate.scope or todo_id in gate.scope)
        for gate in state.gates.values()
    )


def goal_view(state: GoalState, session_id: str, now: datetime) -> GoalView:
    owner = claim_owner(session_id)
    runnable = []
    for todo in state.todos.values():
        claimable = todo.status is TodoStatus.OPEN or (
            todo.status is TodoStatus.CLAIMED
            and todo.claim is not None
            and (todo.claim.owner == owner or todo.claim.lease_expires_at <= now)
        )
        if (
            claimable
            and all(dependency_met(state, dep) for dep in todo.depends_on)
            and not _gated(state, todo.id)
        ):
            # Clipped, not refused: a title recorded before titles were bounded may be
            # longer than the planner's limit, and the session must still progress.
            runnable.append(RunnableTodo(todo_id=todo.id, title=fit_title(todo.title)))
    blocking = tuple(
        g.id for g in state.gates.values() if g.blocking and g.status is GateStatus.OPEN
    )
    return GoalView(
        goal_id=state.goal.id,
        terminal=is_terminal(state, now),
        replan_obligation_ids=tuple(o.id for o in state.open_obligations()),
        runnable_todos=tuple(runnable),
        blocking_gate_ids=blocking,
    )
