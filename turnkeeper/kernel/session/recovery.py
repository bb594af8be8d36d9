"""Host failure recovery: validate a host recovery record, resolve its binding
against the live session, and say how the session continues without re-running the
failed host step. Also builds the continuation after a turn lost on restore."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import ValidationError

from turnkeeper.errors import FailedPrecondition, InvalidArgument
from turnkeeper.kernel.session._model import Id, KernelModel
from turnkeeper.kernel.session.envelope import NextTurn, TurnEnvelope
from turnkeeper.kernel.session.records import (
    HOST_RECOVERY_SCHEMA_VERSION,
    HostRecoveryRecord,
    LossProof,
)
from turnkeeper.kernel.session.state import PendingRecovery, SessionState
from turnkeeper.vocabulary import HostErrorKind

SUPPORTED_RECOVERY_KINDS = frozenset({"resume_session"})
RECOVERABLE_PHASES = frozenset({"host_execute"})


class ResolvedRecovery(KernelModel):
    """A validated recovery: resume the session, skip the failed host step, continue."""

    session_action: Literal["resume"] = "resume"
    skip_host_for_turn: Id
    next: NextTurn


def _parse(record_json: object) -> dict[str, object]:
    if isinstance(record_json, str | bytes):
        try:
            record_json = json.loads(record_json)
        except ValueError as exc:
            raise InvalidArgument(
                "host recovery record is not valid JSON", reason="malformed_recovery_record"
            ) from exc
    if not isinstance(record_json, dict):
        raise InvalidArgument(
            "host recovery record must be a JSON object", reason="malformed_recovery_record"
        )
    return record_json


def validate_host_recovery_record(record_json: object) -> HostRecoveryRecord:
    """Check version, kind and phase before the shape, so each has its own reason.

    Validation fails closed: a record this code does not understand is never
    interpreted, because resuming the wrong session is worse than stopping.
    """
    raw = _parse(record_json)
    version = raw.get("schema_version")
    if version is None:
        raise InvalidArgument("record has no schema_version", reason="malformed_recovery_record")
    if version != HOST_RECOVERY_SCHEMA_VERSION:
        raise FailedPrecondition(
            f"unsupported host recovery schema version {version!r}",
            reason="unsupported_schema_version",
            details={"schema_version": str(version)},
        )
    if raw.get("kind") not in SUPPORTED_RECOVERY_KINDS:
        raise FailedPrecondition(
            f"unsupported recovery kind {raw.get('kind')!r}", reason="unsupported_recovery_kind"
        )
    if raw.get("failed_phase") not in RECOVERABLE_PHASES:
        raise FailedPrecondition(
            f"failed_phase {raw.get('failed_phase')!r} is not recoverable",
            reason="wrong_failed_phase",
        )
    try:
        return HostRecoveryRecord.model_validate(raw)
    except ValidationError as exc:
        raise InvalidArgument(
            "host recovery record has the wrong shape",
            reason="malformed_recovery_record",
            details={"errors": exc.error_count()},
        ) from exc


def _mismatch(field: str, expected: object, actual: object) -> FailedPrecondition:
    return FailedPrecondition(
        f"recovery record {field} {actual!r} does not match the live session ({expected!r})",
        reason=f"{field}_mismatch",
        details={"expected": str(expected), "actual": str(actual)},
    )


def resolve_host_recovery(
    record_json: object, session: SessionState, *, host_session_lost: bool = False
) -> ResolvedRecovery:
    """Validate ``record_json`` (a dict or JSON text) and resolve it against ``session``.

    ``host_session_lost``: the caller found that the bound host session left nothing
    to resume (its artifact never existed at any completed turn and is not there now),
    so the continuation starts a fresh host session instead of failing every resume.

    Raises ``InvalidArgument``/``FailedPrecondition`` with a distinct reason per failure;
    a caller that gets an error writes nothing.
    """
    record = validate_host_recovery_record(record_json)
    binding = record.binding
    if binding.session_id != session.session_id:
        raise _mismatch("session", session.session_id, binding.session_id)
    if binding.generation != session.generation:
        raise _mismatch("generation", session.generation, binding.generation)
    if binding.host_kind != session.host_kind:
        raise _mismatch("host_kind", session.host_kind, binding.host_kind)
    if binding.host_session_handle != session.host_session_handle:
        raise _mismatch("host_handle", session.host_session_handle, binding.host_session_handle)
    pending = session.recovery
    if (
        pending is None
        or pending.turn_id != binding.turn_id
        or pending.cause != "failed"
        or pending.status != "awaiting_resolution"
    ):
        # Covers a turn that never failed, one already recovered (a second resolution
        # would queue a second continuation) and one recovered by a lost-turn path.
        raise FailedPrecondition(
            f"turn {binding.turn_id} is not a failed turn awaiting recovery",
            reason="turn_not_recoverable",
            details={"turn_id": binding.turn_id},
        )
    if binding.attempt != pending.attempt:
        raise _mismatch("attempt", pending.attempt, binding.attempt)
    note = (
        f"The host failed during turn {pending.turn_id} ({pending.error_kind}); that step "
        "will not be run again. Inspect the workspace and the host session, reconcile any "
        "unfinished or half-applied work, then continue."
    )
    if pending.error_kind is HostErrorKind.HUNG:
        # The same words would wait on the same thing again: say what ended the turn.
        note += (
            " It was ended because it made no progress for too long (no output and no "
            "CPU use): do not wait for input, a prompt or an unreachable service; if one "
            "is needed, say so and stop."
        )
    if host_session_lost:
        note += (
            f" The host session {session.host_session_handle} saved nothing before it "
            "ended, so this is a new host session: what the earlier attempt did is only "
            "in the workspace."
        )
    next_turn = continuation_spec(
        session,
        pending.turn_id,
        pending.todo_id,
        pending.attempt,
        note,
        host_session_lost=host_session_lost,
    )
    return ResolvedRecovery(skip_host_for_turn=pending.turn_id, next=next_turn)


def continuation_spec(
    session: SessionState,
    turn_id: str,
    todo_id: str | None,
    attempt: int,
    note: str,
    *,
    host_session_lost: bool = False,
) -> NextTurn:
    """The turn that continues an interrupted one with the next attempt number.

    With a bound host session this is a ``continuation`` that resumes it, so the
    agent keeps its context; without one — or with one that left nothing to resume
    (``host_session_lost``) — the same work is a ``retry`` in a fresh host session.
    Either way the reconcile note tells the agent not to replay the lost step blindly.
    """
    resumable = session.host_session_handle is not None and not host_session_lost
    target = f"todo {todo_id}" if todo_id else "the interrupted work"
    action = "Resume the host session and continue" if resumable else "Retry"
    return NextTurn(
        kind="continuation" if resumable else "retry",
        todo_id=todo_id,
        attempt=attempt + 1,
        instructions=f"{action} {target} (attempt {attempt + 1}); follow the reconcile note first.",
        resume_host_session=resumable,
        reconcile_note=note,
        recovers_turn_id=turn_id,
    )


def lost_turn_note(turn_id: str, proof: LossProof) -> str:
    how = {
        "killed": "was ended",
        "proven_gone": "is proven gone",
        "fenced": "was ended by its controller when that controller lost its lease",
    }[proof.ended]
    return (
        f"Turn {turn_id} was lost when the control plane restarted; its host process {how}. "
        "Its work may be partly done: inspect the workspace and the host session, reconcile "
        "unfinished work, and do not repeat steps that already took effect."
    )


def pending_is_continued_by(pending: PendingRecovery, next_turn: NextTurn | TurnEnvelope) -> bool:
    """Whether an accepted turn is exactly the continuation a resolved recovery expects."""
    expected = pending.next
    return (
        pending.status == "resolved"
        and expected is not None
        and next_turn.recovers_turn_id == pending.turn_id
        and next_turn.kind == expected.kind
        and next_turn.attempt == expected.attempt
        and next_turn.todo_id == expected.todo_id
        and next_turn.resume_host_session == expected.resume_host_session
    )
