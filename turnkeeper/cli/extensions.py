"""``turnkeeper extensions`` (what is installed) and ``turnkeeper doctor`` (what is ready)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from turnkeeper.cli.context import JsonOption, handles_errors
from turnkeeper.cli.output import console, print_error, print_json, safe
from turnkeeper.errors import FailedPrecondition

# Entry points, hosts and the store are imported by the commands: `--help` stays fast.
if TYPE_CHECKING:
    from turnkeeper.extensions.doctor import DoctorReport
    from turnkeeper.kernel.session.state import SessionState

_STATUS_STYLE = {"ok": "green"}


@handles_errors
def extensions(as_json: bool = JsonOption) -> None:
    """Every host kind and effect provider installed: the package and version that
    provide it, its entry point, and whether it loads. Needs no project.

    Example: turnkeeper extensions --json
    """
    from rich.table import Table

    from turnkeeper.extensions.catalog import list_extensions

    found = list_extensions()
    if as_json:
        print_json({"extensions": found})
        return
    table = Table(title="extensions")
    for column in ("name", "group", "package", "version"):
        table.add_column(column)
    table.add_column("target", overflow="fold")
    table.add_column("loads", overflow="fold")
    for ext in found:
        loads = "yes" if ext.loads else f"[red]no[/]: {safe(ext.error)}"
        name = safe(ext.name) + ("" if ext.active else " [dim](shadowed)[/]")
        table.add_row(
            name,
            ext.group,
            safe(ext.package or "?"),
            safe(ext.version or "?"),
            safe(ext.target),
            loads,
        )
    console.print(table)


@handles_errors
def doctor(
    kinds: list[str] | None = typer.Argument(
        None, metavar="[KIND]...", help="Check only these extensions (default: all)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Check that each extension is ready: the agent CLIs' binary, version and key,
    every other extension loads, and (in a project) every session's host config.

    One finding per check, each problem with its fix. Exit code 0 when all is ready,
    6 (FAILED_PRECONDITION, reason doctor_findings) otherwise. Key values are never
    printed, only where a key was found.

    Example: turnkeeper doctor codex --json
    """
    from turnkeeper.extensions.doctor import diagnose

    sessions, project = _project_sessions()
    report = diagnose(kinds or (), sessions, project)
    problems = report.problems
    error = FailedPrecondition(
        f"{len(problems)} problem(s) found: {', '.join(sorted({p.status for p in problems}))}",
        reason="doctor_findings",
        details={"problems": len(problems)},
    )
    if as_json:
        extra = {} if report.ok else {"error": error.to_dict()}
        print_json(report.model_dump(mode="json") | extra)
    else:
        _render(report)
    if not report.ok:
        if not as_json:
            print_error(error, as_json=False)
        raise typer.Exit(error.exit_code)


def _project_sessions() -> tuple[list[SessionState] | None, str | None]:
    """The project's sessions, or (None, None) outside a project (nothing to check)."""
    from turnkeeper.cli.context import open_project_store
    from turnkeeper.runtime.project import find_project
    from turnkeeper.runtime.sessions import SessionService

    try:
        project = find_project()
    except FailedPrecondition as error:
        if error.reason != "project_not_initialised":
            raise
        return None, None
    with open_project_store(project) as (_, store):
        return SessionService(store).list(), str(project.root)


def _render(report: DoctorReport) -> None:
    for finding in report.findings:
        style = _STATUS_STYLE.get(finding.status, "bold red")
        console.print(
            f"[{style}]{finding.status:<14}[/] {safe(finding.extension)} "
            f"[dim]{safe(finding.check)}[/]: {safe(finding.detail)}"
        )
        if finding.fix:
            console.print(f"{'':<15}[bold]fix:[/] {safe(finding.fix)}")
    where = (
        f"{report.sessions_checked} session(s) of {safe(report.project)} checked"
        if report.project
        else "not in a project: no sessions checked"
    )
    verdict = "all ready" if report.ok else f"{len(report.problems)} problem(s)"
    console.print(f"{verdict}; {where}")
