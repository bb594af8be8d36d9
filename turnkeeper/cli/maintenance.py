"""Project-wide commands: init, status, audit, verify, repair, propose."""

from __future__ import annotations

from pathlib import Path

import typer

from turnkeeper.cli.context import (
    JsonOption,
    goal_service,
    handles_errors,
    open_project_store,
    parse_json_arg,
)
from turnkeeper.cli.output import console, print_json, safe
from turnkeeper.cli.render import (
    audit_counters,
    render_audit,
    render_goal_list,
    render_repair,
    render_verify,
)
from turnkeeper.cli.render_sessions import render_recovery_report, render_session_list
from turnkeeper.errors import DataLoss, FailedPrecondition
from turnkeeper.kernel import parse_proposal
from turnkeeper.runtime.folder import kernel_folder
from turnkeeper.runtime.goals import GoalService
from turnkeeper.runtime.project import init_project
from turnkeeper.runtime.sessions import SessionService
from turnkeeper.store import open_store
from turnkeeper.store.records import MismatchKind, VerifyReport


@handles_errors
def init(
    path: Path = typer.Argument(Path("."), help="The project root."),
    as_json: bool = JsonOption,
) -> None:
    """Create .turnkeeper/ (and its database) here, and keep it out of git."""
    project, created = init_project(path)
    open_store(project.database_url).close()  # creates and migrates the schema now
    if as_json:
        print_json(
            {"root": str(project.root), "created": created, "database": project.database_url}
        )
    else:
        verb = "initialised" if created else "already initialised"
        console.print(f"{verb} {safe(project.state_dir)}")


@handles_errors
def status(as_json: bool = JsonOption) -> None:
    """Everything in flight: goals with their audit counters, sessions with their turns."""
    with open_project_store() as (_, store):
        goals = GoalService(store)
        rows = [(state, goals.audit(state.goal.id)) for state in goals.list_goals()]
        session_states = SessionService(store).list()
    if as_json:
        print_json(
            {
                "sessions": session_states,
                "goals": [
                    {
                        "id": s.goal.id,
                        "title": s.goal.title,
                        "status": s.goal.status.value,
                        "todos": len(s.todos),
                        "audit": a,
                    }
                    for s, a in rows
                ],
            }
        )
        return
    if not rows:
        console.print("no goals yet: `turnkeeper goal add TITLE`")
        return
    render_goal_list(rows)
    if session_states:
        render_session_list(session_states)
        for state in session_states:
            if state.latest_recovery_report is not None and state.counters.turns_lost:
                console.print(f"[bold]session {safe(state.session_id[:8])}[/]")
                render_recovery_report(state.latest_recovery_report)


@handles_errors
def audit(goal_id: str, as_json: bool = JsonOption) -> None:
    """The terminal audit of a goal: every counter and every named blocker."""
    with goal_service() as goals:
        result = goals.audit(goal_id)
    if as_json:
        print_json({"goal_id": goal_id, "counters": audit_counters(result), "audit": result})
    else:
        render_audit(result)


def _exit_for(report: VerifyReport) -> None:
    if report.ok:
        return
    if any(m.kind is MismatchKind.SOURCE_WRITE for m in report.mismatches):
        raise typer.Exit(DataLoss("").exit_code)
    raise typer.Exit(FailedPrecondition("").exit_code)


@handles_errors
def verify(as_json: bool = JsonOption) -> None:
    """Fold every stream again and compare every projection; checksums on every record."""
    with open_project_store() as (_, store), console.status("verifying", spinner="dots"):
        report = store.verify(kernel_folder())
    if as_json:
        print_json(report.model_dump(mode="json") | {"ok": report.ok})
    else:
        render_verify(report)
    _exit_for(report)


@handles_errors
def repair(as_json: bool = JsonOption) -> None:
    """Rebuild mismatched projections through the kernel's fold, then verify again."""
    with open_project_store() as (_, store), console.status("repairing", spinner="dots"):
        report = store.repair(kernel_folder())
    if as_json:
        print_json(report.model_dump(mode="json") | {"ok": report.after.ok})
    else:
        render_repair(report)
    _exit_for(report.after)


@handles_errors
def propose(
    goal_id: str,
    proposal: str = typer.Option(
        ..., "--proposal", help="A kernel proposal as JSON ('-': stdin, @FILE: a file)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Submit any kernel proposal as JSON (the full surface, for scripts and agents)."""
    parsed = parse_proposal(parse_json_arg("--proposal", proposal))
    with goal_service() as goals:
        done = goals.submit(goal_id, parsed)
    if as_json:
        print_json({"events": done.events, "head_seq": done.head_seq})
    else:
        console.print(f"accepted: {len(done.events)} events, head #{done.head_seq}")
