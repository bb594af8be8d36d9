"""The top-level command group, which imports a command's module only when it runs.

Importing every command's module to build the command line cost more than everything
else ``turnkeeper --help`` does. So the group knows its commands by name, with the
module and attribute that define each and the one line its listing shows; a command's
module is imported when that command is parsed, run or completed. The listing's lines
are the commands' own first docstring lines (or their group's ``help``), and
``tests/cli/test_lazy_group.py`` checks each against the real command, so the two
cannot drift.

Only Typer's public classes and the methods a group overrides (``get_command``,
``format_help``) are used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Concatenate, ParamSpec

import typer
from typer.core import TyperCommand, TyperGroup

from turnkeeper.cli.help_text import reflow_help

Loaded = TyperCommand | TyperGroup
P = ParamSpec("P")


@dataclass(frozen=True)
class LazyCommand:
    """Where a command is defined: ``module:attribute``, a Typer app or a function."""

    name: str
    target: str  # "turnkeeper.cli.maintenance:status"
    summary: str  # the line ``--help`` lists it with

    def load(self) -> Loaded:
        module_name, attribute = self.target.split(":")
        found = getattr(importlib.import_module(module_name), attribute)
        command: Loaded
        if isinstance(found, typer.Typer):
            command = typer.main.get_group(found)
        else:  # a function: the one command of an app of its own
            single = typer.Typer(add_completion=False)
            single.command(name=self.name)(found)
            made = typer.main.get_command(single)
            if not isinstance(made, TyperCommand):
                raise TypeError(f"{self.target} is not one command")
            command = made
        command.name = self.name
        reflow_help(command)
        return command

    def listed(self) -> TyperCommand:
        """What the listing reads of the command: its name and its line."""
        return TyperCommand(self.name, help=self.summary, short_help=self.summary)


def _listing_only(
    format_help: Callable[Concatenate[LazyGroup, P], None],
) -> Callable[Concatenate[LazyGroup, P], None]:
    """``format_help`` drawing the group's own help from each command's listed line: it
    reads a command's name and line, nothing that needs its module."""

    def listing(group: LazyGroup, /, *args: P.args, **kwargs: P.kwargs) -> None:
        group.listing = True
        try:
            format_help(group, *args, **kwargs)
        finally:
            group.listing = False

    return listing


class LazyGroup(TyperGroup):
    """A Typer group whose commands come from :attr:`LAZY`, loaded on first use."""

    LAZY: ClassVar[tuple[LazyCommand, ...]] = ()

    def __init__(self, **attrs: object) -> None:
        super().__init__(**attrs)  # type: ignore[arg-type]
        self._entries = {entry.name: entry for entry in self.LAZY}
        self._listed = {entry.name: entry.listed() for entry in self.LAZY}
        self._loaded: dict[str, Loaded] = {}
        # Every name, in order: Typer's ``list_commands`` lists these and it suggests
        # one of them for a typo. A name's value is its real command once loaded.
        self.commands = dict(self._listed)
        self.listing = False

    def loaded(self, name: str) -> bool:
        return name in self._loaded

    def get_command(self, ctx: object, cmd_name: str) -> Loaded | None:
        if cmd_name not in self._entries:
            return None
        if cmd_name in self._loaded:
            return self._loaded[cmd_name]
        if self.listing:
            return self._listed[cmd_name]
        command = self._entries[cmd_name].load()
        self._loaded[cmd_name] = self.commands[cmd_name] = command
        return command

    # Typer's help reads every command through ``get_command``; while it draws, the
    # commands not yet loaded answer with their listed line instead.
    format_help = _listing_only(TyperGroup.format_help)
