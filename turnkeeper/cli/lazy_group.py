"""The top-level command group, which imports a command's module only when it runs.

Importing every command's module to build the command line cost more than everything
else ``turnkeeper --help`` does. So the group knows its commands by name, with the
module and attribute that define each and the one line its listing shows; a command's
module is imported when that command is parsed, run or completed. The listing's lines
are the commands' own first docstring lines (or their group's ``help``), and
``tests/cli/test_lazy_group.py`` checks each against the real command, so the two
cannot drift.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup

from turnkeeper.cli.help_text import reflow_help
from turnkeeper.cli.typer_renderer import import_typer_renderer

if TYPE_CHECKING:
    # Typer carries its own Click (``typer._click``): its classes are what Typer's
    # groups hold and return, so the annotations name them.
    from typer import _click as click


@dataclass(frozen=True)
class LazyCommand:
    """Where a command is defined: ``module:attribute``, a Typer app or a function."""

    name: str
    target: str  # "turnkeeper.cli.maintenance:status"
    summary: str  # the line ``--help`` lists it with

    def load(self) -> click.Command:
        module_name, attribute = self.target.split(":")
        found = getattr(importlib.import_module(module_name), attribute)
        if isinstance(found, typer.Typer):
            command: click.Command = typer.main.get_group(found)
        else:  # a function: the one command of an app of its own
            single = typer.Typer(add_completion=False)
            single.command(name=self.name)(found)
            command = typer.main.get_command(single)
        command.name = self.name
        reflow_help(command)
        return command


class _LoadedOnUse(MutableMapping[str, "click.Command"]):
    """A group's commands by name: every name known, each command loaded when asked for
    (Typer reads ``commands`` directly too, to suggest a name for a typo)."""

    def __init__(self, entries: tuple[LazyCommand, ...]) -> None:
        self._entries = {entry.name: entry for entry in entries}
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            self._loaded[name] = self._entries[name].load()  # KeyError: no such command
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command
        self._entries.setdefault(name, LazyCommand(name, "", command.short_help or ""))

    def __delitem__(self, name: str) -> None:
        del self._entries[name]
        self._loaded.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._entries  # Mapping's own would load the command to find out

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def loaded(self, name: str) -> bool:
        return name in self._loaded

    def summary(self, name: str) -> str:
        return self._entries[name].summary


class LazyGroup(TyperGroup):
    """A Typer group whose commands come from :attr:`LAZY`, loaded on first use."""

    LAZY: ClassVar[tuple[LazyCommand, ...]] = ()

    def __init__(self, **attrs: object) -> None:
        super().__init__(**attrs)  # type: ignore[arg-type]
        self.lazy = _LoadedOnUse(self.LAZY)
        self.commands = self.lazy
        self._listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.lazy)  # the names alone: TyperGroup's own would load every one

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy:
            return None
        if self._listing and not self.lazy.loaded(cmd_name):
            # The help listing reads a command's name and its line, nothing more.
            summary = self.lazy.summary(cmd_name)
            return TyperCommand(cmd_name, help=summary, short_help=summary)
        return self.lazy[cmd_name]

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        import_typer_renderer()  # for a caller of the app itself, not through main()
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False
