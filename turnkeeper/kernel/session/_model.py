"""Shared building blocks of the session kernel: the frozen model base and small value types."""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue

# Identifiers come inside commands (the kernel draws no randomness). They are
# bounded so a forged command cannot bloat the state with a huge id.
Id = Annotated[str, Field(min_length=1, max_length=200)]
Text = Annotated[str, Field(max_length=20_000)]
ShortText = Annotated[str, Field(max_length=2_000)]
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
