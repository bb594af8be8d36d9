"""Events: the facts a goal's stream is made of.

Events are what the store appends and what :func:`turnkeeper.kernel.evolve`
folds. Each carries a ``type`` discriminator and a ``schema_version`` so a
record can be validated (and one day migrated) without guessing; JSON through
:data:`GOAL_EVENT_ADAPTER` is the only serialisation, never pickle.

Events record what happened, not derived values: a readback event carries the
value read, and the fold works out the no-change streak. That keeps one place
(``evolve``) where derived state is computed.
"""

# Annotations are evaluated as written, with no ``from __future__ import annotations``:
# pydantic would otherwise evaluate each field's annotation from its string (a compile
# each), ~25% of the time this module takes to import.
import typing
from datetime import datetime
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, JsonValue, TypeAdapter

from turnkeeper.kernel.model import (
    Criterion,
    Discharge,
    GateResolution,
    KernelModel,
    NoFollowUp,
    ReplanTrigger,
    VisionCheckpoint,
)


class GoalCreated(KernelModel):
    type: Literal["goal_created"] = "goal_created"
    schema_version: Literal[1] = 1
    goal_id: str
    title: str
    objective: str
    criteria: list[Criterion]
    agents_requiring_vision: list[str]
    at: datetime


class AcceptanceUpdated(KernelModel):
    """The full new criteria list (a material refresh)."""

    type: Literal["acceptance_updated"] = "acceptance_updated"
    schema_version: Literal[1] = 1
    criteria: list[Criterion]
    agents_requiring_vision: list[str]
    at: datetime


class CriterionSatisfied(KernelModel):
    type: Literal["criterion_satisfied"] = "criterion_satisfied"
    schema_version: Literal[1] = 1
    criterion_id: str
    evidence_ids: list[str]
    at: datetime


class VisionCheckpointRecorded(KernelModel):
    type: Literal["vision_checkpoint_recorded"] = "vision_checkpoint_recorded"
    schema_version: Literal[1] = 1
    checkpoint: VisionCheckpoint
    at: datetime


class TodoAdded(KernelModel):
    type: Literal["todo_added"] = "todo_added"
    schema_version: Literal[1] = 1
    todo_id: str
    title: str
    depends_on: list[str]
    required_evidence: list[str]
    successor_required: bool
    successor_of: str | None
    at: datetime


class TodoClaimed(KernelModel):
    type: Literal["todo_claimed"] = "todo_claimed"
    schema_version: Literal[1] = 1
    todo_id: str
    owner: str
    epoch: int
    lease_expires_at: datetime
    # The owner whose expired (or own, older) claim this one replaced, if any.
    taken_over_from: str | None
    at: datetime


class ClaimRenewed(KernelModel):
    type: Literal["claim_renewed"] = "claim_renewed"
    schema_version: Literal[1] = 1
    todo_id: str
    owner: str
    epoch: int
    lease_expires_at: datetime
    at: datetime


class ClaimReleased(KernelModel):
    type: Literal["claim_released"] = "claim_released"
    schema_version: Literal[1] = 1
    todo_id: str
    owner: str
    epoch: int
    at: datetime


class TodoCompleted(KernelModel):
    type: Literal["todo_completed"] = "todo_completed"
    schema_version: Literal[1] = 1
    todo_id: str
    owner: str
    epoch: int
    evidence_ids: list[str]
    at: datetime


class TodoSuperseded(KernelModel):
    type: Literal["todo_superseded"] = "todo_superseded"
    schema_version: Literal[1] = 1
    todo_id: str
    reason: str
    at: datetime


class TodoBlocked(KernelModel):
    type: Literal["todo_blocked"] = "todo_blocked"
    schema_version: Literal[1] = 1
    todo_id: str
    reason: str
    at: datetime


class TodoUnblocked(KernelModel):
    type: Literal["todo_unblocked"] = "todo_unblocked"
    schema_version: Literal[1] = 1
    todo_id: str
    at: datetime


class GateOpened(KernelModel):
    type: Literal["gate_opened"] = "gate_opened"
    schema_version: Literal[1] = 1
    gate_id: str
    title: str
    blocking: bool
    scope: list[str]
    at: datetime


class GateResolved(KernelModel):
    type: Literal["gate_resolved"] = "gate_resolved"
    schema_version: Literal[1] = 1
    gate_id: str
    resolution: GateResolution
    at: datetime


