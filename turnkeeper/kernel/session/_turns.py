"""Decisions on the turn transaction: accept, host started, host events, receipt,
write-back, effects (rules in :mod:`._effect_rules`), completion, and the terminals
lost and abandoned."""

from __future__ import annotations

from datetime import datetime

from turnkeeper.errors import Aborted, AlreadyExists, FailedPrecondition, InvalidArgument
from turnkeeper.kernel.session import _effect_rules
from turnkeeper.kernel.session import commands as cmd
from turnkeeper.kernel.session import events as ev
from turnkeeper.kernel.session.envelope import TurnEnvelope
from turnkeeper.kernel.session.events import SessionEvent
from turnkeeper.kernel.session.recovery import (
    continuation_spec,
    lost_turn_note,
    pending_is_continued_by,
)
from turnkeeper.kernel.session.state import InFlightTurn, SessionState, TurnPhase

# Goal-level work that may run while a recovery is pending: it is re-derived from the
# goal each time, so it never needs a recovery of its own (see _accept_recovery_rules).
_MAY_PRECEDE_RECOVERY = frozenset({"replan", "repair"})


def _fail(message: str, reason: str, **details: object) -> FailedPrecondition:
    return FailedPrecondition(
        message, reason=reason, details={k: str(v) for k, v in details.items()}
    )


def known_past_turns(state: SessionState) -> set[str]:
    """Turn ids the bounded state still remembers (not all history: that is the log's)."""
    known = set()
    if state.last_turn_end is not None:
        known.add(state.last_turn_end.turn_id)
    if state.last_completed is not None:
        known.add(state.last_completed.turn_id)
    if state.recovery is not None:
        known.add(state.recovery.turn_id)
    if state.last_recovered is not None:
        known.add(state.last_recovered.turn_id)
    return known


def _recovered(state: SessionState, turn_id: str) -> bool:
    if state.last_recovered is not None and state.last_recovered.turn_id == turn_id:
        return True
    pending = state.recovery
    return pending is not None and pending.turn_id == turn_id and pending.status == "resolved"


def require_in_flight(state: SessionState, turn_id: str) -> InFlightTurn:
    turn = state.in_flight
    if turn is not None and turn.envelope.turn_id == turn_id:
        return turn
    if turn_id in known_past_turns(state):
        raise _fail(f"turn {turn_id} already ended", "turn_already_terminal", turn_id=turn_id)
    raise _fail(f"turn {turn_id} is not the in-flight turn", "turn_not_in_flight", turn_id=turn_id)


def _require_phase(turn: InFlightTurn, allowed: tuple[TurnPhase, ...], reason: str) -> None:
    if turn.phase not in allowed:
        raise _fail(
            f"turn {turn.envelope.turn_id} is in phase {turn.phase}",
            reason,
            phase=turn.phase,
            turn_id=turn.envelope.turn_id,
        )


def _check_handle(state: SessionState, turn: InFlightTurn, handle: str | None) -> None:
    if handle is None:
        return
    if turn.envelope.resume_host_session:
        expected = state.host_session_handle
    else:
        expected = turn.host_session_handle or handle
    if handle != expected:
        # A resumed turn that reports another host session would silently fork the
        # agent's context; a fresh turn binds exactly one handle.
        raise _fail(
            f"host session handle {handle!r} does not match {expected!r}",
            "host_handle_mismatch",
            expected=expected,
            actual=handle,
        )


def _accept_recovery_rules(state: SessionState, envelope: TurnEnvelope) -> None:
    pending = state.recovery
    if envelope.recovers_turn_id is not None:
        if pending is None or pending.turn_id != envelope.recovers_turn_id:
            raise _fail(
                f"turn {envelope.recovers_turn_id} has no pending recovery",
                "turn_not_recoverable",
                turn_id=envelope.recovers_turn_id,
            )
    elif pending is None or envelope.kind in _MAY_PRECEDE_RECOVERY:
        return
    if pending.status == "awaiting_resolution":
        raise _fail(
            f"turn {pending.turn_id} failed and its host recovery is not resolved",
            "recovery_unresolved",
            turn_id=pending.turn_id,
        )
    if not pending_is_continued_by(pending, envelope):
        raise _fail(
            f"turn {pending.turn_id} must be continued by its resolved recovery turn first",
            "recovery_continuation_expected",
            turn_id=pending.turn_id,
        )


