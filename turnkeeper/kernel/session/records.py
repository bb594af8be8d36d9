"""What hosts and the runtime report about a turn: process identity, host events,
receipts, the host recovery record, write-back and snapshot references."""

from __future__ import annotations

import json
from typing import Annotated, Final, Literal, Self

from pydantic import Field, JsonValue, model_validator

# The host's own records, journaled as they are (re-exported for the kernel's users).
from turnkeeper.host_reports import ProcessIdentity
from turnkeeper.kernel.session._model import Id, JsonDict, KernelModel, ShortText, UuidStr
from turnkeeper.vocabulary import HostErrorKind, ReadbackStatus

HOST_RECOVERY_SCHEMA_VERSION: Final = "turnkeeper.host_recovery.v1"


class RecoveryBinding(KernelModel):
    """Which session and turn a host recovery record belongs to."""

    session_id: UuidStr
    generation: int = Field(ge=1)
    host_kind: Id
    host_session_handle: Id | None
    turn_id: Id
    attempt: int = Field(ge=1)


class HostRecoveryRecord(KernelModel):
    """Typed, versioned entry written when a host fails while the control plane lives."""

    schema_version: Literal["turnkeeper.host_recovery.v1"] = HOST_RECOVERY_SCHEMA_VERSION
    kind: Literal["resume_session"] = "resume_session"
    failed_phase: Literal["host_execute"] = "host_execute"
    binding: RecoveryBinding


class ReceiptSuccess(KernelModel):
    outcome: Literal["success"] = "success"
    result: JsonDict
    host_artifact_digest: Id | None = None


class ReceiptFailure(KernelModel):
    outcome: Literal["failure"] = "failure"
    failed_phase: Literal["host_execute"] = "host_execute"
    error_kind: HostErrorKind
    exit_code: int | None = None
    signal: int | None = None
    message: ShortText = ""
    host_recovery: HostRecoveryRecord


Receipt = Annotated[ReceiptSuccess | ReceiptFailure, Field(discriminator="outcome")]


class ProposalDecision(KernelModel):
    """A proposal the goal kernel accepted or rejected, by reference only."""

    proposal_id: Id
    reason: ShortText = ""
    # The kernel's words for a refusal (what the next turn's brief quotes).
    message: ShortText = ""


EffectOutcome = Literal["open", "applied", "indeterminate", "rejected"]
MAX_READBACK_BYTES = 8_192


class EffectReadback(KernelModel):
    """What a provider's readback observed: ``applied`` (with the observed value),
    ``not_applied`` (provably absent) or ``unknown`` (it could not tell)."""

    status: ReadbackStatus
    value: JsonValue = None
    detail: ShortText = ""

    @model_validator(mode="after")
    def _value_is_bounded(self) -> Self:
        # The readback is kept in the log; an unbounded value would bloat every read.
        size = len(json.dumps(self.value, separators=(",", ":"), default=str))
        if size > MAX_READBACK_BYTES:
            raise ValueError(f"readback value is {size} bytes; at most {MAX_READBACK_BYTES}")
        return self


class EffectRef(KernelModel):
    """One effect of the in-flight turn, as the bounded state keeps it: ``open`` from its
    durable intent until its outcome is recorded; ``rejected`` when it was refused before
    any provider call (malformed, over the cap, provider not configured or installed)."""

    effect_id: Id
    idempotency_key: Id
    provider: ShortText
    outcome: EffectOutcome


class SnapshotRef(KernelModel):
    """Durable state at a completed turn: what a revert would restore.

    The fields after ``host_artifact_digest`` came with workspace snapshots
    (runtime/workspaces/snapshots.py); they default so events written before them still decode.
    """

    kernel_seq: int = Field(ge=0)
    workspace_revision: Id | None
    host_artifact_digest: Id | None
    # The private ref holding the snapshot commit, the commit and its tree.
    snapshot_ref: Id | None = None
    workspace_commit: Id | None = None
    workspace_tree: Id | None = None
    # The host session artifact: where it lives, and the copy kept with the snapshot.
    host_artifact_path: ShortText | None = None
    host_artifact_copy: ShortText | None = None
    # Why this completed turn has no snapshot although the session takes them (git's
    # own message); None when it has one, or snapshots are off.
    snapshot_failed: ShortText | None = None


class LossProof(KernelModel):
    """Why the kernel may call a turn lost: its process is proven gone, was ended, or
    was ended by its own controller's self-fencing (``fenced``: the controller is where
    this one cannot see its processes, and its lease and the fencing margin have
    passed: runtime/turn/fencing.py)."""

    ended: Literal["proven_gone", "killed", "fenced"]
    killed_pids: tuple[int, ...] = Field(default=(), max_length=256)
    process: ProcessIdentity | None = None
    detail: ShortText = ""

    @model_validator(mode="after")
    def _killed_names_pids(self) -> Self:
        if self.ended == "killed" and not self.killed_pids:
            raise ValueError("a killed process tree must name the pids that were ended")
        return self
