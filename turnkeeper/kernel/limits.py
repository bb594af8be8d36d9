"""How long, and made of which characters, the text the kernel accepts may be.

One type and one maximum per kind of field, used by every layer from the CLI to the
session planner:

* :data:`Id` — at most :data:`ID_MAX_CHARS` (200, the store's id column) characters,
  no whitespace, no control characters: the id of something new (a goal, a todo, a
  gate...). :data:`IdRef`, an id that names something already recorded, has the same
  maximum but not the character rules, which a record written before them may break
  (a todo id with a space in it must stay reachable); naming nothing is ``NOT_FOUND``;
* :data:`Title` — at most :data:`TITLE_MAX_CHARS` (2,000) characters on one line,
  no control characters (no line or paragraph separator either);
* :data:`Text` — free text of at most :data:`TEXT_MAX_CHARS` (20,000) characters:
  newlines and tabs are allowed, other control characters are not.

None of them accepts a lone surrogate: that is what Python makes of bytes that are not
UTF-8 (argv and file names are decoded with ``surrogateescape``), and such a string
cannot be stored. A value the types refuse is ``INVALID_ARGUMENT`` with a stable
reason (:data:`NOT_UTF8`, :data:`TEXT_TOO_LONG`, :data:`CONTROL_CHARACTERS`,
:data:`INVALID_ID`) and ``details.field`` naming the field (:func:`invalid_argument`).

Emptiness is not the types' business: the decision rules refuse an empty or blank
value with ``empty_text`` (``kernel/_guards.py:require_text``), the same reason
whichever way the value came in.

What the kernel reads back from the log was written under older, looser rules, so
records (events, states, the session kernel's models) are bounded by the same maxima
but not by the character rules: :data:`RecordedId`, :data:`RecordedTitle`,
:data:`RecordedText`. A stream written before these rules still folds.

JSON from a caller is bounded too: at most :data:`JSON_DEPTH_MAX` levels of nesting,
no ``NaN``/``Infinity``, no lone surrogate in a string or a key (:func:`load_json`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Annotated, NoReturn

from pydantic import AfterValidator, Field, JsonValue, ValidationError
from pydantic_core import PydanticCustomError

from turnkeeper.errors import InvalidArgument

# One bound on every recorded id, shared with the records a host makes.
from turnkeeper.host_reports import ID_MAX_CHARS

TITLE_MAX_CHARS = 2_000
TEXT_MAX_CHARS = 20_000
JSON_DEPTH_MAX = 64
# Durations a caller proposes (a monitor's cadence, a freshness window): far beyond any
# real use, and far enough from ``datetime.max`` that adding one to now never overflows.
DURATION_MAX_SECONDS = 10 * 366 * 24 * 3600

NOT_UTF8 = "not_utf8"
TEXT_TOO_LONG = "text_too_long"
CONTROL_CHARACTERS = "control_characters"
INVALID_ID = "invalid_id"
MALFORMED_JSON = "malformed_json"
OUT_OF_RANGE = "out_of_range"

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0, DEL and C1: category Cc. Titles also refuse the Unicode line and paragraph
# separators, which end a line as surely as a newline does.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_TITLE_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_TEXT_FORBIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_WHITESPACE = re.compile(r"\s")


# --- the checks ---------------------------------------------------------------------------


def _refuse(reason: str, message: str) -> PydanticCustomError:
    return PydanticCustomError(reason, message)


def _check_common(value: str, maximum: int) -> None:
    if _SURROGATE.search(value):
        raise _refuse(NOT_UTF8, "is not valid UTF-8 text")
    if len(value) > maximum:
        raise _refuse(
            TEXT_TOO_LONG, f"is too long: {len(value)} characters, at most {maximum} allowed"
        )


def check_id(value: str) -> str:
    """``value`` if it may be an id (see the module docstring), else a refusal."""
    _check_common(value, ID_MAX_CHARS)
    if _CONTROL.search(value):
        raise _refuse(CONTROL_CHARACTERS, "must not contain control characters")
    if _WHITESPACE.search(value):
        raise _refuse(INVALID_ID, "must not contain whitespace")
    return value


def check_id_ref(value: str) -> str:
    """``value`` if it may name a recorded id: UTF-8 and bounded, any characters."""
    _check_common(value, ID_MAX_CHARS)
    return value


def check_title(value: str) -> str:
    """``value`` if it may be a title: one line, no control characters, bounded."""
    _check_common(value, TITLE_MAX_CHARS)
    if _TITLE_FORBIDDEN.search(value):
        raise _refuse(CONTROL_CHARACTERS, "must be one line without control characters")
    return value


def check_text(value: str) -> str:
    """``value`` if it may be free text: newlines and tabs, no other control characters."""
    _check_common(value, TEXT_MAX_CHARS)
    if _TEXT_FORBIDDEN.search(value):
        raise _refuse(CONTROL_CHARACTERS, "must not contain control characters but newline and tab")
    return value


def check_duration(value: int) -> int:
    """Seconds a caller proposes: at most :data:`DURATION_MAX_SECONDS` (positivity is a
    decision rule's, ``non_positive_value``)."""
    if value > DURATION_MAX_SECONDS:
        raise _refuse(OUT_OF_RANGE, f"is out of range: at most {DURATION_MAX_SECONDS} seconds")
    return value


def _walk(
    value: object, path: tuple[str | int, ...] = ()
) -> Iterator[tuple[object, tuple[str | int, ...], int]]:
    """Every value inside ``value`` with its path and depth, without recursing in Python
    (a caller's document may be nested far deeper than the interpreter's stack)."""
    stack: list[tuple[object, tuple[str | int, ...], int]] = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        yield item, where, depth
        if isinstance(item, dict):
            stack.extend((v, (*where, str(k)), depth + 1) for k, v in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((v, (*where, i), depth + 1) for i, v in enumerate(item))


def json_problem(value: object) -> tuple[str, str, tuple[str | int, ...]] | None:
    """Why ``value`` (decoded JSON, or a caller's dict of the same shape) may not come
    in — reason, message, where — or None."""
    for item, where, depth in _walk(value):
        if depth > JSON_DEPTH_MAX:
            # No path: it would be as long as the nesting is deep.
            return MALFORMED_JSON, f"is nested deeper than {JSON_DEPTH_MAX} levels", ()
        if isinstance(item, dict):
            for key in item:
                if isinstance(key, str) and _SURROGATE.search(key):
                    return NOT_UTF8, "has a key that is not valid UTF-8 text", where
        elif isinstance(item, str) and _SURROGATE.search(item):
            return NOT_UTF8, "is not valid UTF-8 text", where
        elif isinstance(item, float) and not math.isfinite(item):
            return MALFORMED_JSON, "is not a finite number", where
    return None


def check_json(value: JsonValue) -> JsonValue:
    found = json_problem(value)
    if found is not None:
        raise _refuse(found[0], found[1])
    return value


def _no_constants(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def load_json(text: str, what: str) -> JsonValue:
    """``text`` decoded as JSON, within the bounds above; else ``INVALID_ARGUMENT``
    (``malformed_json`` or ``not_utf8``) naming ``what`` in ``details.option``."""
    if _SURROGATE.search(text):
        raise InvalidArgument(
            f"{what} is not valid UTF-8 text", reason=NOT_UTF8, details={"option": what}
        )
    try:
        # The decoder makes only JSON values (objects with str keys), and the constants
        # it would make floats of are refused above: a JsonValue, though typed Any.
        value: JsonValue = json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(
            f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            reason=MALFORMED_JSON,
            details={"option": what},
        ) from None
    except (RecursionError, ValueError) as exc:
        # The decoder recurses once per level: a document nested deeper than the stack
        # is refused like any other malformed input (and long before our own bound).
        detail = "it is nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise InvalidArgument(
            f"{what} is not valid JSON: {detail}",
            reason=MALFORMED_JSON,
            details={"option": what},
        ) from None
    found = json_problem(value)
    if found is not None:
        reason, message, where = found
        field = ".".join(str(p) for p in where)
        raise InvalidArgument(
            f"{what} {field} {message}" if field else f"{what} {message}",
            reason=reason,
            details={"option": what, "field": field},
        )
    return value


# --- the types ----------------------------------------------------------------------------

Id = Annotated[str, AfterValidator(check_id)]
IdRef = Annotated[str, AfterValidator(check_id_ref)]
Title = Annotated[str, AfterValidator(check_title)]
Text = Annotated[str, AfterValidator(check_text)]
Duration = Annotated[int, AfterValidator(check_duration)]
Json = Annotated[JsonValue, AfterValidator(check_json)]
JsonObject = Annotated[dict[str, JsonValue], AfterValidator(check_json)]

# What the log already holds: the same maxima, no character rules (see the docstring).
RecordedId = Annotated[str, Field(min_length=1, max_length=ID_MAX_CHARS)]
RecordedTitle = Annotated[str, Field(max_length=TITLE_MAX_CHARS)]
RecordedText = Annotated[str, Field(max_length=TEXT_MAX_CHARS)]


def fit_title(value: str) -> str:
    """A recorded title cut to :data:`TITLE_MAX_CHARS`, marked with an ellipsis when cut."""
    if len(value) <= TITLE_MAX_CHARS:
        return value
    return value[: TITLE_MAX_CHARS - 1] + "…"


# --- refusals -----------------------------------------------------------------------------

# Pydantic's own error types that mean one of ours.
_BUILTIN_REASONS = {
    "string_too_long": TEXT_TOO_LONG,
    "recursion_loop": MALFORMED_JSON,
    "recursion_depth_exceeded": MALFORMED_JSON,
    "json_invalid": MALFORMED_JSON,
}
_REASONS = frozenset(
    {NOT_UTF8, TEXT_TOO_LONG, CONTROL_CHARACTERS, INVALID_ID, MALFORMED_JSON, OUT_OF_RANGE}
)


def invalid_argument(
    exc: ValidationError, what: str, fallback_reason: str, *, skip_loc: int = 0
) -> InvalidArgument:
    """A validation error as ``INVALID_ARGUMENT``: the reason of the first error that is
    one of ours (else ``fallback_reason``), ``details.field`` the dotted path to it (less
    its first ``skip_loc`` parts), and every error listed without its input (which may be
    huge, or unprintable)."""
    errors = [
        (e["type"], ".".join(str(p) for p in e["loc"][skip_loc:]), e["msg"])
        for e in exc.errors(include_url=False, include_context=False, include_input=False)
    ]
    ours = [e for e in errors if _BUILTIN_REASONS.get(e[0], e[0]) in _REASONS]
    chosen = ours[0] if ours else (errors[0] if errors else None)
    if chosen is None:
        return InvalidArgument(f"malformed {what}", reason=fallback_reason)
    kind, field, msg = chosen
    reason = _BUILTIN_REASONS.get(kind, kind)
    ours_chosen = kind in _REASONS  # our messages read on from the field's name
    return InvalidArgument(
        f"{field or what} {msg}" if ours_chosen else f"malformed {what}: {field or what}: {msg}",
        reason=reason if reason in _REASONS else fallback_reason,
        details={
            "field": field,
            "errors": [{"type": t, "field": f, "msg": m} for t, f, m in errors],
        },
    )


# Characters of a command's output kept with its evidence record: its end, which is
# where a failing check says why.
OUTPUT_TAIL_CHARS = 2_000


def output_tail(output: bytes, limit: int = OUTPUT_TAIL_CHARS) -> str:
    """The last ``limit`` characters of a command's output as recordable text: decoded
    leniently, control characters (colour codes, carriage returns) but newline and tab
    dropped, so a record is never refused for what a tool printed."""
    text = output[-4 * limit :].decode("utf-8", errors="replace")
    text = _TEXT_FORBIDDEN.sub("", text.replace("\r\n", "\n"))
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]
