"""The runner's wire protocol: JSON lines over a Unix socket.

Every frame is one JSON object on one line. A client's frames are at most
:data:`MAX_FRAME_BYTES` (newline included); a longer one is answered with an
``INVALID_ARGUMENT`` / ``frame_too_large`` error and the connection is closed. The
runner's own frames carry host events and outcomes, which the host's
:class:`~turnkeeper.hosts.base.TurnLimits` bound, so a client reads up to
:data:`MAX_REPLY_BYTES`.

The first frame of a connection is :class:`Auth`; then commands, each answered by
one :class:`Reply`, except ``events``, which takes the connection over: zero or more
``{"event": ...}`` frames and a last ``{"end": true, ...}`` frame.

Commands with an effect (``start_turn``, ``ack``, ``kill``, ``close``) carry a
client-chosen ``command_id``; the journal keeps its digest (:func:`command_digest`) so
a retry with the same bytes gets the stored result and a reuse with other bytes is
refused (``ALREADY_EXISTS`` / ``command_id_reused``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from turnkeeper.errors import ERROR_CLASSES, ErrorCode, InvalidArgument, TurnkeeperError
from turnkeeper.host_reports import HostEvent, ProcessIdentity
from turnkeeper.hosts.base import HostOutcome, HostSpawnFailed, TurnRequest
from turnkeeper.json_types import JsonDict, JsonValue

MAX_FRAME_BYTES = 1024 * 1024
# Runner frames: one host event or outcome (a result may be 1 MiB, a line 8 MiB).
MAX_REPLY_BYTES = 32 * 1024 * 1024

CommandId = Annotated[str, Field(min_length=1, max_length=200)]
TurnId = Annotated[str, Field(pattern=r"^[^\s=\x00]+$", max_length=500)]


class _Frame(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Auth(_Frame):
    op: Literal["auth"] = "auth"
    token: str


class Hello(_Frame):
    op: Literal["hello"] = "hello"


class StartTurn(_Frame):
    op: Literal["start_turn"] = "start_turn"
    command_id: CommandId
    host_kind: str = Field(min_length=1)
    host_config: JsonDict = Field(default_factory=dict)
    request: TurnRequest


class Events(_Frame):
    op: Literal["events"] = "events"
    turn_id: TurnId
    after_seq: int = Field(default=0, ge=0)
    follow: bool = True


class Ack(_Frame):
    op: Literal["ack"] = "ack"
    command_id: CommandId
    turn_id: TurnId
    seq: int = Field(ge=0)


class Kill(_Frame):
    op: Literal["kill"] = "kill"
    command_id: CommandId
    turn_id: TurnId


class Close(_Frame):
    op: Literal["close"] = "close"
    command_id: CommandId
    turn_id: TurnId


class Outcome(_Frame):
    """Wait up to ``timeout`` seconds (None: for ever) for the turn's outcome."""

    op: Literal["outcome"] = "outcome"
    turn_id: TurnId
    timeout: float | None = Field(default=None, ge=0)


Command = Annotated[
    Hello | StartTurn | Events | Ack | Kill | Close | Outcome, Field(discriminator="op")
]
COMMANDS: TypeAdapter[Hello | StartTurn | Events | Ack | Kill | Close | Outcome] = TypeAdapter(
    Command
)
#: The commands the journal records (they change something).
JOURNALED = (StartTurn, Ack, Kill, Close)


class TurnInfo(BaseModel):
    """One turn the runner knows, as ``hello`` reports it."""

    model_config = ConfigDict(frozen=True)

    turn_id: str
    state: Literal["starting", "live", "finished"]
    last_seq: int
    acked_seq: int
    end_reason: str | None = None
    identity: ProcessIdentity | None = None  # None while the host is being started


class RunnerIdentity(BaseModel):
    """The runner process (pid + start time + boot id name it exactly) and its turns."""

    model_config = ConfigDict(frozen=True)

    pid: int
    start_time: int
    boot_id: str
    started_at: float
    journal_bytes: int = 0
    turns: list[TurnInfo] = Field(default_factory=list)


class AckResult(BaseModel):
    """What ``ack`` answers: the turn's acknowledged seq."""

    model_config = ConfigDict(frozen=True)

    turn_id: str
    acked_seq: int


class TurnEnd(BaseModel):
    """A finished turn: the host's outcome and, when the runner ended it, why
    (``runner_backpressure``, ``runner_lost``, ``runner_stopped``)."""

    model_config = ConfigDict(frozen=True)

    outcome: HostOutcome
    end_reason: str | None = None


class EventFrame(BaseModel):
    event: HostEvent


class EndFrame(BaseModel):
    end: Literal[True] = True
    turn_end: TurnEnd | None = None  # None: not finished (a stream without follow)


def canonical(value: JsonValue) -> bytes:
    """The bytes a command is digested as: sorted keys, no spaces."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def command_digest(command: BaseModel) -> str:
    """sha256 of the command's canonical JSON without its ``command_id``."""
    body = command.model_dump(mode="json", exclude={"command_id"})
    return hashlib.sha256(canonical(body)).hexdigest()


def encode(value: BaseModel | JsonDict) -> bytes:
    data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    return canonical(data) + b"\n"


def error_frame(error: TurnkeeperError) -> JsonDict:
    return {"ok": False, "error": error.to_json()}


def ok_frame(result: JsonValue) -> JsonDict:
    return {"ok": True, "result": result}


def raise_error(error: JsonValue) -> NoReturn:
    """Raise the typed error a runner frame carries (a spawn failure as one)."""
    # The runner always sends an object; anything else carries no code to raise by.
    fields = error if isinstance(error, dict) else {}
    message = str(fields.get("message", "runner error"))
    reason = str(fields.get("reason", ""))
    details = fields.get("details") or {}
    if not isinstance(details, dict):
        details = {"details": details}
    if reason == "host_spawn_failed":
        raise HostSpawnFailed(message, details=details)
    try:
        cls = ERROR_CLASSES[ErrorCode(str(fields.get("code", "INTERNAL")))]
    except ValueError:
        cls = TurnkeeperError
    raise cls(message, reason=reason, details=details)


def parse_frame(line: bytes) -> JsonDict:
    """One frame as a JSON object; ``InvalidArgument`` if it is not one."""
    try:
        obj = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidArgument(f"frame is not JSON: {exc}", reason="malformed_frame") from None
    if not isinstance(obj, dict):
        raise InvalidArgument("frame is not a JSON object", reason="malformed_frame")
    return obj
