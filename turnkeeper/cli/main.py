"""The ``turnkeeper`` command: one small surface a user can hold in their head."""

from __future__ import annotations

import typer

from turnkeeper.cli import chaos, maintenance, sessions
from turnkeeper.cli.demo import demo
from turnkeeper.cli.goals import goal_app, todo_app
from turnkeeper.cli.watch import evidence_app, gate_app, monitor_app

app = typer.Typer(
    name="turnkeeper",
    help="A crash-proof control plane for long-running AI agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command()(maintenance.init)
app.command()(maintenance.status)
app.command()(maintenance.audit)
app.command()(maintenance.verify)
app.command()(maintenance.repair)
app.command()(maintenance.propose)
app.command()(sessions.run)
app.command()(sessions.recover)
app.command()(demo)
app.command()(chaos.chaos)
app.add_typer(sessions.session_app, name="session")
app.add_typer(sessions.operation_app, name="operation")
app.add_typer(goal_app, name="goal")
app.add_typer(todo_app, name="todo")
app.add_typer(gate_app, name="gate")
app.add_typer(monitor_app, name="monitor")
app.add_typer(evidence_app, name="evidence")

if __name__ == "__main__":
    app()
