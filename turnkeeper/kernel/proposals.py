"""Proposals: what a caller asks the kernel to do to a goal.

A proposal is a request, not a fact. :func:`turnkeeper.kernel.decide` either
turns it into events or raises a typed error. Proposal models check only types;
the values (empty text, negative cadence, unknown ids, ...) are checked by
``decide`` so every rejection carries a stable ``reason`` from
:mod:`turnkeeper.errors`.

Ids of new entities come in the proposal: the shell generates them, the kernel
has no randomness. Proposals that may carry an observable replan delta have a
``discharges`` list of obligation ids.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, JsonValue, TypeAdapter, ValidationError

from turnkeeper.errors import InvalidArgument
from turnkeeper.kernel.model import KernelModel, NoFollowUpReason, VisionStatus


class CriterionSpec(KernelModel):
    id: str
    text: str


class TodoSpec(KernelModel):
    """A new todo's definition, used by :class:`AddTodo` and as a successor."""

    todo_id: str
    title: str
    depends_on: list[str] = Field(default_factory=list)
    required_evidence: list[str] = Field(default_factory=list)
    successor_required: bool = False


class Fence(KernelModel):
    """The claim a proposal acts under: a mismatch means the caller's claim is stale."""

    owner: str
    epoch: int


# --- goal and acceptance ------------------------------------------------------


class CreateGoal(KernelModel):
    kind: Literal["create_goal"] = "create_goal"
    goal_id: str
    title: str
    objective: str = ""
    criteria: list[CriterionSpec] = Field(default_factory=list)
    agents_requiring_vision: list[str] = Field(default_factory=list)


class UpdateAcceptance(KernelModel):
    """Add criteria, or replace the whole list. Either way a material refresh."""

    kind: Literal["update_acceptance"] = "update_acceptance"
    mode: Literal["add", "replace"] = "add"
    criteria: list[CriterionSpec]
    # None keeps the current list of agents that must keep a vision checkpoint.
    agents_requiring_vision: list[str] | None = None
    discharges: list[str] = Field(default_factory=list)


class SatisfyCriterion(KernelModel):
    kind: Literal["satisfy_criterion"] = "satisfy_criterion"
    criterion_id: str
    evidence_ids: list[str]
    current_revision: str | None = None


class RecordVisionCheckpoint(KernelModel):
    kind: Literal["record_vision_checkpoint"] = "record_vision_checkpoint"
    agent: str
    status: VisionStatus
    reason: str = ""
    vision_text: str | None = None
    discharges: list[str] = Field(default_factory=list)


# --- todos --------------------------------------------------------------------


class AddTodo(KernelModel):
    kind: Literal["add_todo"] = "add_todo"
    todo: TodoSpec
    # Makes the new todo a successor of this one (links both ways).
    successor_of: str | None = None
    discharges: list[str] = Field(default_factory=list)


class ClaimTodo(KernelModel):
    kind: Literal["claim_todo"] = "claim_todo"
    todo_id: str
    owner: str
    lease_expires_at: datetime


class RenewClaim(KernelModel):
    kind: Literal["renew_claim"] = "renew_claim"
    todo_id: str
    fence: Fence
    lease_expires_at: datetime


class ReleaseClaim(KernelModel):
    kind: Literal["release_claim"] = "release_claim"
    todo_id: str
    fence: Fence


class CompleteTodo(KernelModel):
    kind: Literal["complete_todo"] = "complete_todo"
    todo_id: str
    fence: Fence
    evidence_ids: list[str] = Field(default_factory=list)
    # When given, every evidence record used must have run on this revision.
    current_revision: str | None = None


class SupersedeTodo(KernelModel):
    kind: Literal["supersede_todo"] = "supersede_todo"
    todo_id: str
    reason: str
    # Required only when the todo is claimed.
    fence: Fence | None = None
    successor: TodoSpec | None = None
    discharges: list[str] = Field(default_factory=list)


