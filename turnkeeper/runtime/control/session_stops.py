"""How a driven session stops: a policy suspends or crashes it (its todos given back),
or its plan says stop — and a goal that passed its terminal audit is closed, then its
session once it has settled (runtime/control/settlement.py); one that cannot settle is
quarantined alone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from turnkeeper.kernel.model import NoFollowUpReason
from turnkeeper.kernel.proposals import CloseGoal
from turnkeeper.kernel.session import LeaseToken, SessionState, SetStatus, Stop
from turnkeeper.kernel.session.events import StatusAction
from turnkeeper.runtime.control.claims import release_session_claims
from turnkeeper.runtime.control.settlement import Settlement, settle_session
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService

# The run's stop for a session whose processes would not settle (suspended for an operator).
QUARANTINED = "quarantined"


class Say(Protocol):
    """The controller's report of one step of a session (``event`` names it)."""

    def __call__(
        self, sid: str, event: str, text: str, *, named: bool = True, **fields: object
    ) -> None: ...


class SessionStops:
    def __init__(
        self,
        sessions: SessionService,
        goals: GoalService,
        token: Callable[[str], LeaseToken],
        say: Say,
        *,
        close_goal_when_terminal: bool,
    ) -> None:
        self._sessions = sessions
        self._goals = goals
        self._token = token
        self._say = say
        self._close_goal = close_goal_when_terminal

    def halt(
        self, session: SessionState, action: StatusAction, reason: str, *, stop: str = ""
    ) -> tuple[str, str]:
        """Suspend or crash a session a policy stopped, and give its todos back; the
        run's stop (``stop``, else the reason of a suspension) and reason for it."""
        sid = session.session_id
        self._sessions.execute(sid, SetStatus(lease=self._token(sid), action=action, reason=reason))
        released = release_session_claims(self._goals, session.goal_id, sid)
        freed = f"; released {', '.join(released)}" if released else ""
        status = "crashed" if action == "mark_crashed" else "suspended"
        self._say(sid, status, f"{status} ({reason}){freed}", reason=reason, released=released)
        return (stop or (reason if action == "suspend" else "crashed")), reason

    def stopped(self, sid: str, plan: Stop) -> str:
        """The session's plan says stop: close its goal and itself when the goal passed
        the terminal audit; the run's stop for it."""
        if plan.reason == "goal_terminal" and self._close_goal:
            session = self._sessions.load(sid)
            goal = self._goals.load(session.goal_id)
            if not goal.is_closed:
                self._goals.submit(
                    session.goal_id,
                    CloseGoal(
                        reason=NoFollowUpReason.ACCEPTANCE_MET,
                        summary=f"terminal audit passed; closed by session {sid}",
                    ),
                )
                self._say(
                    sid,
                    "goal_closed",
                    f"goal {session.goal_id}: terminal audit passed, closed",
                    named=False,
                    goal=session.goal_id,
                )
            # The session's work is done: close it so later runs leave it alone, once
            # nothing of it runs any more; a session that cannot settle is left alone.
            settlement = settle_session(sid)
            if not settlement.settled:
                return self._quarantine(sid, settlement)
            self._sessions.execute(
                sid, SetStatus(lease=self._token(sid), action="close", reason="goal closed")
            )
        self._say(sid, "stopped", f"stopped ({plan.reason}: {plan.message})", reason=plan.reason)
        return plan.reason

    def _quarantine(self, sid: str, settlement: Settlement) -> str:
        """Suspend a session that cannot settle, for an operator, with what still runs
        (``session resume`` and the next ``run`` settle it again)."""
        why = f"quarantined: {settlement.describe()}"
        self._sessions.execute(sid, SetStatus(lease=self._token(sid), action="suspend", reason=why))
        self._say(sid, QUARANTINED, why, processes=settlement.left)
        return QUARANTINED