def accept_turn(state: SessionState, command: cmd.AcceptTurn, now: datetime) -> list[SessionEvent]:
    env = command.envelope
    if state.in_flight is not None:
        if state.in_flight.envelope == env:
            return []  # a retried accept joins the turn it already created
        if state.in_flight.envelope.turn_id == env.turn_id:
            raise AlreadyExists("turn id reused with another envelope", reason="turn_id_reused")
        raise _fail("another turn is in flight", "turn_in_flight")
    if state.status in ("suspended", "crashed"):
        raise _fail(f"session is {state.status}", f"session_{state.status}")
    if env.session_id != state.session_id:
        raise InvalidArgument("envelope names another session", reason="session_mismatch")
    if env.goal_id != state.goal_id:
        raise InvalidArgument("envelope names another goal", reason="goal_mismatch")
    if env.generation != state.generation:
        raise Aborted("envelope generation is stale", reason="stale_generation")
    if env.turn_id in known_past_turns(state):
        raise AlreadyExists("turn id was already used", reason="turn_id_reused")
    if env.resume_host_session and state.host_session_handle is None:
        raise _fail("no host session is bound to resume", "no_host_session")
    _accept_recovery_rules(state, env)
    return [ev.TurnAccepted(envelope=env, at=now)]


def host_started(
    state: SessionState, command: cmd.RecordHostStarted, now: datetime
) -> list[SessionEvent]:
    if _recovered(state, command.turn_id):
        # Invariant 2: a host step whose failure was recovered never runs again.
        raise _fail("the host step of this turn was recovered", "host_step_recovered")
    turn = require_in_flight(state, command.turn_id)
    _require_phase(turn, (TurnPhase.ACCEPTED,), "host_already_started")
    if command.host_kind != state.host_kind:
        raise _fail("host kind differs from the session's", "host_kind_mismatch")
    _check_handle(state, turn, command.host_session_handle)
    return [
        ev.HostStarted(
            turn_id=command.turn_id,
            host_kind=command.host_kind,
            process=command.process,
            host_session_handle=command.host_session_handle,
            at=command.started_at if command.started_at is not None else now,
        )
    ]


def host_events(
    state: SessionState, command: cmd.RecordHostEvents, now: datetime
) -> list[SessionEvent]:
    turn = require_in_flight(state, command.turn_id)
    if turn.phase == TurnPhase.ACCEPTED:
        raise _fail("host events before host started", "host_not_started")
    _require_phase(turn, (TurnPhase.HOST_STARTED,), "receipt_already_recorded")
    first = command.events[0].seq
    if any(e.seq != first + i for i, e in enumerate(command.events)):
        raise InvalidArgument("host seqs in a batch must be contiguous", reason="host_seq_gap")
    expected = turn.last_host_seq + 1
    if first != expected:
        reason = "host_seq_repeat" if first < expected else "host_seq_gap"
        raise _fail(f"host seq {first} where {expected} was expected", reason, expected=expected)
    _check_handle(state, turn, command.host_session_handle)
    return [
        ev.HostEventsJournaled(
            turn_id=command.turn_id,
            events=command.events,
            host_session_handle=command.host_session_handle,
            at=now,
        )
    ]


