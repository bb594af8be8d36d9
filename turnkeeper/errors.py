"""One error taxonomy for the library, the CLI exit codes and the HTTP status codes.

Every failure a caller can see is a :class:`TurnkeeperError` carrying an
:class:`ErrorCode`. Layers raise the subclass that names the code so callers can
catch by kind; the CLI and the HTTP API map the code, never the class.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    # Only for the annotations: the CLI imports this module before it parses its
    # arguments, and json_types brings in pydantic.
    from turnkeeper.json_types import JsonDict, JsonValue


class ErrorCode(StrEnum):
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    ABORTED = "ABORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    UNAVAILABLE = "UNAVAILABLE"
    DATA_LOSS = "DATA_LOSS"
    INTERNAL = "INTERNAL"


# Distinct process exit codes; 1 is left for crashes, 2 for usage errors (Typer/Click).
EXIT_CODES: dict[ErrorCode, int] = {
    ErrorCode.INVALID_ARGUMENT: 3,
    ErrorCode.NOT_FOUND: 4,
    ErrorCode.PERMISSION_DENIED: 5,
    ErrorCode.FAILED_PRECONDITION: 6,
    ErrorCode.ABORTED: 7,
    ErrorCode.ALREADY_EXISTS: 8,
    ErrorCode.UNAVAILABLE: 9,
    ErrorCode.DATA_LOSS: 10,
    ErrorCode.INTERNAL: 1,
}

HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INVALID_ARGUMENT: 400,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.FAILED_PRECONDITION: 412,
    ErrorCode.ABORTED: 409,
    ErrorCode.ALREADY_EXISTS: 422,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.DATA_LOSS: 500,
    ErrorCode.INTERNAL: 500,
}


class ErrorDict(TypedDict):
    """A :class:`TurnkeeperError` as the CLI, the runner and the journal write it."""

    code: str
    reason: str
    message: str
    details: dict[str, object]


class TurnkeeperError(Exception):
    """Base of every typed error. ``reason`` is a stable snake_case word for machines."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(
        self, message: str, *, reason: str = "", details: Mapping[str, object] | None = None
    ):
        super().__init__(message)
        self.message = message
        self.reason = reason or self.code.value.lower()
        # The error's own dict: the store adds to it (``part``, ``commit_outcome``) as the
        # error travels. A value may be a path or a tuple: the CLI and the API make JSON
        # of it when they print it.
        self.details: dict[str, object] = dict(details) if details else {}

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.code]

    def to_dict(self) -> ErrorDict:
        return {
            "code": self.code.value,
            "reason": self.reason,
            "message": self.message,
            "details": self.details,
        }

    def to_json(self) -> JsonDict:
        """:meth:`to_dict` as a JSON object, for a wire or a journal that holds only JSON.

        The same values ``json.dumps`` would write (a tuple as a list); a detail that is
        not JSON fails here as it would fail there.
        """
        return {
            "code": self.code.value,
            "reason": self.reason,
            "message": self.message,
            "details": {key: _as_json(value) for key, value in self.details.items()},
        }


def _json_key(key: object) -> str:
    # The keys ``json.dumps`` accepts, spelt as it spells them.
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool):
        return {None: "null", True: "true", False: "false"}[key]
    if isinstance(key, int | float):
        return json.dumps(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _as_json(value: object) -> JsonValue:
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, dict):
        return {_json_key(k): _as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_as_json(v) for v in value]
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class InvalidArgument(TurnkeeperError):
    code = ErrorCode.INVALID_ARGUMENT


class NotFound(TurnkeeperError):
    code = ErrorCode.NOT_FOUND


class PermissionDenied(TurnkeeperError):
    code = ErrorCode.PERMISSION_DENIED


class FailedPrecondition(TurnkeeperError):
    code = ErrorCode.FAILED_PRECONDITION


class Aborted(TurnkeeperError):
    code = ErrorCode.ABORTED


class AlreadyExists(TurnkeeperError):
    code = ErrorCode.ALREADY_EXISTS


class Unavailable(TurnkeeperError):
    code = ErrorCode.UNAVAILABLE


class DataLoss(TurnkeeperError):
    code = ErrorCode.DATA_LOSS

    @classmethod
    def undecodable_projection(cls, stream_id: str, **details: object) -> DataLoss:
        """A projection row that does not decode, said the same way by every reader
        (through the state model, or parsed as plain JSON by a listing)."""
        return cls(
            f"{stream_id}: projection does not decode (run `turnkeeper repair`)",
            reason="undecodable_projection",
            details={"stream_id": stream_id, **details},
        )


class StreamConflict(Aborted):
    """An append's expected sequence was not the stream head: another writer won.

    Callers that decided on a stale state re-read and decide again.
    """


ERROR_CLASSES: dict[ErrorCode, type[TurnkeeperError]] = {
    ErrorCode.INVALID_ARGUMENT: InvalidArgument,
    ErrorCode.NOT_FOUND: NotFound,
    ErrorCode.PERMISSION_DENIED: PermissionDenied,
    ErrorCode.FAILED_PRECONDITION: FailedPrecondition,
    ErrorCode.ABORTED: Aborted,
    ErrorCode.ALREADY_EXISTS: AlreadyExists,
    ErrorCode.UNAVAILABLE: Unavailable,
    ErrorCode.DATA_LOSS: DataLoss,
    ErrorCode.INTERNAL: TurnkeeperError,
}
