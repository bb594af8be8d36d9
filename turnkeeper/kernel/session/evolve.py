"""Apply events to state.

Evolve trusts the decider for business rules but still refuses a stream that cannot be
folded (an event for a turn that is not in flight): folding such a stream silently would
hide a corrupted or mis-ordered log.
"""

from __future__ import annotations

from collections.abc import Iterable

from turnkeeper.errors import DataLoss
from turnkeeper.kernel.session import events as ev
from turnkeeper.kernel.session._effect_rules import fold_effect
from turnkeeper.kernel.session.events import SessionEvent
from turnkeeper.kernel.session.operation_model import (
    OperationFinished,
    OperationJoined,
    OperationStarted,
    OperationStepRecorded,
)
from turnkeeper.kernel.session.operations import evolve_operation
from turnkeeper.kernel.session.state import (
    CompletedTurn,
    Diagnostic,
    InFlightTurn,
    Lease,
    PendingRecovery,
    RecoveredTurn,
    SessionCounters,
    SessionState,
    SessionStatus,
    TurnEnd,
    TurnOutcome,
    TurnPhase,
)
from turnkeeper.vocabulary import HostErrorKind

_OUTCOME_COUNTER = {
    TurnOutcome.COMPLETED: "turns_completed",
    TurnOutcome.FAILED: "turns_failed",
    TurnOutcome.LOST: "turns_lost",
    TurnOutcome.ABANDONED: "turns_abandoned",
}


def _broken(event: SessionEvent, why: str) -> DataLoss:
    return DataLoss(
        f"cannot fold {event.type}: {why}",
        reason="inconsistent_event_stream",
        details={"event_type": event.type},
    )


def _count(state: SessionState, **increments: int) -> SessionCounters:
    # A copy, not a dump and a validation: every counter is an int the kernel adds to,
    # and model_copy still refuses a name the counters have no field for.
    counters = state.counters
    return counters.model_copy(
        update={name: getattr(counters, name) + by for name, by in increments.items()}
    )


def _turn(state: SessionState, event: SessionEvent, turn_id: str) -> InFlightTurn:
    turn = state.in_flight
    if turn is None or turn.envelope.turn_id != turn_id:
        raise _broken(event, f"turn {turn_id} is not in flight")
    return turn


def _end_turn(
    state: SessionState, event: SessionEvent, turn_id: str, outcome: TurnOutcome
) -> dict[str, object]:
    env = _turn(state, event, turn_id).envelope
    end = TurnEnd(
        turn_id=turn_id,
        todo_id=env.todo_id,
        kind=env.kind,
        attempt=env.attempt,
        outcome=outcome,
        at=event.at,
    )
    # Only the turn lifecycle toggles running/ready; operator states stick.
    status = SessionStatus.READY if state.status == SessionStatus.RUNNING else state.status
    return {
        "in_flight": None,
        "status": status,
        "last_turn_end": end,
        "counters": _count(state, **{_OUTCOME_COUNTER[outcome]: 1}),
    }


def _progress_streak(state: SessionState, turn: InFlightTurn) -> dict[str, object]:
    """The idle streak after a completed turn: progress (or not knowing) ends it."""
    if turn.progress is not False:
        return {"turns_without_progress": 0, "replans_without_progress": 0, "idle_since_turn": None}
    replan = 1 if turn.envelope.kind == "replan" else 0
    return {
        "turns_without_progress": state.turns_without_progress + 1,
        "replans_without_progress": state.replans_without_progress + replan,
        "idle_since_turn": state.idle_since_turn or turn.envelope.turn_id,
    }


def _bind_handle(handle: str | None) -> dict[str, object]:
    return {} if handle is None else {"host_session_handle": handle}


def _accept(state: SessionState, event: ev.TurnAccepted) -> dict[str, object]:
    if state.in_flight is not None:
        raise _broken(event, "another turn is in flight")
    env = event.envelope
    update: dict[str, object] = {
        "in_flight": InFlightTurn(envelope=env, phase=TurnPhase.ACCEPTED, accepted_at=event.at),
        "status": SessionStatus.RUNNING if state.status == SessionStatus.READY else state.status,
        "counters": _count(state, turns_accepted=1),
    }
    pending = state.recovery
    if pending is not None and env.recovers_turn_id == pending.turn_id:
        update["recovery"] = None
        update["last_recovered"] = RecoveredTurn(
            turn_id=pending.turn_id, continued_by=env.turn_id, resolved_at=event.at
        )
        update["counters"] = _count(state, turns_accepted=1, turns_recovered=1)
    return update


