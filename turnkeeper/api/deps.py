"""What every route needs: the store, the project root, the caller, typed parameters."""

from __future__ import annotations

from pathlib import Path as FsPath
from typing import Annotated

from fastapi import Header, Path, Request
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from turnkeeper.json_types import JsonDict
from turnkeeper.runtime.services.access import Principal
from turnkeeper.store.base import EventStore

# An id on the wire: what the kernel accepts (1-200 characters, no whitespace or
# control characters), refused as INVALID_ARGUMENT before any store is asked.
ID_PATTERN = r"^[^\s\x00-\x1f\x7f]{1,200}$"
# The same for an id in a body (PostgreSQL refuses a NUL in text: it must never reach
# a lookup).
IdField = Annotated[str, Field(min_length=1, max_length=200, pattern=ID_PATTERN)]
IdPath = Annotated[str, Path(min_length=1, max_length=200, pattern=ID_PATTERN)]
SessionPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=200,
        pattern=ID_PATTERN,
        description="A session id (a unique prefix for the admin; the full id for a share).",
    ),
]
IdempotencyKey = Annotated[
    str,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=200,
        pattern=r"^[ -~]{1,200}$",
        description="The client request id: a retry with the same key joins the operation.",
    ),
]
OptionalIdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=200,
        pattern=r"^[ -~]{1,200}$",
        description="The client request id (default: a new one, returned as request_id).",
    ),
]
# A line of text: no control characters (a NUL can reach neither a path nor the store).
LINE_PATTERN = r"^[^\x00-\x1f\x7f]+$"
Reason = Annotated[str, Field(min_length=1, max_length=2000, pattern=LINE_PATTERN)]


class Body(BaseModel):
    """A request body: unknown fields are refused, not ignored, and every value has the
    JSON type its schema says (strict: ``false`` is no integer 0, ``1`` no boolean)."""

    model_config = ConfigDict(extra="forbid", strict=True)


def store_of(request: Request) -> EventStore:
    store: EventStore = request.app.state.store
    return store


def root_of(request: Request) -> FsPath:
    root: FsPath = request.app.state.root
    return root


def principal_of(request: Request) -> Principal:
    principal: Principal = request.state.principal
    return principal


# A JSON object in a response model. Its schema stays the one ``dict[str, Any]`` gave
# (``{"type": "object", "additionalProperties": true}``), so docs/openapi.json does not
# change; pydantic's own schema for JsonValue would add a ``$ref`` for every value.
JsonObject = Annotated[JsonDict, WithJsonSchema({"type": "object", "additionalProperties": True})]
