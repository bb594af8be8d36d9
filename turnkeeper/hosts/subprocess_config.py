"""What a ``subprocess`` host is configured with, and how any host's config is checked.

The configuration model is read by every host built on the subprocess host (the
Python runner, the scripted agent, the Codex CLI and Claude Code hosts) and by the
doctor, which validates a session's config without starting anything; keeping it
apart from the running of the process lets them import the model alone.
docs/agents.md describes each field for someone writing an agent.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from turnkeeper.errors import InvalidArgument
from turnkeeper.hosts.completion import (
    DEFAULT_COMPLETION_RULE,
    DEFAULT_DONE_MARKER,
    CompletionRule,
    DoneMarker,
)
from turnkeeper.hosts.launch import PassedName
from turnkeeper.memo import Memo


class HandleRule(BaseModel):
    """Where in which event the host's session handle appears (``field`` is dotted)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    field: str


class SubprocessHostConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    command: list[str] = Field(min_length=1)
    resume_command: list[str] | None = None
    event_format: Literal["jsonl", "text"] = "text"
    stdin: Literal["null", "instructions", "request"] = "null"
    # In jsonl mode a malformed line fails the turn (error kind protocol) unless tolerated.
    tolerate_malformed: bool = False
    env: dict[str, str] = Field(default_factory=dict)
    # Of the environment ``run`` started in: the core (hosts/launch.py CORE_ENV), plus
    # these names or ``PREFIX*``es; ``inherit_env``: all of it. Never turnkeeper's own
    # credentials.
    pass_env: list[PassedName] = Field(default_factory=list, max_length=256)
    inherit_env: bool = False
    handle_from: list[HandleRule] = Field(
        default_factory=lambda: [HandleRule(kind="session.bound", field="handle")]
    )
    result_kind: str = "result"
    # A turn on a todo that printed no result event: does exit 0 complete it?
    # (hosts/completion.py; a result event always wins.)
    complete_todo: CompletionRule = DEFAULT_COMPLETION_RULE
    done_marker: DoneMarker = DEFAULT_DONE_MARKER
    # After the host exits, end processes still carrying the turn's marker: a turn is
    # bounded, and whatever it left running would otherwise outlive its receipt.
    kill_stragglers: bool = True
    # How long to keep reading output after the host exited (a detached child may
    # hold the pipe open forever).
    drain_seconds: float = Field(default=2.0, ge=0)
    stderr_tail_bytes: int = Field(default=65536, ge=0)
    max_line_bytes: int = Field(default=8 * 1024 * 1024, gt=0)


ConfigT = TypeVar("ConfigT", bound=BaseModel)


def validate_config(model: type[ConfigT], *layers: Mapping[str, object]) -> ConfigT:
    """Merge config layers (later wins) and validate as ``model``; ``InvalidArgument``
    on failure."""
    merged: dict[str, object] = {}
    for layer in layers:
        merged.update(layer)
    try:
        return model.model_validate(merged)
    except ValidationError as exc:
        raise config_error(model, exc) from None


# Problems named in one error message; the rest are counted (all are in details).
_PROBLEMS_SHOWN = 3


def config_error(model: type[BaseModel], exc: ValidationError) -> InvalidArgument:
    """One line a person can act on, naming each field and what is wrong with it,
    instead of pydantic's list. The values given are left out: a config's ``env`` may
    hold a secret. ``details.field`` is the first field at fault, ``details.fields``
    every one."""
    host = _host_name(model)
    errors = exc.errors()
    fields = [_field(e["loc"]) for e in errors]
    sentences = [
        f"`{field}` {_problem(e['type'], e['msg'], host)}"
        for field, e in zip(fields, errors, strict=True)
    ]
    shown = "; ".join(sentences[:_PROBLEMS_SHOWN])
    if len(sentences) > _PROBLEMS_SHOWN:
        shown += f"; and {len(sentences) - _PROBLEMS_SHOWN} more"
    return InvalidArgument(
        f"invalid {host} host config: {shown}",
        reason="invalid_host_config",
        details={"field": fields[0] if fields else "", "fields": fields},
    )


def _host_name(model: type[BaseModel]) -> str:
    """``SubprocessHostConfig`` -> ``subprocess``: the host kind a user typed."""
    name = model.__name__.removesuffix("Config").removesuffix("Host")
    return name.lower() if name else model.__name__


def _field(loc: tuple[int | str, ...]) -> str:
    """A dotted path (``handle_from.0.kind``); the whole config when empty."""
    return ".".join(str(part) for part in loc) or "(config)"


def _problem(kind: str, message: str, host: str) -> str:
    if kind == "missing":
        return f"is required for the {host} host"
    if kind == "extra_forbidden":
        return f"is not a field of the {host} host's config"
    # pydantic's own sentence, its "Input" made the reader's ("should be a valid list").
    return "is invalid: " + message.removeprefix("Input ").removeprefix("Value ")


# Owned by :func:`validated_config`, made at import, one per process; anyone may clear
# it. Validated configs, by model and content: the driver loads a session's host anew
# for every turn, from the same config, and validating it again costs ~16k
# instructions a turn. The key is the content with the type of every value (``1``,
# ``1.0``, ``True`` and ``"1"`` are different keys: validation may tell them apart),
# so an entry is never stale: a changed config is another key, validated afresh. One
# holding anything but plain JSON values (a tuple, a str subclass) is validated every
# time. The models are frozen and nothing changes the lists and dicts they hold.
_validated: Memo[tuple[type[BaseModel], Hashable], BaseModel] = Memo(
    "validated host configs, by model and content",
    max_entries=256,
    invalidation="never while the key holds: the key is the whole content, typed",
)
_SCALARS = (str, int, bool, type(None))


class _NotPlainJsonError(Exception):
    pass


def _content_key(value: object) -> Hashable:
    if type(value) is dict:
        return (dict, tuple((_str_key(k), _content_key(v)) for k, v in value.items()))
    if type(value) is list:
        return (list, tuple(_content_key(v) for v in value))
    if type(value) is float:
        return (float, repr(value))  # -0.0 and 0.0 compare equal; nan never does
    if type(value) in _SCALARS:
        return (type(value), value)
    raise _NotPlainJsonError


def _str_key(key: object) -> str:
    if type(key) is not str:
        raise _NotPlainJsonError
    return key


def validated_config(model: type[ConfigT], config: Mapping[str, object]) -> ConfigT:
    """:func:`validate_config` of one layer, remembered by content (see above)."""
    try:
        key = (model, _content_key(dict(config)))
    except _NotPlainJsonError:
        return validate_config(model, config)
    cached = _validated.get(key)
    if isinstance(cached, model):
        return cached
    fresh = validate_config(model, config)  # a rejected config raises, and is not kept
    _validated.put(key, fresh)
    return fresh
