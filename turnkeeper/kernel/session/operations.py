"""Deciding and folding durable operations (create, delete, revert) on a session. Pure.

Rules (docs/design.md, "Revert"):

* a create is the stream's first append: a retry with the same request id and
  payload changes nothing, another payload is ``ALREADY_EXISTS``;
* a pending operation of the same kind is joined by a retried request, whatever its
  request id; another kind conflicts (``ABORTED``), except that a delete supersedes
  a pending revert;
* a live executor lease held by someone else is contention (``ABORTED``); an
  expired one is taken over by the caller (the operation is finished by a retry);
* a new operation is a compare-and-swap on the generation the caller observed;
* a revert is admitted only for a crashed session with a completed snapshot, when
  no snapshot is being taken; admission fails the interrupted turn with a crash note;
* only the executor finishes, with the same generation back; a finished revert
  leaves the session suspended, its status reason naming the snapshot restored;
* a closed session does no more work, but it can still be deleted.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

from turnkeeper.errors import Aborted, AlreadyExists, FailedPrecondition
from turnkeeper.kernel.session import commands as cmd
from turnkeeper.kernel.session import events as ev
from turnkeeper.kernel.session.events import SessionEvent
from turnkeeper.kernel.session.operation_model import (
    OperationFinished,
    OperationJoined,
    OperationStarted,
    OperationStepRecorded,
    PendingOperation,
)
from turnkeeper.kernel.session.state import (
    Diagnostic,
    PendingRecovery,
    SessionState,
    SessionStatus,
    TurnEnd,
    TurnOutcome,
    TurnPhase,
)

CRASH_NOTE_CODE = "crashed_turn_reverted"

# Why a session whose first turn never completed is not reverted, and what to do.
NO_TURN_COMPLETED = (
    "no turn of this session has completed, so there is no snapshot to revert to: the "
    "workspace holds what the interrupted turn left (`git status` shows it), and "
    "`session resume` lets the next `run` retry that turn"
)


# --- create ------------------------------------------------------------------------------


def create_payload_digest(command: cmd.CreateSession) -> str:
    """What a create asked for, as recorded with its request id (canonical JSON)."""
    payload: dict[str, object] = {
        "goal_id": command.goal_id,
        "workspace": command.workspace,
        "host_kind": command.host_kind,
        "host_config": command.host_config,
    }
    if not command.snapshots:  # only when off: digests recorded before it stay the same
        payload["snapshots"] = False
    if command.site is not None:  # likewise only when set
        payload["site"] = command.site
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def create(
    state: SessionState | None, command: cmd.CreateSession, now: datetime
) -> list[SessionEvent]:
    digest = create_payload_digest(command) if command.request_id is not None else None
    if state is None:
        return [
            ev.SessionCreated(
                session_id=command.session_id,
                goal_id=command.goal_id,
                workspace=command.workspace,
                host_kind=command.host_kind,
                host_config=command.host_config,
                generation=command.generation,
                request_id=command.request_id,
                payload_digest=digest,
                snapshots=command.snapshots,
                site=command.site,
                at=now,
            )
        ]
    # The payload fields never change after creation, so comparing them is comparing
    # the payload the first request recorded (its digest is over the same fields).
    same = (
        state.session_id == command.session_id
        and state.goal_id == command.goal_id
        and state.workspace == command.workspace
        and state.host_kind == command.host_kind
        and state.host_config == command.host_config
        and state.snapshots == command.snapshots
        and state.site == command.site
    )
    if same:
        return []  # a retried create joins the session it already made
    if command.request_id is not None:
        raise AlreadyExists(
            f"request id {command.request_id!r} was used for another request",
            reason="request_id_reused",
            details={"session_id": state.session_id},
        )
    raise AlreadyExists("session exists with another payload", reason="session_exists")


def allowed_when_closed(state: SessionState, command: cmd.SessionCommand) -> bool:
    """What a closed session still accepts: the lease to delete it, the delete, and
    giving a lease back. Everything else is work, and a closed session does none."""
    if isinstance(command, cmd.AcquireLease):
        return command.purpose == "delete"
    if isinstance(command, cmd.ReleaseLease):
        return True
    if isinstance(command, cmd.BeginOperation):
        return command.kind == "delete"
    if isinstance(command, cmd.RecordOperationStep | cmd.FinishOperation):
        return state.operation is not None and state.operation.kind == "delete"
    return False


# --- delete and revert -------------------------------------------------------------------


def _join(
    state: SessionState, op: PendingOperation, command: cmd.BeginOperation, now: datetime
) -> list[SessionEvent]:
    if command.request_id == op.request_id and command.payload_digest != op.payload_digest:
        raise AlreadyExists(
            f"request id {command.request_id!r} was used for another request",
            reason="request_id_reused",
        )
    taken_over = command.takeover_from is not None and command.takeover_from == op.executor
    if op.executor != command.executor and now < op.lease_expires_at and not taken_over:
        raise Aborted(
            f"operation {op.request_id} is being executed by {op.executor}",
            reason="operation_leased",
            details={"request_id": op.request_id, "lease_expires_at": str(op.lease_expires_at)},
        )
    return [
        OperationJoined(
            at=now,
            request_id=command.request_id,
            joined=op.request_id,
            executor=command.executor,
            lease_expires_at=command.lease_expires_at,
        )
    ]


def _snapshot_in_progress(state: SessionState) -> bool:
    # A turn past its write-back is about to take its snapshot and complete.
    turn = state.in_flight
    return turn is not None and turn.phase in (TurnPhase.WRITTEN_BACK, TurnPhase.EFFECTS)


def begin(state: SessionState, command: cmd.BeginOperation, now: datetime) -> list[SessionEvent]:
    if state.status == "deleted":
        raise FailedPrecondition("the session was deleted", reason="session_deleted")
    # Compare-and-swap first: a delayed caller that observed another generation
    # neither starts nor joins anything.
    if command.expected_generation != state.generation:
        raise Aborted(
            f"generation {command.expected_generation} was superseded by {state.generation}",
            reason="stale_generation",
            details={"generation": state.generation},
        )
    op = state.operation
    out: list[SessionEvent] = []
    if op is not None:
        if op.kind == command.kind:
            return _join(state, op, command, now)
        if not (command.kind == "delete" and op.kind == "revert"):
            raise Aborted(
                f"a {op.kind} operation ({op.request_id}) is pending",
                reason="operation_conflict",
                details={"request_id": op.request_id, "kind": op.kind},
            )
        # Delete supersedes a pending revert: the revert restores in place and creates
        # nothing, so ending it here leaves nothing for the delete to miss.
        out.append(
            OperationFinished(
                at=now,
                request_id=op.request_id,
                kind="revert",
                outcome="superseded",
                superseded_by=command.request_id,
            )
        )
    snapshot_turn: str | None = None
    failed_turn: str | None = None
    if command.kind == "revert":
        if state.status != "crashed":
            raise FailedPrecondition(
                f"a {state.status} session is not reverted", reason="not_crashed"
            )
        if state.last_completed is None:
            raise FailedPrecondition(NO_TURN_COMPLETED, reason="no_snapshot")
        if _snapshot_in_progress(state):
            raise Aborted("a snapshot is being taken", reason="snapshot_in_progress")
        snapshot_turn = state.last_completed.turn_id
        failed_turn = state.in_flight.envelope.turn_id if state.in_flight else None
        if failed_turn is None and state.recovery is not None:
            failed_turn = state.recovery.turn_id
    out.append(
        OperationStarted(
            at=now,
            request_id=command.request_id,
            kind=command.kind,
            payload_digest=command.payload_digest,
            generation=state.generation,
            executor=command.executor,
            lease_expires_at=command.lease_expires_at,
            snapshot_turn_id=snapshot_turn,
            failed_turn_id=failed_turn,
            crash_note=command.crash_note,
        )
    )
    return out


def _owned(state: SessionState, request_id: str, executor: str) -> PendingOperation:
    op = state.operation
    if op is None or request_id not in (op.request_id,):
        raise FailedPrecondition(
            f"operation {request_id!r} is not pending", reason="operation_not_pending"
        )
    if op.executor != executor:
        raise Aborted(f"operation {request_id} is executed by {op.executor}", reason="not_executor")
    return op


def record_step(
    state: SessionState, command: cmd.RecordOperationStep, now: datetime
) -> list[SessionEvent]:
    op = _owned(state, command.request_id, command.executor)
    if command.step in op.steps:
        return []  # a retry of a step already durable
    return [OperationStepRecorded(at=now, request_id=op.request_id, step=command.step)]


def finish(state: SessionState, command: cmd.FinishOperation, now: datetime) -> list[SessionEvent]:
    op = _owned(state, command.request_id, command.executor)
    if command.generation != state.generation or op.generation != state.generation:
        raise Aborted("the session generation changed", reason="stale_generation")
    if op.kind == "revert" and "restored" not in op.steps:
        raise FailedPrecondition("the snapshot is not restored yet", reason="not_restored")
    done = OperationFinished(
        at=now,
        request_id=op.request_id,
        kind=op.kind,
        outcome="reverted" if op.kind == "revert" else "deleted",
    )
    if op.kind == "delete":
        return [done]
    # The revert leaves the session suspended: its reason says so, rather than the crash
    # mark the revert answered (a status change of its own, which any reader decodes).
    # A person asked for it, as for a stop: ``stop``, not the controller's ``suspend``.
    turn = f"turn {op.snapshot_turn_id}" if op.snapshot_turn_id else "its last completed turn"
    return [
        done,
        ev.StatusChanged(
            action="stop",
            status=SessionStatus.SUSPENDED,
            reason=f"reverted to the snapshot of {turn}",
            at=now,
        ),
    ]


# --- evolve ------------------------------------------------------------------------------


def _fail_interrupted(state: SessionState, event: OperationStarted) -> dict[str, object]:
    """The interrupted turn fails with the crash note where it stood in the timeline."""
    update: dict[str, object] = {}
    turn = state.in_flight
    pending: PendingRecovery | None = state.recovery
    if turn is not None and turn.envelope.turn_id == event.failed_turn_id:
        env = turn.envelope
        update["in_flight"] = None
        update["last_turn_end"] = TurnEnd(
            turn_id=env.turn_id,
            todo_id=env.todo_id,
            kind=env.kind,
            attempt=env.attempt,
            outcome=TurnOutcome.FAILED,
            at=event.at,
        )
        counters = state.counters
        update["counters"] = counters.model_copy(update={"turns_failed": counters.turns_failed + 1})
    if pending is not None:
        update["recovery"] = None  # the revert replaces the continuation it owed
    if event.failed_turn_id is not None:
        note = event.crash_note or "session crashed; reverted to its last snapshot"
        update["last_diagnostic"] = Diagnostic(
            code=CRASH_NOTE_CODE, turn_id=event.failed_turn_id, message=note, at=event.at
        )
    return update


def evolve_operation(state: SessionState, event: SessionEvent) -> dict[str, object]:
    if isinstance(event, OperationStarted):
        op = PendingOperation(
            request_id=event.request_id,
            kind=event.kind,
            payload_digest=event.payload_digest,
            generation=event.generation,
            executor=event.executor,
            lease_expires_at=event.lease_expires_at,
            started_at=event.at,
            snapshot_turn_id=event.snapshot_turn_id,
        )
        update = _fail_interrupted(state, event) if event.kind == "revert" else {}
        return {**update, "operation": op}
    pending = state.operation
    if pending is None:
        raise ValueError(f"{event.type} without a pending operation")
    op = pending
    if isinstance(event, OperationJoined):
        return {
            "operation": op.model_copy(
                update={"executor": event.executor, "lease_expires_at": event.lease_expires_at}
            )
        }
    if isinstance(event, OperationStepRecorded):
        return {"operation": op.model_copy(update={"steps": (*op.steps, event.step)})}
    if isinstance(event, OperationFinished):
        if event.outcome == "superseded":
            return {"operation": None}
        if event.outcome == "deleted":
            return {"operation": None, "status": SessionStatus.DELETED}
        return {
            "operation": None,
            "status": SessionStatus.SUSPENDED,
            "consecutive_host_failures": 0,
        }
    raise ValueError(f"not an operation event: {event.type}")
