"""The folded state of one session stream.

The state is bounded: it keeps the in-flight turn, one pending recovery and
summaries/counters, never a list of past turns, so its size (and the projection
row the store rewrites per append) stays constant however many turns a session runs.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Final, Literal

from pydantic import AwareDatetime, Field

from turnkeeper.host_reports import ProcessIdentity
from turnkeeper.kernel.session._model import Id, JsonDict, KernelModel, ShortText, UuidStr
from turnkeeper.kernel.session.effects import MAX_EFFECTS_PER_TURN
from turnkeeper.kernel.session.envelope import (
    NextTurn,
    TurnEnvelope,
)
from turnkeeper.kernel.session.operation_model import PendingOperation
from turnkeeper.kernel.session.records import EffectRef, ReceiptSuccess, SnapshotRef
from turnkeeper.kernel.session.report import RecoveryReport
from turnkeeper.vocabulary import HostErrorKind, TurnKind

# Like every record's version, a Literal: a state of a version this code does not know
# is refused when it is read, not taken for this one.
SESSION_STATE_SCHEMA_VERSION: Final = 1


# ``deleted`` is final like ``closed``, reached only through a DELETE operation.
class SessionStatus(StrEnum):
    READY = "ready"
    RUNNING = "running"
    SUSPENDED = "suspended"
    CRASHED = "crashed"
    CLOSED = "closed"
    DELETED = "deleted"


# Non-terminal phases of the turn transaction; a terminal turn leaves ``in_flight``.
# StrEnums like the goal kernel's statuses: the values are what the log holds.
class TurnPhase(StrEnum):
    ACCEPTED = "accepted"
    HOST_STARTED = "host_started"
    RECEIPT = "receipt"
    WRITTEN_BACK = "written_back"
    EFFECTS = "effects"


class TurnOutcome(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    LOST = "lost"
    ABANDONED = "abandoned"


class Lease(KernelModel):
    """Who may write the session. ``epoch`` survives release so fencing keeps working."""

    owner: Id | None = None
    expires_at: AwareDatetime | None = None
    epoch: int = Field(default=0, ge=0)

    def is_live(self, now: datetime) -> bool:
        return self.owner is not None and self.expires_at is not None and now < self.expires_at


class InFlightTurn(KernelModel):
    envelope: TurnEnvelope
    phase: TurnPhase
    accepted_at: AwareDatetime
    process: ProcessIdentity | None = None
    # The host session handle this turn bound, if any: a turn binds at most one.
    host_session_handle: Id | None = None
    # The last host event seq journaled, so a consumer can reattach after it.
    last_host_seq: int = Field(default=0, ge=0)
    # Kept until completion: after a crash the write-back is redone from this
    # durable receipt and the host does not run again (recovery table).
    receipt: ReceiptSuccess | None = None
    accepted_proposals: int = Field(default=0, ge=0)
    rejected_proposals: int = Field(default=0, ge=0)
    # Whether the write-back was progress (None: not written back, or not known).
    progress: bool | None = None
    # The effects ledger of step 6, in the order they were recorded; capped.
    effects: tuple[EffectRef, ...] = Field(default=(), max_length=MAX_EFFECTS_PER_TURN)

    def effect(self, effect_id: str) -> EffectRef | None:
        return next((e for e in self.effects if e.effect_id == effect_id), None)


class TurnEnd(KernelModel):
    """How the most recent terminal turn ended (for status and precise rejections)."""

    turn_id: Id
    todo_id: Id | None
    kind: TurnKind
    attempt: int = Field(ge=1)
    outcome: TurnOutcome
    at: AwareDatetime


class CompletedTurn(KernelModel):
    """The last completed turn: the snapshot a revert would restore."""

    turn_id: Id
    todo_id: Id | None
    attempt: int = Field(ge=1)
    snapshot: SnapshotRef
    completed_at: AwareDatetime


class PendingRecovery(KernelModel):
    """A failed or lost turn the session still owes a continuation for.

    A failed turn waits for its host recovery record to be resolved; a lost turn is
    resolved at once (its loss was proven), so ``next`` is already known.
    """

    turn_id: Id
    todo_id: Id | None
    attempt: int = Field(ge=1)
    cause: Literal["failed", "lost"]
    error_kind: HostErrorKind | None
    since: AwareDatetime
    status: Literal["awaiting_resolution", "resolved"]
    next: NextTurn | None = None


class RecoveredTurn(KernelModel):
    """The last turn whose recovery was resolved; its host step must never run again."""

    turn_id: Id
    continued_by: Id | None = None
    resolved_at: AwareDatetime


class Diagnostic(KernelModel):
    code: Id
    turn_id: Id | None
    message: ShortText
    at: AwareDatetime


class SessionCounters(KernelModel):
    turns_accepted: int = 0
    turns_completed: int = 0
    turns_failed: int = 0
    turns_lost: int = 0
    turns_abandoned: int = 0
    turns_recovered: int = 0
    host_events: int = 0
    unbound_restored_turns: int = 0
    recovery_reports: int = 0
    effects_applied: int = 0
    effects_indeterminate: int = 0
    effects_rejected: int = 0


class SessionState(KernelModel):
    schema_version: Literal[1] = SESSION_STATE_SCHEMA_VERSION
    session_id: UuidStr
    goal_id: Id
    workspace: str
    host_kind: Id
    host_config: JsonDict
    host_session_handle: Id | None = None
    generation: int = Field(ge=1)
    created_at: AwareDatetime
    # False: completed turns take no workspace snapshot, and a revert is refused.
    snapshots: bool = True
    # Where the workspace lives: only workers of this site drive it (None: any).
    site: Id | None = None
    lease: Lease = Lease()
    status: SessionStatus = SessionStatus.READY
    in_flight: InFlightTurn | None = None
    consecutive_host_failures: int = Field(default=0, ge=0)
    # Failed turns in a row whose host was ended as hung (no progress for the silence
    # timeout); another turn's end breaks the streak, a lost or abandoned one does not.
    consecutive_hangs: int = Field(default=0, ge=0)
    # Turns lost in a row (ended without a result: their controller died, or lost their
    # lease); a completed turn breaks the streak, an operator's resume starts it again.
    # Absent from records written before it was counted: 0.
    consecutive_lost: int = Field(default=0, ge=0)
    # The progress guard (policy.py): completed turns in a row that changed nothing in
    # the goal, the replan turns among them, and the streak's first turn (its name).
    turns_without_progress: int = Field(default=0, ge=0)
    replans_without_progress: int = Field(default=0, ge=0)
    idle_since_turn: Id | None = None
    # Why the session is in its status (the last operator or controller action's reason).
    status_reason: ShortText | None = None
    last_completed: CompletedTurn | None = None
    last_turn_end: TurnEnd | None = None
    recovery: PendingRecovery | None = None
    last_recovered: RecoveredTurn | None = None
    latest_recovery_report: RecoveryReport | None = None
    last_diagnostic: Diagnostic | None = None
    counters: SessionCounters = SessionCounters()
    # The durable delete / revert this session owes (at most one; see operation_model).
    operation: PendingOperation | None = None
