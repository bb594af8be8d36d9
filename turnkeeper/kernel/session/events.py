"""Events of a session stream. Each is a frozen, versioned JSON record; the runtime appends
them durably (one commit per step of the turn transaction) and folds them into state."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, ConfigDict, Field, TypeAdapter

from turnkeeper.host_reports import HostEvent, ProcessIdentity
from turnkeeper.kernel.session._model import (
    Id,
    JsonDict,
    SessionEventBase,
    ShortText,
    UuidStr,
)
from turnkeeper.kernel.session.effects import MAX_EFFECTS_PER_TURN
from turnkeeper.kernel.session.envelope import (
    NextTurn,
    TurnEnvelope,
)
from turnkeeper.kernel.session.operation_model import (
    OperationFinished,
    OperationJoined,
    OperationStarted,
    OperationStepRecorded,
)
from turnkeeper.kernel.session.records import (
    EffectReadback,
    EffectRef,
    LossProof,
    ProposalDecision,
    Receipt,
    SnapshotRef,
)
from turnkeeper.kernel.session.recovery import ResolvedRecovery
from turnkeeper.kernel.session.report import RecoveryReport
from turnkeeper.kernel.session.state import SessionStatus
from turnkeeper.kernel.upcast import upcast_event_json
from turnkeeper.vocabulary import HostErrorKind

MAX_HOST_EVENTS_PER_BATCH = 1_000
StatusAction = Literal["stop", "suspend", "resume", "mark_crashed", "close"]


class SessionCreated(SessionEventBase):
    type: Literal["session.created"] = "session.created"
    session_id: UuidStr
    goal_id: Id
    workspace: str
    host_kind: Id
    host_config: JsonDict
    generation: int = Field(ge=1)
    # A create under a client request id (None before request ids, or without one):
    # ``operation show`` reads them here, the session's first event.
    request_id: Id | None = None
    payload_digest: Id | None = None
    # Created with snapshots off (``--no-snapshots``); streams from before default on.
    snapshots: bool = True
    # The site whose workers may drive the session (None: any; streams from before).
    site: Id | None = None


class LeaseAcquired(SessionEventBase):
    type: Literal["session.lease_acquired"] = "session.lease_acquired"
    owner: Id
    epoch: int = Field(ge=1)
    expires_at: AwareDatetime


class LeaseRenewed(SessionEventBase):
    type: Literal["session.lease_renewed"] = "session.lease_renewed"
    owner: Id
    epoch: int = Field(ge=1)
    expires_at: AwareDatetime


class LeaseReleased(SessionEventBase):
    type: Literal["session.lease_released"] = "session.lease_released"
    owner: Id
    epoch: int = Field(ge=1)


class StatusChanged(SessionEventBase):
    type: Literal["session.status_changed"] = "session.status_changed"
    action: StatusAction
    status: SessionStatus
    reason: ShortText


class TurnAccepted(SessionEventBase):
    type: Literal["turn.accepted"] = "turn.accepted"
    envelope: TurnEnvelope


class HostStarted(SessionEventBase):
    type: Literal["turn.host_started"] = "turn.host_started"
    turn_id: Id
    host_kind: Id
    process: ProcessIdentity
    host_session_handle: Id | None = None


class HostEventsJournaled(SessionEventBase):
    type: Literal["turn.host_events"] = "turn.host_events"
    turn_id: Id
    events: tuple[HostEvent, ...] = Field(min_length=1, max_length=MAX_HOST_EVENTS_PER_BATCH)
    # Some hosts name their session only in an event (Codex ``thread.started``).
    host_session_handle: Id | None = None


class ReceiptRecorded(SessionEventBase):
    type: Literal["turn.receipt_recorded"] = "turn.receipt_recorded"
    turn_id: Id
    receipt: Receipt


class WrittenBack(SessionEventBase):
    type: Literal["turn.written_back"] = "turn.written_back"
    turn_id: Id
    accepted: tuple[ProposalDecision, ...] = ()
    rejected: tuple[ProposalDecision, ...] = ()
    # Whether the goal events written back were progress (kernel/progress.py). None:
    # not known (a stream written before turns were judged), never counted as idle.
    progress: bool | None = None


class EffectIntended(SessionEventBase):
    """Step 6, before the provider is called: the effect's identity and request."""

    type: Literal["turn.effect_intended"] = "turn.effect_intended"
    turn_id: Id
    effect_id: Id
    idempotency_key: Id
    provider: Id
    request: JsonDict


