"""``decide_session``: (state, command, now) -> events, or a typed rejection that emits nothing.

Checks run in a fixed order so the reason a caller sees is stable: existence, closed
session, then lease fencing, then the command's own rules.
"""

from __future__ import annotations

from datetime import datetime

from turnkeeper.errors import Aborted, FailedPrecondition, InvalidArgument, NotFound
from turnkeeper.kernel._dispatch import TableRule, rule
from turnkeeper.kernel.session import _turns, operations
from turnkeeper.kernel.session import commands as cmd
from turnkeeper.kernel.session import events as ev
from turnkeeper.kernel.session.commands import LeaseToken, SessionCommand
from turnkeeper.kernel.session.events import SessionEvent
from turnkeeper.kernel.session.recovery import resolve_host_recovery
from turnkeeper.kernel.session.state import SessionState, SessionStatus

UNBOUND_RESTORED_TURN_LOST = "unbound_restored_turn_lost"


def _check_expiry(expires_at: datetime, now: datetime) -> None:
    if expires_at <= now:
        raise InvalidArgument("lease must expire after now", reason="invalid_lease_expiry")


def _acquire(state: SessionState, command: cmd.AcquireLease, now: datetime) -> list[SessionEvent]:
    _check_expiry(command.expires_at, now)
    lease = state.lease
    takeover = command.takeover_from
    if takeover is not None and (takeover.owner, takeover.epoch) != (lease.owner, lease.epoch):
        raise Aborted(
            "takeover names a lease that is no longer the current one",
            reason="stale_lease",
            details={"epoch": lease.epoch, "presented_epoch": takeover.epoch},
        )
    if lease.is_live(now) and lease.owner != command.owner and takeover is None:
        raise Aborted(
            f"lease is held by {lease.owner} until {lease.expires_at}",
            reason="lease_held",
            details={"owner": str(lease.owner), "epoch": lease.epoch},
        )
    # The epoch moves even when the same owner re-acquires: a restarted worker with the
    # same name must fence the writes of its previous incarnation.
    return [
        ev.LeaseAcquired(
            owner=command.owner, epoch=lease.epoch + 1, expires_at=command.expires_at, at=now
        )
    ]


def check_fence(state: SessionState, token: LeaseToken, now: datetime) -> None:
    """Invariant 6: only the live holder of the current epoch writes the session."""
    lease = state.lease
    if lease.owner != token.owner or lease.epoch != token.epoch:
        raise Aborted(
            "stale lease: another owner or epoch holds the session",
            reason="stale_lease",
            details={"epoch": lease.epoch, "presented_epoch": token.epoch},
        )
    if not lease.is_live(now):
        raise Aborted("the lease expired; acquire it again", reason="lease_expired")


def _renew(state: SessionState, command: cmd.RenewLease, now: datetime) -> list[SessionEvent]:
    _check_expiry(command.expires_at, now)
    token = command.lease
    return [
        ev.LeaseRenewed(owner=token.owner, epoch=token.epoch, expires_at=command.expires_at, at=now)
    ]


def _release(state: SessionState, command: cmd.ReleaseLease, now: datetime) -> list[SessionEvent]:
    return [ev.LeaseReleased(owner=command.lease.owner, epoch=command.lease.epoch, at=now)]


def _resolve(
    state: SessionState, command: cmd.ResolveHostRecovery, now: datetime
) -> list[SessionEvent]:
    resolution = resolve_host_recovery(
        command.record, state, host_session_lost=command.host_session_lost
    )
    return [
        ev.RecoveryResolved(turn_id=resolution.skip_host_for_turn, resolution=resolution, at=now)
    ]


def _report(
    state: SessionState, command: cmd.RecordRecoveryReport, now: datetime
) -> list[SessionEvent]:
    return [ev.RecoveryReported(report=command.report, at=now)]


_STOPPED = "stopped by operator"
_STATUS_TARGETS: dict[str, tuple[SessionStatus, frozenset[str]]] = {
    # action: (target status, statuses it may leave)
    "stop": (SessionStatus.SUSPENDED, frozenset({"ready", "running", "suspended", "crashed"})),
    "suspend": (SessionStatus.SUSPENDED, frozenset({"ready", "running", "suspended"})),
    "resume": (SessionStatus.READY, frozenset({"ready", "running", "suspended", "crashed"})),
    "mark_crashed": (
        SessionStatus.CRASHED,
        frozenset({"ready", "running", "suspended", "crashed"}),
    ),
    "close": (SessionStatus.CLOSED, frozenset({"ready", "suspended", "crashed"})),
}


