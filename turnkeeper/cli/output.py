"""How the CLI prints: Rich for people, ``--json`` for programs, one error format."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from turnkeeper.errors import TurnkeeperError

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console

_CONSOLES: dict[bool, Console] = {}

# A turn id's width ("turn-" and 16 hex digits): a table's turn column is never
# narrower, so the id is read and copied whole, not cut with an ellipsis.
TURN_ID_WIDTH = len("turn-") + 16


def _console(stderr: bool) -> Console:
    # Made, and Rich imported, when something is first printed through Rich rather than
    # with this module: a ``--json`` command prints nothing through it, and importing
    # Rich is ~30 ms of such a command.
    found = _CONSOLES.get(stderr)
    if found is None:
        from rich.console import Console

        # No emoji codes: a title ``:warning:`` is shown as typed, like any other user text.
        found = _CONSOLES[stderr] = Console(stderr=stderr, emoji=False)
    return found


def __getattr__(name: str) -> Console:
    """``console`` (stdout) and ``err_console`` (stderr): one Rich console each per
    process, made on first use (``from turnkeeper.cli.output import console`` makes it)."""
    if name == "console":
        return _console(stderr=False)
    if name == "err_console":
        return _console(stderr=True)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Characters that act on a terminal instead of showing: C0 (escape sequences start with
# ESC), DEL, C1, lone surrogates (undecodable bytes), the line and paragraph separators
# and the bidirectional overrides and isolates, which reorder what follows them.
_ACTS_ON_TERMINAL = re.compile(
    "[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
_ACTS_ON_TERMINAL_BUT_LINES = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(value: object, *, lines: bool = False) -> str:
    """``value`` as text whose control characters show as escapes (ESC as ``\\x1b``)
    instead of acting on the terminal; ``lines`` keeps newlines and tabs."""
    pattern = _ACTS_ON_TERMINAL_BUT_LINES if lines else _ACTS_ON_TERMINAL
    return pattern.sub(_shown, str(value))


def safe(value: object, *, lines: bool = False) -> str:
    """A value that came from a user, an agent or the database, ready to go into Rich
    markup: :func:`visible`, and its own markup (``[bold]``) escaped to print literally."""
    text = visible(value, lines=lines)
    # Most values hold no "[" and no trailing backslash: skipping the regex for them
    # makes this ~4x faster (a thousand-session listing escapes five thousand values).
    if "[" not in text and not text.endswith("\\"):
        return text
    return _escape_markup(text)


# Rich's markup reads "[tag]" as a tag unless backslashes escape it (what its
# ``escape()`` does), and in plain text it turns every other "\\[" into "[" — so a
# backslash before a "[" that starts no tag would be lost. Both cases, in one pass.
_BRACKETS = re.compile(r"(\\*)(\[[a-z#/@][^[]*?\])|(\\+)\[")


def _bracket(match: re.Match[str]) -> str:
    tag = match.group(2)
    if tag is not None:  # a tag's look-alike: escaped as rich.markup.escape does
        return match.group(1) * 2 + "\\" + tag
    return match.group(3) + "\\["  # one more backslash: the one Rich takes away


def _escape_markup(text: str) -> str:
    escaped = _BRACKETS.sub(_bracket, text)
    # Trailing backslashes are read with the tag that follows the value: doubled, they
    # print as themselves and leave that tag a tag.
    bare = escaped.rstrip("\\")
    return bare + "\\" * (2 * (len(escaped) - len(bare)))


def to_jsonable(value: object) -> object:
    """Pydantic models and containers of them, as plain JSON values."""
    # Imported here, not above: a command that prints no model (``--help``, a listing
    # read as plain JSON) need not import pydantic to start.
    from pydantic import BaseModel

    return _jsonable(value, BaseModel)


def _jsonable(value: object, model: type[BaseModel]) -> object:
    # Plain JSON values first: a listing prints thousands of them, and the model check
    # (an ABC's isinstance) is the slow one. The kinds do not overlap, so the order
    # changes no result.
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v, model) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v, model) for v in value]
    if isinstance(value, model):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, model) for k, v in value.items()}
    return value


def print_json(value: object, *, one_line: bool = False, plain: bool = False) -> None:
    # Plain stdout, not Rich: machine output must not be wrapped or coloured.
    # ``one_line`` keeps a stream of JSON lines (``run --json``) parseable line by line.
    # ``plain``: ``value`` is JSON values already (parsed JSON, or :func:`to_jsonable`'s),
    # whose string keys and plain values the conversion would only copy: a thousand
    # sessions' states are ~30 ms of copying.
    data = value if plain else to_jsonable(value)
    text = json.dumps(data, indent=None if one_line else 2, sort_keys=True)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def print_line(text: str, *, stderr: bool = False) -> None:
    """One line of Rich markup that names what people copy — ids, paths, refs,
    commands — printed whole: never broken over lines at the console's width (80 on a
    pipe). A terminal wraps it for the eye; the text itself holds no line break."""
    _console(stderr).print(text, soft_wrap=True)


def print_error(error: TurnkeeperError, *, as_json: bool) -> None:
    if as_json:
        print_json({"error": error.to_dict()})
        return
    print_line(
        f"[bold red]{error.code.value}[/] ({safe(error.reason)}): {safe(error.message)}",
        stderr=True,
    )
    for key, val in error.details.items():
        print_line(f"  [dim]{safe(key)}:[/] {safe(val)}", stderr=True)