class EffectResolved(SessionEventBase):
    """Step 6, after readback: ``applied``, or ``indeterminate`` (never retried)."""

    type: Literal["turn.effect_resolved"] = "turn.effect_resolved"
    turn_id: Id
    effect_id: Id
    idempotency_key: Id
    outcome: Literal["applied", "indeterminate"]
    readback: EffectReadback
    apply_called: bool


class EffectRejected(SessionEventBase):
    """An effect refused before any provider call: it was never applied."""

    type: Literal["turn.effect_rejected"] = "turn.effect_rejected"
    turn_id: Id
    effect_id: Id
    idempotency_key: Id
    provider: ShortText
    reason: Id
    detail: ShortText = ""


class EffectsRecorded(SessionEventBase):
    type: Literal["turn.effects_recorded"] = "turn.effects_recorded"
    turn_id: Id
    effects: tuple[EffectRef, ...] = Field(default=(), max_length=MAX_EFFECTS_PER_TURN)


class TurnCompleted(SessionEventBase):
    type: Literal["turn.completed"] = "turn.completed"
    turn_id: Id
    snapshot: SnapshotRef


class TurnFailed(SessionEventBase):
    type: Literal["turn.failed"] = "turn.failed"
    turn_id: Id
    failed_phase: Literal["host_execute"] = "host_execute"
    error_kind: HostErrorKind
    message: ShortText = ""


class TurnLost(SessionEventBase):
    type: Literal["turn.lost"] = "turn.lost"
    turn_id: Id
    cause: Literal["lost_on_restore"] = "lost_on_restore"
    proof: LossProof
    # The continuation is decided with the loss, so replaying the log needs no policy.
    # ``None`` when an older recovery is still pending: that one keeps its claim.
    next: NextTurn | None


class TurnAbandoned(SessionEventBase):
    type: Literal["turn.abandoned"] = "turn.abandoned"
    turn_id: Id
    reason: ShortText


class RecoveryResolved(SessionEventBase):
    type: Literal["turn.recovery_resolved"] = "turn.recovery_resolved"
    turn_id: Id
    resolution: ResolvedRecovery


class UnboundTurnRestored(SessionEventBase):
    """A turn the host ran but this session never bound, kept as restored history."""

    type: Literal["turn.unbound_restored"] = "turn.unbound_restored"
    turn_id: Id
    terminal: Literal["lost"] = "lost"
    cause: Literal["lost_on_restore"] = "lost_on_restore"
    detail: ShortText = ""


class SessionDiagnostic(SessionEventBase):
    type: Literal["session.diagnostic"] = "session.diagnostic"
    code: Id
    turn_id: Id | None = None
    message: ShortText


class RecoveryReported(SessionEventBase):
    type: Literal["session.recovery_reported"] = "session.recovery_reported"
    report: RecoveryReport


SessionEvent = Annotated[
    SessionCreated
    | LeaseAcquired
    | LeaseRenewed
    | LeaseReleased
    | StatusChanged
    | TurnAccepted
    | HostStarted
    | HostEventsJournaled
    | ReceiptRecorded
    | WrittenBack
    | EffectIntended
    | EffectResolved
    | EffectRejected
    | EffectsRecorded
    | TurnCompleted
    | TurnFailed
    | TurnLost
    | TurnAbandoned
    | RecoveryResolved
    | UnboundTurnRestored
    | SessionDiagnostic
    | RecoveryReported
    | OperationStarted
    | OperationJoined
    | OperationStepRecorded
    | OperationFinished,
    Field(discriminator="type"),
]

# Built on first use, not at import (a listing reads projections, never events).
SESSION_EVENT_ADAPTER: TypeAdapter[SessionEvent] = TypeAdapter(
    SessionEvent, config=ConfigDict(defer_build=True)
)

TERMINAL_EVENT_TYPES = frozenset({"turn.completed", "turn.failed", "turn.lost", "turn.abandoned"})


def event_to_json(event: SessionEvent) -> str:
    return SESSION_EVENT_ADAPTER.dump_json(event).decode()


def event_from_json(text: str | bytes) -> SessionEvent:
    # An event of an older schema version is read through its upcasters first.
    return SESSION_EVENT_ADAPTER.validate_json(upcast_event_json(text))
