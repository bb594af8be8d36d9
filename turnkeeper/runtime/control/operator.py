"""What an operator does to a session from another shell: stop it, resume it, crash it.

``stop`` works whether or not a ``run`` is driving the session right now. It takes
the session's lease over (from a live controller too: the operator's word outranks
it, and the takeover fences that controller's every later write, so it drops the
session and goes on with its others), ends the running host's whole process tree,
abandons the turn in flight and suspends the session, then gives the session's todo
claims back so others may take them. ``resume`` brings a suspended, crashed or
reverted session back to ``ready``, its failure and idle streaks forgotten; the
next ``run`` drives it again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from turnkeeper.errors import FailedPrecondition
from turnkeeper.hosts import process_tree
from turnkeeper.kernel.session import SessionState, SetStatus
from turnkeeper.kernel.session.events import StatusAction
from turnkeeper.runtime.control.claims import release_session_claims
from turnkeeper.runtime.control.controller import Controller
from turnkeeper.runtime.control.controller_identity import controller_owner
from turnkeeper.runtime.control.run_config import LEASE_SECONDS
from turnkeeper.runtime.control.session_leases import SessionLeases
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.store.base import EventStore

_RESUMABLE = frozenset({"suspended", "crashed", "ready", "running"})


@dataclass
class OperatorResult:
    state: SessionState
    taken_from: str | None = None  # the live controller whose lease was taken over
    ended_turn: str | None = None
    killed_pids: list[int] = field(default_factory=list)
    released_todos: list[str] = field(default_factory=list)


class OperatorActions:
    def __init__(self, store: EventStore) -> None:
        self._sessions = SessionService(store)
        self._goals = GoalService(store)
        self._leases = SessionLeases(self._sessions, controller_owner(), LEASE_SECONDS)

    def resolve(self, session_ref: str) -> str:
        return self._sessions.resolve_id(session_ref)

    def stop(self, session_ref: str, reason: str) -> OperatorResult:
        sid = self.resolve(session_ref)
        before = self._sessions.load(sid)
        live_holder = before.lease.owner if before.lease.is_live(self._sessions.now()) else None
        self._leases.acquire(sid, take_over_live=f"operator stop: {reason}")
        try:
            ended_turn, killed = self._end_in_flight_host(sid)
            done = self._status(sid, "stop", reason)
            released = release_session_claims(self._goals, done.goal_id, sid)
        finally:
            self._leases.release(sid)
        return OperatorResult(
            state=self._sessions.load(sid),
            taken_from=live_holder if live_holder != self._leases.owner else None,
            ended_turn=ended_turn,
            killed_pids=killed,
            released_todos=released,
        )

    def _end_in_flight_host(self, sid: str) -> tuple[str | None, list[int]]:
        """End the processes of the session's turn in flight, if any (under its lease).

        Done before the session's status changes: a host that outlived its turn's
        record would go on changing the workspace with nobody watching — after a stop,
        or after a crash mark, while its todos are free and a revert restores the tree.
        """
        turn = self._sessions.load(sid).in_flight
        if turn is None:
            return None, []
        report = process_tree.kill_turn_processes(turn.envelope.turn_id, turn.process)
        return turn.envelope.turn_id, [k.pid for k in report.killed]

    def resume(self, session_ref: str, reason: str) -> OperatorResult:
        sid = self.resolve(session_ref)
        state = self._sessions.load(sid)
        if state.status not in _RESUMABLE:
            raise FailedPrecondition(
                f"a {state.status} session cannot be resumed",
                reason="invalid_status_transition",
                details={"status": state.status},
            )
        if state.operation is not None:
            raise FailedPrecondition(
                f"a {state.operation.kind} of this session is pending; finish it first",
                reason="operation_pending",
                details={"request_id": state.operation.request_id},
            )
        return OperatorResult(state=self._with_lease(sid, "resume", reason))

    def crash(self, session_ref: str, reason: str) -> OperatorResult:
        sid = self.resolve(session_ref)
        self._leases.acquire(sid)  # a live controller's session is refused: stop it first
        try:
            ended_turn, killed = self._end_in_flight_host(sid)
            state = self._status(sid, "mark_crashed", reason)
        finally:
            self._leases.release(sid)
        # A crashed session waits for a revert or a resume: its todos are free meanwhile.
        released = release_session_claims(self._goals, state.goal_id, sid)
        return OperatorResult(
            state=state, ended_turn=ended_turn, killed_pids=killed, released_todos=released
        )

    def _with_lease(self, sid: str, action: StatusAction, reason: str) -> SessionState:
        """A status change under a short-lived lease of this command's own."""
        self._leases.acquire(sid)
        try:
            return self._status(sid, action, reason)
        finally:
            self._leases.release(sid)

    def _status(self, sid: str, action: StatusAction, reason: str) -> SessionState:
        token = self._leases.token(sid)
        done = self._sessions.execute(sid, SetStatus(lease=token, action=action, reason=reason))
        return done.state if done.state is not None else self._sessions.load(sid)


def recover_turn(store: EventStore, turn_id: str) -> SessionState:
    """``turnkeeper recover TURN``: validate a failed turn's host recovery record and
    resume its session; a refused record (forged, stale, resolved) writes nothing."""
    controller = Controller(store)
    sid = controller.sessions.session_of_turn(turn_id)
    # Taking the lease is a write: the record is checked first.
    controller.recovery.check_failed_turn(sid, turn_id)
    controller.acquire(sid)
    try:
        controller.recovery.resolve_failed_turn(sid, turn_id)
    finally:
        controller.release(sid)
    return controller.sessions.load(sid)
