"""The ``turnkeeper`` command: one small surface a user can hold in their head."""

from __future__ import annotations

import typer

from turnkeeper import __version__
from turnkeeper.cli import chaos, extensions, handoff, maintenance, scan, serve, sessions
from turnkeeper.cli import run as run_command
from turnkeeper.cli import turns as turn_commands
from turnkeeper.cli.demo import demo
from turnkeeper.cli.goals import goal_app, todo_app
from turnkeeper.cli.runner import runner_app
from turnkeeper.cli.shares import share_app
from turnkeeper.cli.watch import evidence_app, gate_app, monitor_app

HELP = """\
A crash-proof control plane for long-running AI agents.

turnkeeper journals every turn an agent works, keeps goals, todos, gates, monitors \
and evidence in an append-only log (SQLite in .turnkeeper/), recovers whatever a \
crash left in flight, and says through a terminal audit when a goal is done.

A first goal, worked by your own agent (./agent.sh, see docs/agents.md):

  turnkeeper init
  turnkeeper goal add "Ship the parser" -c "parser tests pass" --id parser
  turnkeeper todo add parser "Write the tokenizer" --requires-evidence tests
  turnkeeper session create parser --host subprocess --host-config @agent.json
  turnkeeper run && turnkeeper audit parser

Every read takes --json. The Python API is `from turnkeeper import Project`.
"""

app = typer.Typer(
    name="turnkeeper",
    help=HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # --install-completion / --show-completion for bash, zsh, fish and PowerShell.
    add_completion=True,
)


def _print_version(value: bool) -> None:
    if value:
        print(f"turnkeeper {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_print_version,
        help="Print the version and exit.",
    ),
) -> None:
    del version  # handled by its eager callback, before any command runs


app.command()(maintenance.init)
app.command()(maintenance.status)
app.command()(maintenance.audit)
app.command()(maintenance.verify)
app.command()(maintenance.repair)
app.command()(maintenance.propose)
app.command()(run_command.run)
app.command()(sessions.recover)
app.command()(turn_commands.logs)
app.command()(demo)
app.command()(chaos.chaos)
app.command()(serve.serve)
app.command()(scan.scan)
app.command()(handoff.handoff)
app.command()(handoff.adopt)
app.command()(extensions.doctor)
app.add_typer(sessions.session_app, name="session")
app.add_typer(turn_commands.turn_app, name="turn")
app.add_typer(sessions.operation_app, name="operation")
app.add_typer(goal_app, name="goal")
app.add_typer(todo_app, name="todo")
app.add_typer(gate_app, name="gate")
app.add_typer(monitor_app, name="monitor")
app.add_typer(evidence_app, name="evidence")
app.add_typer(runner_app, name="runner")
app.add_typer(share_app, name="share")
app.add_typer(extensions.extensions_app, name="extensions")

if __name__ == "__main__":
    app()
