"""Proposals: what a caller asks the kernel to do to a goal.

A proposal is a request, not a fact. :func:`turnkeeper.kernel.decide` either
turns it into events or raises a typed error. Proposal models check types and the
limits of :mod:`turnkeeper.kernel.limits` (how long a field may be, which characters
it may hold); the other values (empty text, negative cadence, unknown ids, ...) are
checked by ``decide``. Either way a rejection carries a stable ``reason`` from
:mod:`turnkeeper.errors` (a limit's through :func:`parse_proposal` or
:func:`checked_input`).

Ids of new entities come in the proposal: the shell generates them, the kernel
has no randomness. Proposals that may carry an observable replan delta have a
``discharges`` list of obligation ids.
"""

# Annotations are evaluated as written, with no ``from __future__ import annotations``:
# pydantic would otherwise evaluate each field's annotation from its string (a compile
# each), ~25% of the time this module takes to import.
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from turnkeeper.errors import InvalidArgument
from turnkeeper.json_types import JsonValue
from turnkeeper.kernel.limits import (
    Duration,
    Id,
    IdRef,
    Json,
    JsonObject,
    Text,
    Title,
    invalid_argument,
    json_problem,
    load_json,
)
from turnkeeper.kernel.model import KernelModel, NoFollowUpReason, VisionStatus


class CriterionSpec(KernelModel):
    id: Id
    text: Text


class TodoSpec(KernelModel):
    """A new todo's definition, used by :class:`AddTodo` and as a successor."""

    todo_id: Id
    title: Title
    depends_on: list[IdRef] = Field(default_factory=list)
    # Evidence keys: a key defaults to its command's text, so a key is a title, not an id.
    required_evidence: list[Title] = Field(default_factory=list)
    successor_required: bool = False


class Fence(KernelModel):
    """The claim a proposal acts under: a mismatch means the caller's claim is stale."""

    owner: IdRef
    epoch: int


# --- goal and acceptance ------------------------------------------------------


class CreateGoal(KernelModel):
    kind: Literal["create_goal"] = "create_goal"
    goal_id: Id
    title: Title
    objective: Text = ""
    criteria: list[CriterionSpec] = Field(default_factory=list)
    agents_requiring_vision: list[Id] = Field(default_factory=list)


class UpdateAcceptance(KernelModel):
    """Add criteria, or replace the whole list. Either way a material refresh."""

    kind: Literal["update_acceptance"] = "update_acceptance"
    mode: Literal["add", "replace"] = "add"
    criteria: list[CriterionSpec]
    # None keeps the current list of agents that must keep a vision checkpoint.
    agents_requiring_vision: list[Id] | None = None
    discharges: list[IdRef] = Field(default_factory=list)


class SatisfyCriterion(KernelModel):
    kind: Literal["satisfy_criterion"] = "satisfy_criterion"
    criterion_id: IdRef
    evidence_ids: list[IdRef]
    current_revision: Id | None = None


class RecordVisionCheckpoint(KernelModel):
    kind: Literal["record_vision_checkpoint"] = "record_vision_checkpoint"
    agent: IdRef
    status: VisionStatus
    reason: Text = ""
    vision_text: Text | None = None
    discharges: list[IdRef] = Field(default_factory=list)


# --- todos --------------------------------------------------------------------


class AddTodo(KernelModel):
    kind: Literal["add_todo"] = "add_todo"
    todo: TodoSpec
    # Makes the new todo a successor of this one (links both ways).
    successor_of: IdRef | None = None
    discharges: list[IdRef] = Field(default_factory=list)


class ClaimTodo(KernelModel):
    kind: Literal["claim_todo"] = "claim_todo"
    todo_id: IdRef
    owner: Id
    lease_expires_at: datetime


class RenewClaim(KernelModel):
    kind: Literal["renew_claim"] = "renew_claim"
    todo_id: IdRef
    fence: Fence
    lease_expires_at: datetime


class ReleaseClaim(KernelModel):
    kind: Literal["release_claim"] = "release_claim"
    todo_id: IdRef
    fence: Fence


class CompleteTodo(KernelModel):
    kind: Literal["complete_todo"] = "complete_todo"
    todo_id: IdRef
    fence: Fence
    evidence_ids: list[IdRef] = Field(default_factory=list)
    # When given, every evidence record used must have run on this revision.
    current_revision: Id | None = None


class SupersedeTodo(KernelModel):
    kind: Literal["supersede_todo"] = "supersede_todo"
    todo_id: IdRef
    reason: Text
    # Required only when the todo is claimed.
    fence: Fence | None = None
    successor: TodoSpec | None = None
    discharges: list[IdRef] = Field(default_factory=list)


class BlockTodo(KernelModel):
    kind: Literal["block_todo"] = "block_todo"
    todo_id: IdRef
    reason: Text
    # Required only when the todo is claimed: only the holder may block it.
    fence: Fence | None = None


class UnblockTodo(KernelModel):
    kind: Literal["unblock_todo"] = "unblock_todo"
    todo_id: IdRef


# --- gates, monitors, evidence ------------------------------------------------


