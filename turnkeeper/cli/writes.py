"""How every write command answers: one shape for ``--json``, one word for ``-q``.

``--json`` prints the written object under its kind's name with its ``id`` (and
its goal's ``goal_id``) at the top level, next to the events the write appended
and the stream's new head: ``{"id": ..., "todo": {...}, "goal_id": ...,
"events": [...], "head_seq": ...}``. Names a command printed before stay
(``todo_id``, ``epoch``, ``evidence``...) so scripts written against them go on
working. ``-q`` prints one plain line: the new id (``todo claim``: the epoch),
so a shell can capture it with ``$(...)``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

import typer

from turnkeeper.cli import output
from turnkeeper.cli.output import print_json
from turnkeeper.errors import InvalidArgument

if TYPE_CHECKING:
    from turnkeeper.runtime.services.goals import Submitted

QuietOption = typer.Option(
    False, "--quiet", "-q", help="Print only the new id (nothing else), for $(...) in a shell."
)


def check_output_mode(as_json: bool, quiet: bool) -> None:
    """Refused before anything runs: the two ask for different output."""
    if as_json and quiet:
        raise InvalidArgument(
            "--json and --quiet ask for different output: give one",
            reason="conflicting_options",
            details={"options": ["--json", "--quiet"]},
        )


def written(
    kind: str, obj_id: str, obj: object, done: Submitted, **extra: object
) -> dict[str, object]:
    """The ``--json`` answer of a write (see the module)."""
    return {
        "id": obj_id,
        kind: obj,
        "goal_id": done.state.goal.id,
        "events": done.events,
        "head_seq": done.head_seq,
        **extra,
    }


def report(answer: Mapping[str, object], *, as_json: bool, quiet: bool, message: str) -> None:
    """Print a write's answer: JSON, the bare id, or ``message`` (Rich markup whose
    values went through ``safe``)."""
    if as_json:
        print_json(answer)
    elif quiet:
        say(str(answer["id"]))
    else:
        output.console.print(message)


def say(text: str) -> None:
    """One plain line on stdout: no Rich, so nothing wraps, colours or reads markup."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
