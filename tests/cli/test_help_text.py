"""A command's --help prints each paragraph of its docstring as one flowing text."""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING

from tests.usage.project import turnkeeper_executable
from turnkeeper.cli.help_text import reflow

if TYPE_CHECKING:
    from typer._click.core import Command

TIMEOUT = 120.0


def test_a_paragraph_over_several_lines_becomes_one() -> None:
    text = """First line.

    A sentence that runs
    over two lines.

    \b
        turnkeeper run
        turnkeeper status

    - a list item
    - another
    """
    assert reflow(text).split("\n\n") == [
        "First line.",
        "A sentence that runs over two lines.",
        "\b\n    turnkeeper run\n    turnkeeper status",  # an example: kept as written
        "- a list item\n- another",  # a list: kept as written
    ]


def test_serve_help_is_not_broken_mid_sentence() -> None:
    env = {**os.environ, "COLUMNS": "200"}
    shown = subprocess.run(
        [*turnkeeper_executable(), "serve", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
        check=True,
    ).stdout
    # The docstring breaks this sentence after "read"; on a wide terminal it is one line.
    assert "the admin token printed at start (or read from --token-file), or a share" in shown
    assert "turnkeeper serve --port 8765" in shown  # the example still on a line of its own


def _commands() -> list[tuple[str, Command]]:
    """Every command of the real app, by its full name (the lazy groups loaded)."""
    import typer
    from typer._click.core import Context
    from typer.core import TyperGroup

    from turnkeeper.cli.main import app

    found: list[tuple[str, Command]] = []

    def walk(command: Command, path: list[str]) -> None:
        if isinstance(command, TyperGroup):  # the lazy group is one too
            ctx = Context(command)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, name
                walk(sub, [*path, name])
        else:
            found.append((" ".join(path), command))

    walk(typer.main.get_command(app), [])
    return found


def test_every_argument_is_named_for_the_user_and_explained() -> None:
    """A usage line and a missing-argument error show a positional argument's metavar:
    GOAL, SESSION, TURN ..., never a parameter's Python name, and its help says what to
    give."""
    arguments = 0
    for name, command in _commands():
        for param in command.params:
            if param.param_type_name != "argument":
                continue
            arguments += 1
            assert param.metavar and param.metavar == param.metavar.upper(), (name, param.name)
            assert getattr(param, "help", None), (name, param.metavar)  # Typer's arguments
    assert arguments >= 40  # the walk reached every command group