def _set_status(state: SessionState, command: cmd.SetStatus, now: datetime) -> list[SessionEvent]:
    target, sources = _STATUS_TARGETS[command.action]
    turn = state.in_flight
    if command.action == "close" and turn is not None:
        raise FailedPrecondition("a turn is in flight", reason="turn_in_flight")
    if state.status not in sources:
        raise FailedPrecondition(
            f"cannot {command.action} a {state.status} session", reason="invalid_status_transition"
        )
    out: list[SessionEvent] = []
    if command.action == "stop" and turn is not None:
        open_effects = [e.effect_id for e in turn.effects if e.outcome == "open"]
        if open_effects:
            # Abandoning now would forget an effect that may have been applied: its
            # outcome must be read back (by `run`) before the turn may end.
            raise FailedPrecondition(
                "the turn in flight has effects whose outcome is not recorded yet",
                reason="effects_open",
                details={"effect_ids": open_effects},
            )
        # The operator's own reason is the default one: said once, not "X: X".
        said = command.reason
        reason = said if said.startswith(_STOPPED) else f"{_STOPPED}: {said}" if said else _STOPPED
        out.append(ev.TurnAbandoned(turn_id=turn.envelope.turn_id, reason=reason[:2000], at=now))
        turn = None
    if target == SessionStatus.READY and turn is not None:
        target = SessionStatus.RUNNING
    if target == state.status and not out:
        return []  # already there: repeating an operator action changes nothing
    out.append(
        ev.StatusChanged(action=command.action, status=target, reason=command.reason, at=now)
    )
    return out


def _unbound(
    state: SessionState, command: cmd.ReportUnboundTurn, now: datetime
) -> list[SessionEvent]:
    in_flight = state.in_flight
    bound = in_flight is not None and in_flight.envelope.turn_id == command.turn_id
    if bound or command.turn_id in _turns.known_past_turns(state):
        raise FailedPrecondition(
            f"turn {command.turn_id} is bound to this session", reason="turn_is_bound"
        )
    if command.terminal != "lost" or command.cause != "lost_on_restore":
        # Only a restart interruption is safe to absorb: the runner reports it after it
        # proved the old process ended, so that turn can produce no further work.
        raise FailedPrecondition(
            f"terminal {command.terminal} ({command.cause}) for a turn this session never bound",
            reason="turn_binding_mismatch",
            details={"turn_id": command.turn_id},
        )
    return [
        ev.UnboundTurnRestored(turn_id=command.turn_id, detail=command.detail, at=now),
        ev.SessionDiagnostic(
            code=UNBOUND_RESTORED_TURN_LOST,
            turn_id=command.turn_id,
            message="a turn this session never bound was lost on restore; kept as history",
            at=now,
        ),
    ]


_FENCED: dict[type[object], TableRule[SessionState, SessionEvent]] = dict(
    [
        rule(cmd.RenewLease, _renew),
        rule(cmd.ReleaseLease, _release),
        rule(cmd.AcceptTurn, _turns.accept_turn),
        rule(cmd.RecordHostStarted, _turns.host_started),
        rule(cmd.RecordHostEvents, _turns.host_events),
        rule(cmd.RecordReceipt, _turns.receipt),
        rule(cmd.RecordWriteBack, _turns.write_back),
        rule(cmd.RecordEffectIntended, _turns.effect_intended),
        rule(cmd.RecordEffectResolved, _turns.effect_resolved),
        rule(cmd.RecordEffectRejected, _turns.effect_rejected),
        rule(cmd.RecordEffects, _turns.effects),
        rule(cmd.CompleteTurn, _turns.complete),
        rule(cmd.RecordTurnLost, _turns.lost),
        rule(cmd.ResolveHostRecovery, _resolve),
        rule(cmd.AbandonTurn, _turns.abandon),
        rule(cmd.RecordRecoveryReport, _report),
        rule(cmd.SetStatus, _set_status),
        rule(cmd.ReportUnboundTurn, _unbound),
        rule(cmd.BeginOperation, operations.begin),
        rule(cmd.RecordOperationStep, operations.record_step),
        rule(cmd.FinishOperation, operations.finish),
    ]
)


def decide_session(
    state: SessionState | None, command: SessionCommand, now: datetime
) -> list[SessionEvent]:
    """The events ``command`` produces on ``state`` at ``now``; raises a typed error instead.

    An empty list means the command was a retry of one already applied.
    """
    if now.tzinfo is None:
        raise InvalidArgument("now must be timezone-aware", reason="naive_datetime")
    if isinstance(command, cmd.CreateSession):
        return operations.create(state, command, now)
    if state is None:
        raise NotFound("no such session", reason="session_not_found")
    if state.status == "deleted":
        raise FailedPrecondition("the session was deleted", reason="session_deleted")
    if state.status == "closed" and not operations.allowed_when_closed(state, command):
        raise FailedPrecondition("the session is closed", reason="session_closed")
    if isinstance(command, cmd.AcquireLease):
        return _acquire(state, command, now)
    check_fence(state, command.lease, now)
    return _FENCED[type(command)](state, command, now)
