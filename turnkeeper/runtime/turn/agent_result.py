"""The result an agent reports for a turn, as one typed model, validated once at the receipt.

A host's ``result`` (the data of a ``result`` event, a Python callable's return
value) is read here, when the driver turns the host's outcome into the turn's
receipt. A result this model refuses (a wrong type, an unknown proposal kind, a
misspelt field) fails the turn with error kind ``protocol`` and a message naming
the field, before anything is written back; one it accepts goes into the durable
receipt as the agent sent it, and the write-back reads it through this model (see
runtime/turn/writeback.py). docs/agents.md is the contract for agent authors.

Fields turnkeeper acts on are typed strictly (``"true"`` is not a boolean here);
``summary``, ``usage`` and ``host_artifact`` are informational. Any other
top-level key is the agent's own: kept in the receipt, never acted on — except a
key within a letter or two of a field turnkeeper acts on (``todo_don``,
``evidences``), which is refused as the typo it almost certainly is rather than
silently doing nothing. Nested objects allow no unknown keys.

``version`` is the result protocol's version (1, the default): the receipt is
durable, so a later protocol can tell the results written under this one.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from turnkeeper.errors import InvalidArgument, TurnkeeperError
from turnkeeper.kernel import GoalProposal, parse_proposal
from turnkeeper.kernel.limits import check_duration, check_text, check_title

RESULT_VERSION = 1
DEFAULT_FRESHNESS_SECONDS = 3600
# Fields whose value changes what the write-back does: a near miss of one is refused.
ACTING_FIELDS = ("version", "todo_done", "evidence", "proposals", "effects")
INFORMATIONAL_FIELDS = ("summary", "usage", "host_artifact")
# How close an unknown key must be to an acting field to be taken for its typo
# (difflib's ratio: "todo_don" / "todo_done" is 0.94, "files_changed" / "effects" 0.4).
_TYPO_CUTOFF = 0.8
# The errors a refusal lists in its message (the receipt's message is bounded).
_MAX_LISTED_ERRORS = 5

_Title = Annotated[StrictStr, AfterValidator(check_title)]
_Text = Annotated[StrictStr, Field(min_length=1), AfterValidator(check_text)]
_Freshness = Annotated[StrictInt, Field(gt=0), AfterValidator(check_duration)]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EvidenceRequest(_Strict):
    """A check the agent ran and turnkeeper runs again, in the workspace, before it counts."""

    command: _Text
    # The evidence key a todo's ``required_evidence`` names; default: the command's text.
    key: _Title | None = None
    freshness_seconds: _Freshness = DEFAULT_FRESHNESS_SECONDS


class EffectRequest(_Strict):
    """An external effect to apply through a configured provider (runtime/turn/effects.py).
    Which providers exist, and how many effects a turn may ask for, are the effect
    planner's rules: an entry it cannot run is a planned rejection, not a bad result."""

    provider: StrictStr
    request: dict[str, JsonValue] = Field(default_factory=dict)


class HostArtifact(_Strict):
    """The host session file an agent CLI host digested after the turn."""

    path: StrictStr
    sha256: StrictStr
    bytes: StrictInt = Field(ge=0)


class AgentResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")

    version: Literal[1] = 1  # RESULT_VERSION
    summary: StrictStr = ""
    todo_done: StrictBool = False
    evidence: list[EvidenceRequest] = Field(default_factory=list)
    # Any goal kernel proposal, decided in order after the evidence is recorded.
    proposals: list[GoalProposal] = Field(default_factory=list)
    effects: list[EffectRequest] = Field(default_factory=list)
    usage: dict[str, JsonValue] = Field(default_factory=dict)
    host_artifact: HostArtifact | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_typos(cls, data: object) -> object:
        if not isinstance(data, Mapping):
            raise PydanticCustomError("malformed_result", "a result is a JSON object")
        typo = _typo(data)
        if typo is not None:
            raise PydanticCustomError("unknown_field", typo[1])
        return data

    @field_validator("proposals", mode="before")
    @classmethod
    def _kernel_proposals(cls, value: object) -> list[GoalProposal]:
        """Each proposal through the kernel's own parser, so its limits and reasons are
        the same as ``turnkeeper propose``'s."""
        try:
            return _proposals(value)
        except _RefusedError as refused:
            raise PydanticCustomError(refused.reason, refused.message) from None


class _RefusedError(Exception):
    def __init__(self, field: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.field, self.reason, self.message = field, reason, message


def _typo(keys: Iterable[object]) -> tuple[str, str] | None:
    """(key, why) for the first unknown key (of a result's) that is a near miss of an
    acting field."""
    known = (*ACTING_FIELDS, *INFORMATIONAL_FIELDS)
    for key in keys:
        if not isinstance(key, str) or key in known:
            continue
        near = difflib.get_close_matches(key, ACTING_FIELDS, n=1, cutoff=_TYPO_CUTOFF)
        if near:
            return key, f"unknown field {key!r} (did you mean {near[0]!r}?)"
    return None


def _proposals(value: object) -> list[GoalProposal]:
    if not isinstance(value, list):
        raise _RefusedError("proposals", "malformed_result", "must be a list of proposals")
    parsed: list[GoalProposal] = []
    for n, raw in enumerate(value):
        if not isinstance(raw, dict):
            raise _RefusedError(f"proposals.{n}", "malformed_result", "a proposal is an object")
        try:
            parsed.append(parse_proposal(raw))
        except TurnkeeperError as error:
            inner = str(error.details.get("field") or "")
            message = error.message
            if not inner and error.reason == "malformed_proposal":
                # Only the union's tag fails with no field left: the kind is wrong.
                inner, message = "kind", f"unknown or missing proposal kind {raw.get('kind')!r}"
            field = f"proposals.{n}" + (f".{inner}" if inner else "")
            raise _RefusedError(field, error.reason, message) from None
    return parsed


class MalformedResult(InvalidArgument):
    """A result the model refuses; ``details.field`` names the first field it refused."""

    def __init__(self, errors: list[dict[str, str]]) -> None:
        listed = "; ".join(
            f"{e['field']}: {e['msg']}" if e["field"] else e["msg"]
            for e in errors[:_MAX_LISTED_ERRORS]
        )
        more = len(errors) - _MAX_LISTED_ERRORS
        if more > 0:
            listed += f"; and {more} more"
        super().__init__(
            f"malformed turn result: {listed}",
            reason="malformed_result",
            details={"field": errors[0]["field"] if errors else "", "errors": errors},
        )


def parse_result(raw: object) -> AgentResult:
    """The typed result, or :class:`MalformedResult` naming what is wrong. ``raw`` is
    whatever the host reported (a result that is not a JSON object is refused too)."""
    # A typo and a refused proposal are found first, to name their field exactly
    # (inside the model's validation they could only name the result or the list).
    if isinstance(raw, Mapping):
        typo = _typo(raw)
        if typo is not None:
            raise MalformedResult([{"field": typo[0], "type": "unknown_field", "msg": typo[1]}])
        if "proposals" in raw:
            try:
                _proposals(raw["proposals"])
            except _RefusedError as refused:
                error = {"field": refused.field, "type": refused.reason, "msg": refused.message}
                raise MalformedResult([error]) from None
    try:
        return AgentResult.model_validate(raw)
    except ValidationError as exc:
        raise MalformedResult(
            [
                {"field": ".".join(str(p) for p in e["loc"]), "type": e["type"], "msg": e["msg"]}
                for e in exc.errors(include_url=False, include_context=False, include_input=False)
            ]
        ) from None