class MonitorAdded(KernelModel):
    type: Literal["monitor_added"] = "monitor_added"
    schema_version: Literal[1] = 1
    monitor_id: str
    target: str
    cadence_seconds: int
    stall_limit: int
    required: bool
    freshness_seconds: int | None
    # A new monitor is due at once: nothing has been observed yet.
    next_due: datetime
    at: datetime


class ReadbackRecorded(KernelModel):
    type: Literal["readback_recorded"] = "readback_recorded"
    schema_version: Literal[1] = 1
    monitor_id: str
    value: JsonValue
    # When the value was observed (may be before ``at``, when it was recorded).
    observed_at: datetime
    at: datetime


class MonitorRetired(KernelModel):
    type: Literal["monitor_retired"] = "monitor_retired"
    schema_version: Literal[1] = 1
    monitor_id: str
    reason: str
    at: datetime


class EvidenceRecorded(KernelModel):
    type: Literal["evidence_recorded"] = "evidence_recorded"
    schema_version: Literal[1] = 1
    evidence_id: str
    key: str
    command: str
    revision: str | None
    exit_code: int
    output_digest: str
    recorded_at: datetime
    freshness_seconds: int
    at: datetime
    # Added later: a record written before has none.
    output_tail: str = ""
    # Added later: the worktree's content (a git tree id) the command ran on.
    tree: str | None = None


class ObligationRaised(KernelModel):
    type: Literal["obligation_raised"] = "obligation_raised"
    schema_version: Literal[1] = 1
    obligation_id: str
    trigger: ReplanTrigger
    subject: str
    fingerprint: str
    detail: str
    at: datetime


class ObligationDischarged(KernelModel):
    type: Literal["obligation_discharged"] = "obligation_discharged"
    schema_version: Literal[1] = 1
    obligation_id: str
    discharge: Discharge
    at: datetime


class NoFollowUpRecorded(KernelModel):
    type: Literal["no_follow_up_recorded"] = "no_follow_up_recorded"
    schema_version: Literal[1] = 1
    record: NoFollowUp
    at: datetime


class NoteRecorded(KernelModel):
    type: Literal["note_recorded"] = "note_recorded"
    schema_version: Literal[1] = 1
    author: str
    text: str
    at: datetime


class GoalClosed(KernelModel):
    type: Literal["goal_closed"] = "goal_closed"
    schema_version: Literal[1] = 1
    closure: NoFollowUp
    at: datetime


GoalEventType = (
    GoalCreated
    | AcceptanceUpdated
    | CriterionSatisfied
    | VisionCheckpointRecorded
    | TodoAdded
    | TodoClaimed
    | ClaimRenewed
    | ClaimReleased
    | TodoCompleted
    | TodoSuperseded
    | TodoBlocked
    | TodoUnblocked
    | GateOpened
    | GateResolved
    | MonitorAdded
    | ReadbackRecorded
    | MonitorRetired
    | EvidenceRecorded
    | ObligationRaised
    | ObligationDischarged
    | NoFollowUpRecorded
    | NoteRecorded
    | GoalClosed
)

GoalEvent = Annotated[GoalEventType, Field(discriminator="type")]

# Built on first use, not at import: a command that only reads goal states (``status``)
# never validates an event, and building the union's validator costs ~30 ms.
GOAL_EVENT_ADAPTER: TypeAdapter[GoalEvent] = TypeAdapter(
    GoalEvent, config=ConfigDict(defer_build=True)
)
GOAL_EVENT_LIST_ADAPTER: TypeAdapter[list[GoalEvent]] = TypeAdapter(
    list[GoalEvent], config=ConfigDict(defer_build=True)
)


def _supported_versions() -> dict[str, frozenset[int]]:
    # Read the Literal annotations so the table cannot drift from the classes.
    table: dict[str, frozenset[int]] = {}
    for cls in typing.get_args(GoalEventType):
        event_type = typing.get_args(cls.model_fields["type"].annotation)[0]
        versions = typing.get_args(cls.model_fields["schema_version"].annotation)
        table[event_type] = frozenset(versions)
    return table


# Event type -> schema versions this code can read.
EVENT_SCHEMA_VERSIONS: dict[str, frozenset[int]] = _supported_versions()