class OpenGate(KernelModel):
    kind: Literal["open_gate"] = "open_gate"
    gate_id: Id
    title: Title
    blocking: bool = True
    scope: list[IdRef] = Field(default_factory=list)


class ResolveGate(KernelModel):
    kind: Literal["resolve_gate"] = "resolve_gate"
    gate_id: IdRef
    by: Title
    decision: Title
    payload: JsonObject = Field(default_factory=dict)


class AddMonitor(KernelModel):
    kind: Literal["add_monitor"] = "add_monitor"
    monitor_id: Id
    target: Title
    cadence_seconds: Duration
    stall_limit: int = 3
    required: bool = False
    # Required when ``required``: how old the last readback may be at closure.
    freshness_seconds: Duration | None = None


class RecordReadback(KernelModel):
    kind: Literal["record_readback"] = "record_readback"
    monitor_id: IdRef
    value: Json
    # When the provider observed the value; defaults to ``now``.
    at: datetime | None = None


class RetireMonitor(KernelModel):
    kind: Literal["retire_monitor"] = "retire_monitor"
    monitor_id: IdRef
    reason: Text


class RecordEvidence(KernelModel):
    kind: Literal["record_evidence"] = "record_evidence"
    evidence_id: Id
    command: Text
    # Defaults to the command text.
    key: Title | None = None
    revision: Id | None = None
    # The worktree's content the command ran on (a git tree id): with uncommitted
    # work, ``revision`` (HEAD) alone cannot tell two states of the work apart.
    tree: Id | None = None
    exit_code: int
    output_digest: Id = ""
    # The end of the command's output (what says why it failed), bounded by the caller.
    output_tail: Text = ""
    # When the command ran; defaults to ``now``.
    recorded_at: datetime | None = None
    freshness_seconds: Duration


# --- replan and closure -------------------------------------------------------


class Reassess(KernelModel):
    """Re-check the time-based replan triggers (stale evidence) at ``now``."""

    kind: Literal["reassess"] = "reassess"


class ReportNoProgress(KernelModel):
    """A session made no progress for ``turns`` turns in a row: raise a replan
    obligation for it (rounds that only look busy must lead to a replan).

    ``fingerprint`` names the streak (its first idle turn), so a report repeated for
    the same streak raises nothing, and a new streak raises a new obligation."""

    kind: Literal["report_no_progress"] = "report_no_progress"
    session_id: Id
    fingerprint: Id
    turns: int


class RecordNoFollowUp(KernelModel):
    kind: Literal["record_no_follow_up"] = "record_no_follow_up"
    reason: NoFollowUpReason
    summary: Text
    discharges: list[IdRef]


class Note(KernelModel):
    """Free text for the record. Never an observable delta: it cannot discharge."""

    kind: Literal["note"] = "note"
    author: Title
    text: Text
    # Accepted only to reject it with ``replan_requires_delta`` when non-empty.
    discharges: list[IdRef] = Field(default_factory=list)


class CloseGoal(KernelModel):
    kind: Literal["close_goal"] = "close_goal"
    reason: NoFollowUpReason
    summary: Text


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
    | ReportNoProgress
    | RecordNoFollowUp
    | Note
    | CloseGoal,
    Field(discriminator="kind"),
]

# Built on first use: only a command that submits a proposal validates one.
GOAL_PROPOSAL_ADAPTER: TypeAdapter[GoalProposal] = TypeAdapter(
    GoalProposal, config=ConfigDict(defer_build=True)
)


def parse_proposal(
    data: str | bytes | JsonValue | Mapping[str, object],
) -> GoalProposal:
    """Parse a proposal from JSON text (``str`` or ``bytes``) or a decoded value (a dict;
    anything else is refused); malformed input is ``INVALID_ARGUMENT``:
    ``malformed_json`` for text that is not JSON within the limits, a limit's own reason
    (``not_utf8``, ``text_too_long``, ``control_characters``, ``invalid_id``,
    ``out_of_range``) with ``details.field`` for a field it refuses, else
    ``malformed_proposal``."""
    if isinstance(data, bytes):
        try:
            data = data.decode()
        except UnicodeDecodeError:
            raise InvalidArgument(
                "the proposal is not valid UTF-8 text", reason="not_utf8", details={"field": ""}
            ) from None
    if isinstance(data, str):
        data = load_json(data, "proposal")
    else:
        found = json_problem(data)
        if found is not None:
            reason, message, where = found
            field = ".".join(str(p) for p in where)
            raise InvalidArgument(
                f"{field or 'the proposal'} {message}",
                reason=reason,
                details={"field": field},
            )
    try:
        return GOAL_PROPOSAL_ADAPTER.validate_python(data)
    except ValidationError as exc:
        # The first element of every location is the union's tag (the proposal kind).
        raise invalid_argument(exc, "proposal", "malformed_proposal", skip_loc=1) from None


@contextmanager
def checked_input() -> Iterator[None]:
    """Build proposals from a caller's values inside this block: a field the limits
    refuse is ``INVALID_ARGUMENT`` with the same reason and ``details.field`` as from
    :func:`parse_proposal`, never a bare validation error."""
    try:
        yield
    except ValidationError as exc:
        raise invalid_argument(exc, "proposal", "malformed_proposal") from None