def _in_flight_step(state: SessionState, event: SessionEvent) -> dict[str, object]:
    """Steps 2-6 of the turn transaction: they advance the in-flight turn only."""
    match event:
        case ev.HostStarted():
            turn = _turn(state, event, event.turn_id)
            handle = _bind_handle(event.host_session_handle)
            step = {"phase": TurnPhase.HOST_STARTED, "process": event.process, **handle}
            return {
                "in_flight": turn.model_copy(update=step),
                **handle,
            }
        case ev.HostEventsJournaled():
            turn = _turn(state, event, event.turn_id)
            step = {
                "last_host_seq": event.events[-1].seq,
                **_bind_handle(event.host_session_handle),
            }
            return {
                "in_flight": turn.model_copy(update=step),
                "counters": _count(state, host_events=len(event.events)),
                **_bind_handle(event.host_session_handle),
            }
        case ev.ReceiptRecorded():
            turn = _turn(state, event, event.turn_id)
            # A failure receipt is closed by the turn.failed that follows it in the
            # same decision; only a success receipt is kept for the write-back.
            receipt = event.receipt if event.receipt.outcome == "success" else None
            return {
                "in_flight": turn.model_copy(
                    update={"phase": TurnPhase.RECEIPT, "receipt": receipt}
                )
            }
        case ev.WrittenBack():
            turn = _turn(state, event, event.turn_id)
            step = {
                "phase": TurnPhase.WRITTEN_BACK,
                "accepted_proposals": len(event.accepted),
                "rejected_proposals": len(event.rejected),
                "progress": event.progress,
            }
            return {"in_flight": turn.model_copy(update=step)}
        case ev.EffectIntended() | ev.EffectResolved() | ev.EffectRejected() | ev.EffectsRecorded():
            return fold_effect(state, _turn(state, event, event.turn_id), event)
    raise _broken(event, "not an in-flight step")  # pragma: no cover - guarded by caller


def _terminal(state: SessionState, event: SessionEvent) -> dict[str, object]:
    match event:
        case ev.TurnCompleted():
            turn = _turn(state, event, event.turn_id)
            env = turn.envelope
            return {
                **_end_turn(state, event, event.turn_id, TurnOutcome.COMPLETED),
                **_progress_streak(state, turn),
                "consecutive_host_failures": 0,
                "consecutive_hangs": 0,
                "consecutive_lost": 0,
                "last_completed": CompletedTurn(
                    turn_id=event.turn_id,
                    todo_id=env.todo_id,
                    attempt=env.attempt,
                    snapshot=event.snapshot,
                    completed_at=event.at,
                ),
            }
        case ev.TurnFailed():
            env = _turn(state, event, event.turn_id).envelope
            update = {
                **_end_turn(state, event, event.turn_id, TurnOutcome.FAILED),
                "consecutive_host_failures": state.consecutive_host_failures + 1,
                "consecutive_hangs": (
                    state.consecutive_hangs + 1 if event.error_kind is HostErrorKind.HUNG else 0
                ),
            }
            if state.recovery is None:
                update["recovery"] = PendingRecovery(
                    turn_id=event.turn_id,
                    todo_id=env.todo_id,
                    attempt=env.attempt,
                    cause="failed",
                    error_kind=event.error_kind,
                    since=event.at,
                    status="awaiting_resolution",
                )
            return update
        case ev.TurnLost():
            env = _turn(state, event, event.turn_id).envelope
            update = {
                **_end_turn(state, event, event.turn_id, TurnOutcome.LOST),
                "consecutive_lost": state.consecutive_lost + 1,
            }
            if event.next is not None:
                update["recovery"] = PendingRecovery(
                    turn_id=event.turn_id,
                    todo_id=env.todo_id,
                    attempt=env.attempt,
                    cause="lost",
                    error_kind=None,
                    since=event.at,
                    status="resolved",
                    next=event.next,
                )
            return update
        case ev.TurnAbandoned():
            return _end_turn(state, event, event.turn_id, TurnOutcome.ABANDONED)
    raise _broken(event, "not a terminal")  # pragma: no cover - guarded by caller


