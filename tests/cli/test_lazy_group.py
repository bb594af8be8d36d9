"""The top-level group lists every command without importing it, and runs the real one.

``turnkeeper --help`` reads each command's line from cli/main.py's table; these tests
hold that table to the commands themselves, so a changed docstring or a new command
cannot leave ``--help`` saying something else.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import typer.main
from typer.core import TyperGroup
from typer.testing import CliRunner

from tests.usage.project import turnkeeper_executable
from turnkeeper.cli.lazy_group import LazyGroup
from turnkeeper.cli.main import Commands, app

TIMEOUT = 120.0


def _group() -> LazyGroup:
    group = typer.main.get_command(app)
    assert isinstance(group, Commands)
    return group


def _first_paragraph(text: str) -> str:
    return " ".join(text.split("\n\n", maxsplit=1)[0].split())


def test_every_line_is_its_commands_own_first_paragraph() -> None:
    for entry in Commands.LAZY:
        command = entry.load()
        assert command.name == entry.name
        own = command.short_help or command.help or ""
        assert entry.summary == _first_paragraph(own), entry.name


def test_every_sub_command_lists_its_first_paragraph_on_one_line() -> None:
    # A group's listing prints a command's first paragraph as written: a docstring whose
    # first sentence runs over two source lines shows up broken mid-sentence there.
    for entry in Commands.LAZY:
        group = entry.load()
        if not isinstance(group, TyperGroup):
            continue
        for name, command in group.commands.items():
            own = command.short_help or command.help or ""
            first = own.split("\n\n", maxsplit=1)[0].strip()
            assert "\n" not in first, f"{entry.name} {name}: {first!r}"


def test_the_names_are_unique_and_listed_in_order() -> None:
    names = [entry.name for entry in Commands.LAZY]
    assert len(names) == len(set(names))
    assert _group().list_commands(typer.Context(_group())) == names


def test_a_command_loads_only_when_asked_for() -> None:
    group = _group()
    ctx = typer.Context(group)
    assert not any(group.loaded(e.name) for e in Commands.LAZY)
    assert "status" in group.commands  # asking whether it exists loads nothing
    assert not group.loaded("status")
    status = group.get_command(ctx, "status")
    assert status is not None and status.callback is not None
    assert status.callback.__module__ == "turnkeeper.cli.maintenance"
    assert [e.name for e in Commands.LAZY if group.loaded(e.name)] == ["status"]
    assert group.get_command(ctx, "no-such-command") is None


def _turnkeeper(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*turnkeeper_executable(), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


def test_help_lists_every_command_with_its_line(tmp_path: Path) -> None:
    done = _turnkeeper("--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for entry in Commands.LAZY:
        row = next(line for line in done.stdout.splitlines() if f"│ {entry.name} " in line)
        assert entry.summary[:60] in row, (entry.name, row)


def test_a_typo_is_refused_with_the_name_it_resembles(tmp_path: Path) -> None:
    done = _turnkeeper("stauts", cwd=tmp_path)
    assert done.returncode == 2
    assert "No such command 'stauts'. Did you mean 'status'?" in done.stderr


def test_a_subcommand_runs_through_its_own_group(tmp_path: Path) -> None:
    done = _turnkeeper("goal", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert " goal [OPTIONS] COMMAND [ARGS]..." in done.stdout
    assert "add" in done.stdout and "list" in done.stdout


def test_every_command_draws_its_own_help() -> None:
    # In one process, so the top-level listing is drawn again after each command has
    # loaded: a loaded command lists with its own help, the others with their line.
    runner = CliRunner()
    for entry in Commands.LAZY:
        done = runner.invoke(
            app, [entry.name, "--help"], prog_name="turnkeeper", env={"COLUMNS": "200"}
        )
        assert done.exit_code == 0, (entry.name, done.output)
        assert f"Usage: turnkeeper {entry.name} [OPTIONS]" in done.output, entry.name
        assert _first_paragraph(entry.summary)[:40] in " ".join(done.output.split()), entry.name
    listing = runner.invoke(app, ["--help"], prog_name="turnkeeper", env={"COLUMNS": "200"})
    assert listing.exit_code == 0, listing.output
    assert all(f" {entry.name} " in listing.output for entry in Commands.LAZY)
