"""What the session planner sees of a goal: runnable todos, obligations, blocking gates.

A session plans on the same goal state turn after turn while nothing else writes to
the goal (the streams' cache hands back the very same, immutable, state object until
the goal's head moves), and building its view — two models, every todo's claim,
dependencies and gates — cost a turn more than the plan itself. The view walks the
unfinished todos in goal order only until it holds the first few runnable ones
(:data:`RUNNABLE_SHOWN`), so its cost does not grow with the goal. :class:`GoalViews`
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
from turnkeeper.kernel.model import GateStatus, Todo, TodoStatus
from turnkeeper.kernel.session import GoalView, RunnableTodo, SessionState
from turnkeeper.runtime.turn.writeback import claim_owner

# Sessions whose last view is kept at most (a worker may drive sessions without end).
_MAX_HELD = 1024


# The view holds the first runnable todos in goal order, at most this many, and the
# session's continuing todo wherever it stands: the planner starts the first or continues
# that one, so the walk stops here and a turn's planning does not grow with the goal.
RUNNABLE_SHOWN = 8


def goal_view(state: GoalState, session: SessionState, now: datetime) -> GoalView:
    """What the planner sees of ``state`` for ``session`` at ``now``."""
    return _view_until(state, session.session_id, now, continuing_todo(session))[0]


def continuing_todo(session: SessionState) -> str | None:
    """The todo the planner would continue for ``session``: its last completed turn's,
    shown in the view wherever it stands in the goal if it is runnable."""
    last = session.last_completed
    return last.todo_id if last is not None else None


def _runnable(
    state: GoalState, todo: Todo, owner: str, now: datetime
) -> tuple[bool, datetime | None]:
    """Whether ``owner`` may start ``todo`` at ``now``, and when another owner's live
    claim on it expires (None: no such claim)."""
    claim = todo.claim
    if todo.status is TodoStatus.CLAIMED:
        if claim is None:
            return False, None
        if claim.owner != owner and claim.lease_expires_at > now:
            return False, claim.lease_expires_at  # claimable from then on
    elif todo.status is not TodoStatus.OPEN:
        return False, None
    ready = all(dependency_met(state, dep) for dep in todo.depends_on)
    return ready and not any(gate.blocks(todo.id) for gate in state.gates.values()), None


def _view_until(
    state: GoalState, session_id: str, now: datetime, continuing: str | None
) -> tuple[GoalView, datetime | None]:
    """The view at ``now``, and the first time after ``now`` at which a claim of another
    owner on a todo it looked at expires (None: no such claim), before which only
    ``terminal`` may change. A claim on a todo past the last one shown cannot change
    which todos come first."""
    owner = claim_owner(session_id)
    runnable: list[Todo] = []
    until: datetime | None = None

    def consider(todo: Todo) -> None:
        nonlocal until
        ok, expires = _runnable(state, todo, owner, now)
        if ok:
            runnable.append(todo)
        if expires is not None and (until is None or expires < until):
            until = expires

    unfinished = state.todo_tally().unfinished  # in goal order; done ones never again
    for todo_id in unfinished:
        if len(runnable) == RUNNABLE_SHOWN:
            break
        consider(state.todos[todo_id])
    if (
        continuing is not None
        and continuing in unfinished
        and all(t.id != continuing for t in runnable)
    ):
        consider(state.todos[continuing])
    blocking = tuple(
        g.id for g in state.gates.values() if g.blocking and g.status is GateStatus.OPEN
    )
    view = GoalView(
        goal_id=state.goal.id,
        terminal=is_terminal(state, now),
        replan_obligation_ids=tuple(o.id for o in state.open_obligations()),
        # Clipped, not refused: a title recorded before titles were bounded may be
        # longer than the planner's limit, and the session must still progress.
        runnable_todos=tuple(
            RunnableTodo(todo_id=todo.id, title=fit_title(todo.title)) for todo in runnable
        ),
        blocking_gate_ids=blocking,
    )
    return view, until


# What a session's view was built on: the very state object (held, so ``is`` compares
# with it), the continuing todo, when, and until when; and the view.
_Held = tuple[GoalState, str | None, datetime, datetime | None, GoalView]


class GoalViews:
    """Each session's view of its goal, built again only when it may differ. Each
    session's thread asks for its own session's view only, and a dict's get and set
    are atomic: no lock."""

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}

    def view(self, state: GoalState, session: SessionState, now: datetime) -> GoalView:
        """``goal_view(state, session, now)``."""
        session_id, continuing = session.session_id, continuing_todo(session)
        held = self._held.get(session_id)
        if held is not None:
            built_on, built_for, since, until, view = held
            if (
                built_on is state
                and built_for == continuing
                and since <= now  # a clock set back is a time the view never saw
                and (until is None or now < until)
                and is_terminal(state, now) == view.terminal
            ):
                return view
        view, until = _view_until(state, session_id, now, continuing)
        if len(self._held) >= _MAX_HELD:
            self._held.clear()
        self._held[session_id] = (state, continuing, now, until, view)
        return view
