"""What an agent's tool calls are, as journaled records, and how they join its turn's result.

Every well-formed call of a proposing tool (all but ``brief`` and ``goal``) is one
:data:`ToolCall` line in its turn's ``calls.jsonl`` (tools/channel.py): the call's
arguments as the server resolved them (a generated id, the evidence a criterion names)
and what the server observed (an evidence command's exit code and output). Nothing in
the goal changes when a call is made: at the end of the turn :func:`merge_calls` adds
the calls to the result the host reported, in call order, and the write-back decides
that result as it decides any other (runtime/turn/writeback.py). So a crash mid-turn
never applies half a turn's calls, and recovery needs no case of its own.

The records are versioned (``version``) and discriminated by ``tool``; a line a later
version wrote is refused, never read as something else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter

from turnkeeper.brief import clip
from turnkeeper.json_types import JsonDict, JsonList
from turnkeeper.kernel.model import NoFollowUpReason, VisionStatus
from turnkeeper.kernel.proposals import (
    AddTodo,
    CriterionSpec,
    GoalProposal,
    OpenGate,
    RecordNoFollowUp,
    RecordVisionCheckpoint,
    SatisfyCriterion,
    TodoSpec,
    UpdateAcceptance,
    checked_input,
)

CALL_VERSION: Final = 1

#: Every tool the server offers, as the agent calls it (``ToolServer.names``).
TOOL_NAMES: Final = (
    "brief",
    "goal",
    "record_evidence",
    "todo_done",
    "add_todo",
    "update_acceptance",
    "no_follow_up",
    "vision_checkpoint",
    "meet_criterion",
    "open_gate",
    "request_effect",
)


def evidence_id(turn_id: str, n: int) -> str:
    """The id the ``n``-th evidence item of a turn's result is recorded under (from 0).

    The one formula: the write-back records items under it, and the tools resolve the
    evidence a ``meet_criterion`` call names with it."""
    return f"ev-{turn_id}-{n}"


class _Call(BaseModel):
    # ``defer_build``: validators are built on first use, not when the write-back's
    # module is imported (as the kernel's models are).
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    version: Literal[1] = CALL_VERSION
    # The call's number in its turn's journal, from 0 (a generated id carries it).
    seq: int = Field(ge=0)
    # When the call was journaled.
    at: datetime

    def describe(self) -> str:
        """The call in one line, for people and for the brief of the turn after a lost
        one (what that turn had done)."""
        raise NotImplementedError


class RecordEvidenceCall(_Call):
    tool: Literal["record_evidence"] = "record_evidence"
    command: str
    key: str | None = None
    freshness_seconds: int
    # What the server saw when it ran the command (the write-back runs it again).
    exit_code: int
    output_tail: str = ""
    output_digest: str = ""
    timed_out: bool = False
    ran_at: datetime

    @property
    def evidence_key(self) -> str:
        """The key the record is filed under: the command's text when none was given."""
        return self.key or self.command

    def describe(self) -> str:
        key = f" (key {clip(self.key)})" if self.key else ""
        ended = "timed out" if self.timed_out else f"exit {self.exit_code}"
        return f"record_evidence `{clip(self.command)}`{key}: {ended}"


class TodoDoneCall(_Call):
    tool: Literal["todo_done"] = "todo_done"
    summary: str = ""

    def describe(self) -> str:
        return "todo_done" + (f": {clip(self.summary)}" if self.summary else "")


class AddTodoCall(_Call):
    tool: Literal["add_todo"] = "add_todo"
    todo_id: str
    title: str
    depends_on: list[str] = Field(default_factory=list)
    required_evidence: list[str] = Field(default_factory=list)
    successor_of: str | None = None
    discharges: list[str] = Field(default_factory=list)

    def describe(self) -> str:
        return f"add_todo {self.todo_id}: {clip(self.title)}"


