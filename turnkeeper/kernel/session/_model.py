"""Shared building blocks of the session kernel: the frozen model base and small value types."""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, JsonValue

from turnkeeper.kernel.limits import RecordedId, RecordedText, RecordedTitle

# Identifiers come inside commands (the kernel draws no randomness). They are
# bounded so a forged command cannot bloat the state with a huge id. The bounds are
# the goal kernel's (kernel/limits.py), one maximum per kind of field: a todo title
# the goal kernel accepts always fits the planner's ``RunnableTodo.title``. Only the
# maxima, not the character rules: session events are records, and a stream written
# before those rules (a goal id with a space in it) must still fold.
Id = RecordedId
Text = RecordedText
ShortText = RecordedTitle
JsonDict = dict[str, JsonValue]


def _check_uuid(value: str) -> str:
    try:
        uuid.UUID(value)
    except ValueError as exc:
        raise ValueError("session_id must be a UUID string") from exc
    return value


UuidStr = Annotated[str, AfterValidator(_check_uuid)]


class KernelModel(BaseModel):
    """Immutable, closed-shape model: unknown fields fail closed instead of being dropped."""

    model_config = ConfigDict(frozen=True, extra="forbid")
