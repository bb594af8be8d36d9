"""Commands to the session kernel. Every command that writes an existing session carries
the writer's lease token, so a worker whose lease was taken over writes nothing."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, ConfigDict, Field, JsonValue, TypeAdapter

from turnkeeper.host_reports import HostEvent, ProcessIdentity
from turnkeeper.kernel.session._model import Id, JsonDict, KernelModel, ShortText, UuidStr
from turnkeeper.kernel.session.effects import MAX_EFFECTS_PER_TURN
from turnkeeper.kernel.session.envelope import TurnEnvelope
from turnkeeper.kernel.session.events import MAX_HOST_EVENTS_PER_BATCH, StatusAction
from turnkeeper.kernel.session.operation_model import OperationKind, OperationStep
from turnkeeper.kernel.session.records import (
    EffectReadback,
    EffectRef,
    LossProof,
    ProposalDecision,
    Receipt,
    SnapshotRef,
)
from turnkeeper.kernel.session.report import RecoveryReport


class LeaseToken(KernelModel):
    """The fencing token: who writes, under which lease epoch."""

    owner: Id
    epoch: int = Field(ge=1)


class _Fenced(KernelModel):
    lease: LeaseToken


class CreateSession(KernelModel):
    """``request_id``: the client's id for this create (a retry with the same id and
    payload changes nothing; another payload is ALREADY_EXISTS). The runtime derives
    ``session_id`` from it, so a retry lands on the same stream."""

    type: Literal["create_session"] = "create_session"
    session_id: UuidStr
    goal_id: Id
    workspace: str
    host_kind: Id
    host_config: JsonDict = Field(default_factory=dict)
    generation: int = Field(default=1, ge=1)
    request_id: Id | None = None
    # False: the workspace is not snapshotted at completed turns (and cannot be reverted).
    snapshots: bool = True
    # Where the workspace lives (a worker's ``--site``): only workers there drive it.
    # None: any worker may (one machine, or a workspace every worker reaches).
    site: Id | None = None


class AcquireLease(KernelModel):
    type: Literal["acquire_lease"] = "acquire_lease"
    owner: Id
    expires_at: AwareDatetime
    # Take over a live lease whose holder the caller proved dead (a SIGKILLed
    # controller on this machine): names the exact lease it replaces, so a proof
    # about an older holder can never displace a newer one.
    takeover_from: LeaseToken | None = None
    takeover_proof: ShortText = ""
    # A closed session does no more work, so it grants a lease only to delete it.
    purpose: Literal["work", "delete"] = "work"


class RenewLease(_Fenced):
    type: Literal["renew_lease"] = "renew_lease"
    expires_at: AwareDatetime


class ReleaseLease(_Fenced):
    type: Literal["release_lease"] = "release_lease"


class AcceptTurn(_Fenced):
    type: Literal["accept_turn"] = "accept_turn"
    envelope: TurnEnvelope


class RecordHostStarted(_Fenced):
    type: Literal["record_host_started"] = "record_host_started"
    turn_id: Id
    host_kind: Id
    process: ProcessIdentity
    host_session_handle: Id | None = None
    # When the host started, if that is earlier than this command is decided: its
    # start is journaled with the turn's next write (runtime/turn/host_journal.py).
    started_at: AwareDatetime | None = None


class RecordHostEvents(_Fenced):
    type: Literal["record_host_events"] = "record_host_events"
    turn_id: Id
    events: tuple[HostEvent, ...] = Field(min_length=1, max_length=MAX_HOST_EVENTS_PER_BATCH)
    host_session_handle: Id | None = None


class RecordReceipt(_Fenced):
    type: Literal["record_receipt"] = "record_receipt"
    turn_id: Id
    receipt: Receipt


class RecordWriteBack(_Fenced):
    type: Literal["record_write_back"] = "record_write_back"
    turn_id: Id
    accepted: tuple[ProposalDecision, ...] = ()
    rejected: tuple[ProposalDecision, ...] = ()
    # Whether the goal events written back were progress (the caller decided them).
    progress: bool | None = None


class RecordEffectIntended(_Fenced):
    """Durable intent, before the provider is called: must match the receipt's plan."""

    type: Literal["record_effect_intended"] = "record_effect_intended"
    turn_id: Id
    effect_id: Id
    idempotency_key: Id
    provider: Id
    request: JsonDict = Field(default_factory=dict)


class RecordEffectResolved(_Fenced):
    """The outcome of an intended effect, established by readback. ``apply_called`` says
    whether this resolution called the provider's apply (False: found applied already)."""

    type: Literal["record_effect_resolved"] = "record_effect_resolved"
    turn_id: Id
    effect_id: Id
    outcome: Literal["applied", "indeterminate"]
    readback: EffectReadback
    apply_called: bool