def _session_level(state: SessionState, event: SessionEvent) -> dict[str, object]:
    match event:
        case ev.LeaseAcquired() | ev.LeaseRenewed():
            return {
                "lease": Lease(owner=event.owner, expires_at=event.expires_at, epoch=event.epoch)
            }
        case ev.LeaseReleased():
            return {"lease": Lease(epoch=event.epoch)}
        case ev.StatusChanged():
            update: dict[str, object] = {
                "status": event.status,
                "status_reason": event.reason or None,
            }
            if event.action == "resume":
                # An operator who resumes a session vouches for a fresh start: the host
                # failures, hangs, lost turns and the idle streak that stopped it count
                # from zero again.
                update.update(
                    consecutive_host_failures=0,
                    consecutive_hangs=0,
                    consecutive_lost=0,
                    turns_without_progress=0,
                    replans_without_progress=0,
                    idle_since_turn=None,
                    status_reason=None,
                )
            return update
        case ev.RecoveryResolved():
            pending = state.recovery
            if pending is None or pending.turn_id != event.turn_id:
                raise _broken(event, f"turn {event.turn_id} is not awaiting recovery")
            return {
                "recovery": pending.model_copy(
                    update={"status": "resolved", "next": event.resolution.next}
                ),
                "last_recovered": RecoveredTurn(turn_id=event.turn_id, resolved_at=event.at),
            }
        case ev.UnboundTurnRestored():
            return {"counters": _count(state, unbound_restored_turns=1)}
        case ev.SessionDiagnostic():
            diagnostic = Diagnostic(
                code=event.code, turn_id=event.turn_id, message=event.message, at=event.at
            )
            return {"last_diagnostic": diagnostic}
        case ev.RecoveryReported():
            return {
                "latest_recovery_report": event.report,
                "counters": _count(state, recovery_reports=1),
            }
    raise _broken(event, "unknown event")  # pragma: no cover - the union is closed


_IN_FLIGHT_STEPS = (
    ev.HostStarted,
    ev.HostEventsJournaled,
    ev.ReceiptRecorded,
    ev.WrittenBack,
    ev.EffectIntended,
    ev.EffectResolved,
    ev.EffectRejected,
    ev.EffectsRecorded,
)
_TERMINALS = (ev.TurnCompleted, ev.TurnFailed, ev.TurnLost, ev.TurnAbandoned)
_OPERATIONS = (OperationStarted, OperationJoined, OperationStepRecorded, OperationFinished)


def evolve_session(state: SessionState | None, event: SessionEvent) -> SessionState:
    """The state after ``event``. ``state`` is ``None`` only before ``session.created``."""
    if state is None:
        if not isinstance(event, ev.SessionCreated):
            raise _broken(event, "the stream does not start with session.created")
        return SessionState(
            session_id=event.session_id,
            goal_id=event.goal_id,
            workspace=event.workspace,
            host_kind=event.host_kind,
            host_config=event.host_config,
            generation=event.generation,
            created_at=event.at,
            snapshots=event.snapshots,
            site=event.site,
        )
    if isinstance(event, ev.SessionCreated):
        raise _broken(event, "the session already exists")
    if isinstance(event, ev.TurnAccepted):
        update = _accept(state, event)
    elif isinstance(event, _IN_FLIGHT_STEPS):
        update = _in_flight_step(state, event)
    elif isinstance(event, _TERMINALS):
        update = _terminal(state, event)
    elif isinstance(event, _OPERATIONS):
        try:
            update = evolve_operation(state, event)
        except ValueError as exc:
            raise _broken(event, str(exc)) from exc
    else:
        update = _session_level(state, event)
    return state.model_copy(update=update)


def fold_session(events: Iterable[SessionEvent]) -> SessionState:
    """Fold a whole stream, oldest event first."""
    state: SessionState | None = None
    for event in events:
        state = evolve_session(state, event)
    if state is None:
        raise DataLoss("an empty session stream has no state", reason="empty_stream")
    return state