def receipt(state: SessionState, command: cmd.RecordReceipt, now: datetime) -> list[SessionEvent]:
    turn = require_in_flight(state, command.turn_id)
    _require_phase(turn, (TurnPhase.ACCEPTED, TurnPhase.HOST_STARTED), "receipt_already_recorded")
    result = command.receipt
    # Only a failure to spawn can have a receipt without a started host.
    spawn_failure = result.outcome == "failure" and result.error_kind == "spawn"
    if turn.phase == TurnPhase.ACCEPTED and not spawn_failure:
        raise _fail("receipt before host started", "host_not_started")
    recorded = ev.ReceiptRecorded(turn_id=command.turn_id, receipt=result, at=now)
    if result.outcome == "success":
        return [recorded]
    # A failed host step is terminal for its turn at once: it is never run again,
    # and the session continues through the recovery of its host recovery record.
    failed = ev.TurnFailed(
        turn_id=command.turn_id, error_kind=result.error_kind, message=result.message, at=now
    )
    return [recorded, failed]


def write_back(
    state: SessionState, command: cmd.RecordWriteBack, now: datetime
) -> list[SessionEvent]:
    turn = require_in_flight(state, command.turn_id)
    if turn.phase in (TurnPhase.ACCEPTED, TurnPhase.HOST_STARTED):
        raise _fail("write-back before a receipt", "receipt_missing")
    _require_phase(turn, (TurnPhase.RECEIPT,), "already_written_back")
    ids = [d.proposal_id for d in (*command.accepted, *command.rejected)]
    if len(ids) != len(set(ids)):
        raise InvalidArgument("a proposal is listed twice", reason="duplicate_proposal")
    return [
        ev.WrittenBack(
            turn_id=command.turn_id,
            accepted=command.accepted,
            rejected=command.rejected,
            progress=command.progress,
            at=now,
        )
    ]


def effect_intended(
    state: SessionState, command: cmd.RecordEffectIntended, now: datetime
) -> list[SessionEvent]:
    turn = require_in_flight(state, command.turn_id)
    return _effect_rules.intended(state, turn, command, now)


def effect_resolved(
    state: SessionState, command: cmd.RecordEffectResolved, now: datetime
) -> list[SessionEvent]:
    turn = require_in_flight(state, command.turn_id)
    return _effect_rules.resolved(state, turn, command, now)


def effect_rejected(
    state: SessionState, command: cmd.RecordEffectRejected, now: datetime
) -> list[SessionEvent]:
    turn = require_in_flight(state, command.turn_id)
    return _effect_rules.rejected(state, turn, command, now)


def effects(state: SessionState, command: cmd.RecordEffects, now: datetime) -> list[SessionEvent]:
    turn = require_in_flight(state, command.turn_id)
    return _effect_rules.closed(state, turn, command, now)


def complete(state: SessionState, command: cmd.CompleteTurn, now: datetime) -> list[SessionEvent]:
    turn = require_in_flight(state, command.turn_id)
    _require_phase(turn, (TurnPhase.WRITTEN_BACK, TurnPhase.EFFECTS), "write_back_missing")
    # Step 7 after step 6: every effect the result requested has an outcome.
    _effect_rules.require_effects_settled(turn)
    return [ev.TurnCompleted(turn_id=command.turn_id, snapshot=command.snapshot, at=now)]


def lost(state: SessionState, command: cmd.RecordTurnLost, now: datetime) -> list[SessionEvent]:
    turn = require_in_flight(state, command.turn_id)
    # With a durable receipt the turn is not lost: it is written back from the receipt.
    _require_phase(turn, (TurnPhase.ACCEPTED, TurnPhase.HOST_STARTED), "turn_has_receipt")
    env = turn.envelope
    next_turn = None
    if state.recovery is None:
        note = lost_turn_note(env.turn_id, command.proof)
        next_turn = continuation_spec(state, env.turn_id, env.todo_id, env.attempt, note)
    return [ev.TurnLost(turn_id=env.turn_id, proof=command.proof, next=next_turn, at=now)]


def abandon(state: SessionState, command: cmd.AbandonTurn, now: datetime) -> list[SessionEvent]:
    require_in_flight(state, command.turn_id)
    return [ev.TurnAbandoned(turn_id=command.turn_id, reason=command.reason, at=now)]
