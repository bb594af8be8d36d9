"""What the session planner sees of a goal: runnable todos, obligations, blocking gates.

A session plans on the same goal state turn after turn while nothing else writes to
the goal (the streams' cache hands back the very same, immutable, state object until
the goal's head moves), and building its view — two models, every todo's claim,
dependencies and gates — cost a turn more than the plan itself. :class:`GoalViews`
serves each session the view it last built while that still is what
:func:`goal_view` would build: for that same state object, and for a time inside the
window in which no claim of another owner expires (the only part of the view that
moves with the clock besides ``terminal``, which is asked of the kernel every time).
"""

from __future__ import annotations

from datetime import datetime

from turnkeeper.kernel import GoalState, dependency_met
from turnkeeper.kernel.audit import is_terminal
from turnkeeper.kernel.limits import fit_title
from turnkeeper.kernel.model import GateStatus, TodoStatus
from turnkeeper.kernel.session import GoalView, RunnableTodo
from turnkeeper.runtime.turn.writeback import claim_owner

# Sessions whose last view is kept at most (a worker may drive sessions without end).
_MAX_HELD = 1024


def _gated(state: GoalState, todo_id: str) -> bool:
    return any(
        gate.blocking
        and gate.status is GateStatus.OPEN
        and (not gate.scope or todo_id in gate.scope)
        for gate in state.gates.values()
    )


def goal_view(state: GoalState, session_id: str, now: datetime) -> GoalView:
    return _view_until(state, session_id, now)[0]


def _view_until(
    state: GoalState, session_id: str, now: datetime
) -> tuple[GoalView, datetime | None]:
    """The view at ``now``, and the first time after ``now`` at which a claim of another
    owner expires (None: no such claim), before which only ``terminal`` may change."""
    owner = claim_owner(session_id)
    runnable = []
    until: datetime | None = None
    for todo in state.todos.values():
        claim = todo.claim
        claimable = todo.status is TodoStatus.OPEN or (
            todo.status is TodoStatus.CLAIMED
            and claim is not None
            and (claim.owner == owner or claim.lease_expires_at <= now)
        )
        if (
            todo.status is TodoStatus.CLAIMED
            and claim is not None
            and claim.owner != owner
            and claim.lease_expires_at > now
            and (until is None or claim.lease_expires_at < until)
        ):
            until = claim.lease_expires_at  # claimable from then on
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
    view = GoalView(
        goal_id=state.goal.id,
        terminal=is_terminal(state, now),
        replan_obligation_ids=tuple(o.id for o in state.open_obligations()),
        runnable_todos=tuple(runnable),
        blocking_gate_ids=blocking,
    )
    return view, until


# What a session's view was built on: the very state object (held, so ``is`` compares
# with it), when, and until when; and the view.
_Held = tuple[GoalState, datetime, datetime | None, GoalView]


class GoalViews:
    """Each session's view of its goal, built again only when it may differ. Each
    session's thread asks for its own session's view only, and a dict's get and set
    are atomic: no lock."""

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}

    def view(self, state: GoalState, session_id: str, now: datetime) -> GoalView:
        """``goal_view(state, session_id, now)``."""
        held = self._held.get(session_id)
        if held is not None:
            built_on, since, until, view = held
            if (
                built_on is state
                and since <= now  # a clock set back is a time the view never saw
                and (until is None or now < until)
                and is_terminal(state, now) == view.terminal
            ):
                return view
        view, until = _view_until(state, session_id, now)
        if len(self._held) >= _MAX_HELD:
            self._held.clear()
        self._held[session_id] = (state, now, until, view)
        return view
