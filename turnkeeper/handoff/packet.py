"""The handoff packet: what another agent, machine or team needs to carry a goal on.

A packet is a versioned JSON document (``schema_version`` 1, ``kind``
``turnkeeper.handoff``). It names everything by its stable id and holds the goal's
state as the kernel has it — criteria, todos with their lineage, gates, monitors,
evidence as bounded references (never a verifier's output), open replan
obligations and the terminal audit's blockers at handoff time — and, in
``omitted``, what was left out because it is private to the original project
(host session handles, transcripts, host configurations, local paths, claims) and
how someone with access to that project gets it again.

Every model forbids unknown fields, so a packet from a newer turnkeeper fails
loudly instead of losing what this version does not understand.
"""

from __future__ import annotations

import json
from typing import Final, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue, ValidationError

from turnkeeper.errors import InvalidArgument

SCHEMA_VERSION: Final = 1
PACKET_KIND: Final = "turnkeeper.handoff"


class PacketModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GoalPart(PacketModel):
    id: str
    title: str
    objective: str = ""
    status: str
    agents_requiring_vision: list[str] = Field(default_factory=list)


class CriterionPart(PacketModel):
    id: str
    text: str
    met: bool
    # The evidence ids that met it (references into ``evidence``).
    evidence_ids: list[str] = Field(default_factory=list)


class TodoPart(PacketModel):
    id: str
    title: str
    # The status in the original project: open, claimed, done, blocked or superseded.
    status: str
    depends_on: list[str] = Field(default_factory=list)
    required_evidence: list[str] = Field(default_factory=list)
    successor_required: bool = False
    successor_of: str | None = None
    successors: list[str] = Field(default_factory=list)
    blocked_reason: str | None = None
    superseded_reason: str | None = None
    # True when a claim was live at handoff: the claim itself is local and dropped.
    claim_dropped: bool = False
    completed_at: AwareDatetime | None = None
    completed_with: list[str] = Field(default_factory=list)


class GatePart(PacketModel):
    id: str
    title: str
    blocking: bool
    # The todo ids the decision covers; empty: the whole goal.
    scope: list[str] = Field(default_factory=list)
    status: str
    decision: str | None = None
    decided_by: str | None = None
    decided_at: AwareDatetime | None = None
    payload: dict[str, JsonValue] = Field(default_factory=dict)


class MonitorPart(PacketModel):
    id: str
    target: str
    cadence_seconds: int
    stall_limit: int
    required: bool
    freshness_seconds: int | None = None
    next_due: AwareDatetime
    # Whether it was due at handoff time (``next_due`` not after ``made_at``).
    due: bool
    last_readback_at: AwareDatetime | None = None
    last_value: JsonValue = None
    no_change_streak: int = 0
    retired: bool = False
    retired_reason: str | None = None


class EvidencePart(PacketModel):
    """A bounded reference to one evidence record: what ran, on which commit, when,
    with which result digest — never what it printed."""

    id: str
    key: str
    command: str
    revision: str | None = None
    exit_code: int
    output_digest: str = ""
    recorded_at: AwareDatetime
    freshness_seconds: int
    # Fresh at handoff time in the original project; an adopter probes it again.
    fresh: bool


class ObligationPart(PacketModel):
    id: str
    trigger: str
    subject: str
    detail: str
    raised_at: AwareDatetime


class BlockerPart(PacketModel):
    kind: str
    subject: str
    text: str


class Omission(PacketModel):
    """Something private the packet leaves out, and how a holder with access gets it."""

    what: str
    subject: str
    how: str


class HandoffPacket(PacketModel):
    schema_version: Literal[1] = SCHEMA_VERSION
    kind: Literal["turnkeeper.handoff"] = PACKET_KIND
    made_at: AwareDatetime
    # The original project's checked-out commit at handoff time (None outside git).
    source_revision: str | None = None
    goal: GoalPart
    criteria: list[CriterionPart] = Field(default_factory=list)
    todos: list[TodoPart] = Field(default_factory=list)
    gates: list[GatePart] = Field(default_factory=list)
    monitors: list[MonitorPart] = Field(default_factory=list)
    evidence: list[EvidencePart] = Field(default_factory=list)
    obligations: list[ObligationPart] = Field(default_factory=list)
    blockers: list[BlockerPart] = Field(default_factory=list)
    terminal: bool = False
    omitted: list[Omission] = Field(default_factory=list)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


def parse_packet(text: str) -> HandoffPacket:
    """A packet from its JSON text. Text that is not JSON, not an object, not a handoff
    packet or not well formed is ``INVALID_ARGUMENT`` (``packet_malformed``, naming the
    field); another schema version is ``packet_version``."""
    try:
        # Only JSON values come out of the decoder (NaN and Infinity as floats).
        data: JsonValue = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise _malformed(f"the packet is not JSON ({where})") from None
    except RecursionError:
        raise _malformed("the packet is nested too deeply to be a handoff packet") from None
    if not isinstance(data, dict):
        raise _malformed("the packet must be a JSON object")
    if data.get("kind") != PACKET_KIND:
        raise InvalidArgument(
            f"not a handoff packet: kind must be {PACKET_KIND!r}",
            reason="packet_malformed",
            details={"field": "kind"},
        )
    version = data.get("schema_version")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise InvalidArgument(
            f"packet schema_version {version!r} is not supported (this turnkeeper reads "
            f"version {SCHEMA_VERSION})",
            reason="packet_version",
            details={"field": "schema_version", "supported": [SCHEMA_VERSION]},
        )
    try:
        return HandoffPacket.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise InvalidArgument(
            f"the packet's {field or 'document'} is malformed: {first['msg']}",
            reason="packet_malformed",
            details={"field": field},
        ) from None


def _malformed(message: str, field: str = "") -> InvalidArgument:
    return InvalidArgument(message, reason="packet_malformed", details={"field": field})
