"""Commands' help as their docstrings mean it: a paragraph is one flowing text.

Typer prints the paragraphs after a command's first exactly as the docstring breaks
them, and then wraps them to the terminal too, so a sentence that runs over two source
lines comes out broken mid-line. Each paragraph's lines are joined here, once, when a
command is loaded; a paragraph that starts with ``\\b`` (an example, kept verbatim) or
is a list is left as written.
"""

from __future__ import annotations

import inspect
from typing import Protocol

from typer.core import TyperGroup

_LIST_MARKS = ("- ", "* ")


def _reflowed(paragraph: str) -> str:
    lines = paragraph.split("\n")
    if lines[0].startswith("\b") or any(line.lstrip().startswith(_LIST_MARKS) for line in lines):
        return paragraph
    return " ".join(line.strip() for line in lines)


def reflow(text: str) -> str:
    """``text`` (a docstring) with each plain paragraph on one line."""
    return "\n\n".join(_reflowed(p) for p in inspect.cleandoc(text).split("\n\n"))


class _Documented(Protocol):
    help: str | None


def reflow_help(command: _Documented) -> None:
    """Reflow the help of ``command`` and, for a group, of every command under it."""
    if command.help:
        command.help = reflow(command.help)
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            reflow_help(sub)