class BlockTodo(KernelModel):
    kind: Literal["block_todo"] = "block_todo"
    todo_id: str
    reason: str
    # Required only when the todo is claimed: only the holder may block it.
    fence: Fence | None = None


class UnblockTodo(KernelModel):
    kind: Literal["unblock_todo"] = "unblock_todo"
    todo_id: str


# --- gates, monitors, evidence ------------------------------------------------


class OpenGate(KernelModel):
    kind: Literal["open_gate"] = "open_gate"
    gate_id: str
    title: str
    blocking: bool = True
    scope: list[str] = Field(default_factory=list)


class ResolveGate(KernelModel):
    kind: Literal["resolve_gate"] = "resolve_gate"
    gate_id: str
    by: str
    decision: str
    payload: dict[str, JsonValue] = Field(default_factory=dict)


class AddMonitor(KernelModel):
    kind: Literal["add_monitor"] = "add_monitor"
    monitor_id: str
    target: str
    cadence_seconds: int
    stall_limit: int = 3
    required: bool = False
    # Required when ``required``: how old the last readback may be at closure.
    freshness_seconds: int | None = None


class RecordReadback(KernelModel):
    kind: Literal["record_readback"] = "record_readback"
    monitor_id: str
    value: JsonValue
    # When the provider observed the value; defaults to ``now``.
    at: datetime | None = None


class RetireMonitor(KernelModel):
    kind: Literal["retire_monitor"] = "retire_monitor"
    monitor_id: str
    reason: str


class RecordEvidence(KernelModel):
    kind: Literal["record_evidence"] = "record_evidence"
    evidence_id: str
    command: str
    # Defaults to the command text.
    key: str | None = None
    revision: str | None = None
    exit_code: int
    output_digest: str = ""
    # When the command ran; defaults to ``now``.
    recorded_at: datetime | None = None
    freshness_seconds: int


# --- replan and closure -------------------------------------------------------


class Reassess(KernelModel):
    """Re-check the time-based replan triggers (stale evidence) at ``now``."""

    kind: Literal["reassess"] = "reassess"


class RecordNoFollowUp(KernelModel):
    kind: Literal["record_no_follow_up"] = "record_no_follow_up"
    reason: NoFollowUpReason
    summary: str
    discharges: list[str]


class Note(KernelModel):
    """Free text for the record. Never an observable delta: it cannot discharge."""

    kind: Literal["note"] = "note"
    author: str
    text: str
    # Accepted only to reject it with ``replan_requires_delta`` when non-empty.
    discharges: list[str] = Field(default_factory=list)


class CloseGoal(KernelModel):
    kind: Literal["close_goal"] = "close_goal"
    reason: NoFollowUpReason
    summary: str


GoalProposal = Annotated[
    CreateGoal
    | UpdateAcceptance
    | SatisfyCriterion
    | RecordVisionCheckpoint
    | AddTodo
    | ClaimTodo
    | RenewClaim
    | ReleaseClaim
    | CompleteTodo
    | SupersedeTodo
    | BlockTodo
    | UnblockTodo
    | OpenGate
    | ResolveGate
    | AddMonitor
    | RecordReadback
    | RetireMonitor
    | RecordEvidence
    | Reassess
    | RecordNoFollowUp
    | Note
    | CloseGoal,
    Field(discriminator="kind"),
]

GOAL_PROPOSAL_ADAPTER: TypeAdapter[GoalProposal] = TypeAdapter(GoalProposal)


def parse_proposal(data: str | bytes | dict[str, Any]) -> GoalProposal:
    """Parse a proposal from JSON text or a dict; malformed input is InvalidArgument."""
    try:
        if isinstance(data, dict):
            return GOAL_PROPOSAL_ADAPTER.validate_python(data)
        return GOAL_PROPOSAL_ADAPTER.validate_json(data)
    except ValidationError as exc:
        raise InvalidArgument(
            "malformed proposal",
            reason="malformed_proposal",
            details={"errors": exc.errors(include_url=False, include_context=False)},
        ) from exc