class RecordEffectRejected(_Fenced):
    """An effect refused before any provider call (malformed, over the cap, provider
    not configured or not installed): provably never applied, never retried."""

    type: Literal["record_effect_rejected"] = "record_effect_rejected"
    turn_id: Id
    effect_id: Id
    reason: Id
    detail: ShortText = ""


class RecordEffects(_Fenced):
    """Close the effects step (optional): every requested effect is resolved. ``effects``,
    when given, must equal the ledger the kernel keeps."""

    type: Literal["record_effects"] = "record_effects"
    turn_id: Id
    effects: tuple[EffectRef, ...] = Field(default=(), max_length=MAX_EFFECTS_PER_TURN)


class CompleteTurn(_Fenced):
    type: Literal["complete_turn"] = "complete_turn"
    turn_id: Id
    snapshot: SnapshotRef


class RecordTurnLost(_Fenced):
    type: Literal["record_turn_lost"] = "record_turn_lost"
    turn_id: Id
    proof: LossProof


class ResolveHostRecovery(_Fenced):
    """Carries the record as read back (dict or JSON text): it is validated, not trusted."""

    type: Literal["resolve_host_recovery"] = "resolve_host_recovery"
    record: dict[str, JsonValue] | str
    # Probed by the runtime: the bound host session's artifact is missing and no
    # completed turn ever recorded it, so there is nothing to resume (an agent CLI
    # killed before it first saved its transcript). The continuation is then a retry
    # in a fresh host session.
    host_session_lost: bool = False


class AbandonTurn(_Fenced):
    type: Literal["abandon_turn"] = "abandon_turn"
    turn_id: Id
    reason: ShortText


class RecordRecoveryReport(_Fenced):
    type: Literal["record_recovery_report"] = "record_recovery_report"
    report: RecoveryReport


class SetStatus(_Fenced):
    """Operator actions. ``stop`` abandons the in-flight turn and suspends; ``suspend``
    lets the in-flight turn finish but accepts no new one; ``resume`` undoes both and
    a crash; ``close`` is final."""

    type: Literal["set_status"] = "set_status"
    action: StatusAction
    reason: ShortText = ""


class ReportUnboundTurn(_Fenced):
    """A host reported a terminal for a turn id this session may never have bound."""

    type: Literal["report_unbound_turn"] = "report_unbound_turn"
    turn_id: Id
    terminal: Literal["completed", "failed", "lost"]
    cause: Id | None = None
    detail: ShortText = ""


class BeginOperation(_Fenced):
    """Start (or join) a durable delete / revert. ``payload_digest`` names what was asked
    (same request id, other payload: ALREADY_EXISTS); ``expected_generation`` is the
    generation the caller observed (compare-and-swap: another one is ABORTED)."""

    type: Literal["begin_operation"] = "begin_operation"
    request_id: Id
    kind: OperationKind
    payload_digest: Id
    executor: Id
    lease_expires_at: AwareDatetime
    expected_generation: int = Field(ge=1)
    crash_note: ShortText = ""
    # Take over the executor lease of this executor, which the caller proved dead.
    takeover_from: Id | None = None


class RecordOperationStep(_Fenced):
    type: Literal["record_operation_step"] = "record_operation_step"
    request_id: Id
    executor: Id
    step: OperationStep


class FinishOperation(_Fenced):
    """Only the operation's executor finishes it, and only with the generation it began
    under still in place (a revert requires the same session back)."""

    type: Literal["finish_operation"] = "finish_operation"
    request_id: Id
    executor: Id
    generation: int = Field(ge=1)


SessionCommand = Annotated[
    CreateSession
    | AcquireLease
    | RenewLease
    | ReleaseLease
    | AcceptTurn
    | RecordHostStarted
    | RecordHostEvents
    | RecordReceipt
    | RecordWriteBack
    | RecordEffectIntended
    | RecordEffectResolved
    | RecordEffectRejected
    | RecordEffects
    | CompleteTurn
    | RecordTurnLost
    | ResolveHostRecovery
    | AbandonTurn
    | RecordRecoveryReport
    | SetStatus
    | ReportUnboundTurn
    | BeginOperation
    | RecordOperationStep
    | FinishOperation,
    Field(discriminator="type"),
]

# Built on first use, not at import: only the runtime driving a turn decodes commands.
SESSION_COMMAND_ADAPTER: TypeAdapter[SessionCommand] = TypeAdapter(
    SessionCommand, config=ConfigDict(defer_build=True)
)
