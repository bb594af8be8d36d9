"""Shared building blocks of the session kernel: the event base and small value types
(the model base is the one both kernels use, from kernel/model.py)."""

from __future__ import annotations

import uuid
from typing import Annotated, Final, Literal

from pydantic import AfterValidator, AwareDatetime

from turnkeeper.json_types import JsonDict
from turnkeeper.kernel.limits import RecordedId, RecordedText, RecordedTitle

# One base for both kernels' models: frozen, and closed to unknown fields.
from turnkeeper.kernel.model import KernelModel

__all__ = [
    "SESSION_EVENT_SCHEMA_VERSION",
    "Id",
    "JsonDict",
    "KernelModel",
    "SessionEventBase",
    "ShortText",
    "Text",
    "UuidStr",
]

# Identifiers come inside commands (the kernel draws no randomness). They are
# bounded so a forged command cannot bloat the state with a huge id. The bounds are
# the goal kernel's (kernel/limits.py), one maximum per kind of field: a todo title
# the goal kernel accepts always fits the planner's ``RunnableTodo.title``. Only the
# maxima, not the character rules: session events are records, and a stream written
# before those rules (a goal id with a space in it) must still fold.
Id = RecordedId
Text = RecordedText
ShortText = RecordedTitle


def _check_uuid(value: str) -> str:
    try:
        uuid.UUID(value)
    except ValueError as exc:
        raise ValueError("session_id must be a UUID string") from exc
    return value


UuidStr = Annotated[str, AfterValidator(_check_uuid)]


# 2: a host process is journaled as pid, start_time, boot_id and marker (version 1
# wrote ``start_fingerprint: "<boot_id>:<start_time>"``, still read: see
# turnkeeper/host_reports.py). Every session event moved to 2 at once, so code that
# reads only 1 refuses a newer stream by its version instead of failing to decode it.
SESSION_EVENT_SCHEMA_VERSION: Final = 2


class SessionEventBase(KernelModel):
    """What every event of a session stream carries (its operations' events too)."""

    schema_version: Literal[1, 2] = SESSION_EVENT_SCHEMA_VERSION
    at: AwareDatetime
