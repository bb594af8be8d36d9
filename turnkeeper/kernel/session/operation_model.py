"""Durable lifecycle operations on a session (create, delete, revert): state and events.

Operations live in the session stream itself, not a stream of their own: admitting
a revert must fail the interrupted turn and start the operation in ONE transaction
under the session lease, and a single stream makes that one append.
The request id is indexed (entity kind ``operation``) so ``operation show ID`` and a
retried request find the stream; at most one operation is pending per session, so
the folded state stays bounded.

``create`` is the session's own ``session.created`` (carrying its request id and
payload digest): it completes in the one append that starts the stream, at expected
sequence 0, so it is never pending and needs no executor lease; that append is its
compare-and-swap.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field

from turnkeeper.kernel.session._model import Id, KernelModel, SessionEventBase, ShortText

# The kinds that can be pending (create never is: see above).
OperationKind = Literal["delete", "revert"]
# Every kind a request id can name (``operation show``).
RecordedOperationKind = Literal["create", "delete", "revert"]
OperationOutcome = Literal["reverted", "deleted", "superseded"]
OperationStep = Literal["restored"]


class PendingOperation(KernelModel):
    """The operation a session owes: whoever holds its executor lease may finish it."""

    request_id: Id
    kind: OperationKind
    payload_digest: Id
    generation: int = Field(ge=1)
    executor: Id
    lease_expires_at: AwareDatetime
    started_at: AwareDatetime
    # revert: the completed turn whose snapshot is restored.
    snapshot_turn_id: Id | None = None
    # Durable steps done so far: a retry after a crash skips them (one restore).
    steps: tuple[OperationStep, ...] = ()


# --- events ------------------------------------------------------------------------------


class _OpEvent(SessionEventBase):
    request_id: Id


class OperationStarted(_OpEvent):
    """Admission. For a revert it also fails the interrupted turn (``failed_turn_id``,
    ``crash_note``): the crash note sits at the turn's place in the timeline."""

    type: Literal["operation.started"] = "operation.started"
    kind: OperationKind
    payload_digest: Id
    generation: int = Field(ge=1)
    executor: Id
    lease_expires_at: AwareDatetime
    snapshot_turn_id: Id | None = None
    failed_turn_id: Id | None = None
    crash_note: ShortText = ""


class OperationJoined(_OpEvent):
    """A retried request (same kind) joins the pending operation ``joined``; an executor
    whose lease expired is replaced by the caller."""

    type: Literal["operation.joined"] = "operation.joined"
    joined: Id
    executor: Id
    lease_expires_at: AwareDatetime


class OperationStepRecorded(_OpEvent):
    type: Literal["operation.step_recorded"] = "operation.step_recorded"
    step: OperationStep


class OperationFinished(_OpEvent):
    type: Literal["operation.finished"] = "operation.finished"
    kind: OperationKind
    outcome: OperationOutcome
    superseded_by: Id | None = None