class CriterionArg(BaseModel):
    """One acceptance criterion as a tool takes it."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    id: str
    text: str


class UpdateAcceptanceCall(_Call):
    tool: Literal["update_acceptance"] = "update_acceptance"
    criteria: list[CriterionArg]
    mode: Literal["add", "replace"] = "add"
    discharges: list[str] = Field(default_factory=list)

    def describe(self) -> str:
        return f"update_acceptance ({self.mode}): " + ", ".join(c.id for c in self.criteria)


class NoFollowUpCall(_Call):
    tool: Literal["no_follow_up"] = "no_follow_up"
    reason: NoFollowUpReason
    summary: str
    discharges: list[str] = Field(default_factory=list)

    def describe(self) -> str:
        return f"no_follow_up {self.reason.value}: {clip(self.summary)}"


class VisionCheckpointCall(_Call):
    tool: Literal["vision_checkpoint"] = "vision_checkpoint"
    # Resolved at call time when the agent named none (the one the goal requires).
    agent: str
    status: VisionStatus
    reason: str = ""
    vision_text: str | None = None
    discharges: list[str] = Field(default_factory=list)

    def describe(self) -> str:
        return f"vision_checkpoint {self.agent}: {self.status.value}"


class MeetCriterionCall(_Call):
    tool: Literal["meet_criterion"] = "meet_criterion"
    criterion_id: str
    evidence_key: str
    # The goal's latest evidence with that key when the call was made, for when the
    # turn itself records none under the key (its own record wins: see merge_calls).
    resolved_evidence_id: str | None = None

    def describe(self) -> str:
        return f"meet_criterion {self.criterion_id} with evidence `{clip(self.evidence_key)}`"


class OpenGateCall(_Call):
    tool: Literal["open_gate"] = "open_gate"
    gate_id: str
    title: str
    blocking: bool = True
    scope: list[str] = Field(default_factory=list)

    def describe(self) -> str:
        return f"open_gate {self.gate_id}: {clip(self.title)}"


class RequestEffectCall(_Call):
    tool: Literal["request_effect"] = "request_effect"
    provider: str
    request: dict[str, JsonValue] = Field(default_factory=dict)

    def describe(self) -> str:
        return f"request_effect through {self.provider}"


ToolCall = Annotated[
    RecordEvidenceCall
    | TodoDoneCall
    | AddTodoCall
    | UpdateAcceptanceCall
    | NoFollowUpCall
    | VisionCheckpointCall
    | MeetCriterionCall
    | OpenGateCall
    | RequestEffectCall,
    Field(discriminator="tool"),
]
TOOL_CALL_ADAPTER: TypeAdapter[ToolCall] = TypeAdapter(
    ToolCall, config=ConfigDict(defer_build=True)
)

# The calls that become a kernel proposal (the others: evidence, todo_done, effects).
ProposalCall = (
    AddTodoCall
    | UpdateAcceptanceCall
    | NoFollowUpCall
    | VisionCheckpointCall
    | MeetCriterionCall
    | OpenGateCall
)


def proposal_of(call: ProposalCall, resolve: Callable[[str], str | None]) -> GoalProposal:
    """The kernel proposal ``call`` makes. ``resolve(key)`` is the id of the turn's own
    latest evidence with that key, if it has one; a value the kernel's limits refuse is
    ``INVALID_ARGUMENT`` (``checked_input``)."""
    with checked_input():
        match call:
            case AddTodoCall():
                return AddTodo(
                    todo=TodoSpec(
                        todo_id=call.todo_id,
                        title=call.title,
                        depends_on=call.depends_on,
                        required_evidence=call.required_evidence,
                    ),
                    successor_of=call.successor_of,
                    discharges=call.discharges,
                )
            case UpdateAcceptanceCall():
                return UpdateAcceptance(
                    mode=call.mode,
                    criteria=[CriterionSpec(id=c.id, text=c.text) for c in call.criteria],
                    discharges=call.discharges,
                )
            case NoFollowUpCall():
                return RecordNoFollowUp(
                    reason=call.reason, summary=call.summary, discharges=call.discharges
                )
            case VisionCheckpointCall():
                return RecordVisionCheckpoint(
                    agent=call.agent,
                    status=call.status,
                    reason=call.reason,
                    vision_text=call.vision_text,
                    discharges=call.discharges,
                )
            case MeetCriterionCall():
                found = resolve(call.evidence_key) or call.resolved_evidence_id
                # No evidence at all: the kernel refuses it (evidence_missing), and that
                # refusal is what the next turn's brief names.
                return SatisfyCriterion(
                    criterion_id=call.criterion_id, evidence_ids=[found] if found else []
                )
            case OpenGateCall():
                return OpenGate(
                    gate_id=call.gate_id, title=call.title, blocking=call.blocking, scope=call.scope
                )


def evidence_item(call: RecordEvidenceCall) -> JsonDict:
    """The call as an evidence item of a result (``AgentResult.evidence``)."""
    item: JsonDict = {"command": call.command, "freshness_seconds": call.freshness_seconds}
    if call.key is not None:
        item["key"] = call.key
    return item


def _item_key(item: JsonValue) -> str | None:
    """The key of one of the host's own evidence items (its command's text by default)."""
    if not isinstance(item, dict):
        return None
    key, command = item.get("key"), item.get("command")
    if isinstance(key, str) and key:
        return key
    return command if isinstance(command, str) else None


def _list(result: Mapping[str, JsonValue], field: str) -> JsonList | None:
    """``result[field]`` as a list to extend, or None when the host sent something else
    there (left as it is: the result's parser refuses it, naming the field)."""
    value = result.get(field, [])
    return list(value) if isinstance(value, list) else None


def merge_calls(result: JsonDict, calls: Sequence[ToolCall], turn_id: str) -> JsonDict:
    """The turn's result (as the host reported it) with ``calls`` added in call order.

    Evidence items go after the host's own, so the n-th item overall is recorded as
    ``evidence_id(turn_id, n)``; proposals go after the host's own; effects likewise;
    ``todo_done`` is true if the host or any call said so; a ``todo_done`` call's
    summary fills an empty ``summary``. A ``meet_criterion`` call names an evidence
    key: it is met with the id of the turn's latest item with that key (the host's
    own included), else with the goal's evidence the server found when it was called.
    ``result`` is not changed; a field the host filled with something other than a
    list is left as it is, for the result's parser to refuse.
    """
    merged: JsonDict = dict(result)
    evidence = _list(result, "evidence")
    proposals = _list(result, "proposals")
    effects = _list(result, "effects")
    latest: dict[str, str] = {}
    if evidence is not None:
        for n, item in enumerate(evidence):
            key = _item_key(item)
            if key is not None:
                latest[key] = evidence_id(turn_id, n)
        for call in calls:
            if isinstance(call, RecordEvidenceCall):
                latest[call.evidence_key] = evidence_id(turn_id, len(evidence))
                evidence.append(evidence_item(call))
        merged["evidence"] = evidence
    summaries: list[str] = []
    for call in calls:
        match call:
            case RecordEvidenceCall():
                pass  # added above, before any proposal can name it
            case TodoDoneCall():
                merged["todo_done"] = True
                if call.summary:
                    summaries.append(call.summary)
            case RequestEffectCall():
                if effects is not None:
                    effects.append({"provider": call.provider, "request": call.request})
            case _:
                if proposals is not None:
                    proposals.append(proposal_of(call, latest.get).model_dump(mode="json"))
    if proposals is not None:
        merged["proposals"] = proposals
    if effects is not None:
        merged["effects"] = effects
    if summaries and not merged.get("summary"):
        merged["summary"] = summaries[-1]
    # Lists left empty are not written back into a result that did not have them.
    return {k: v for k, v in merged.items() if k in result or v not in ([], None)}
