"""``turnkeeper extensions`` (what is installed) and ``turnkeeper doctor`` (what is ready)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from turnkeeper.cli.context import JsonOption, default_owner, handles_errors, open_project_store
from turnkeeper.cli.output import console, print_error, print_json, print_line, safe
from turnkeeper.errors import FailedPrecondition, InvalidArgument, NotFound

# Entry points, hosts and the store are imported by the commands: `--help` stays fast.
if TYPE_CHECKING:
    from turnkeeper.extensions.doctor import DoctorReport
    from turnkeeper.extensions.findings import Group
    from turnkeeper.kernel.session.state import SessionState
    from turnkeeper.runtime.services.extension_settings import ExtensionsState

_STATUS_STYLE = {"ok": "green"}


extensions_app = typer.Typer(
    help="Host kinds and effect providers: what is installed, and what this project "
    "allows (enable / disable). `turnkeeper doctor` says what is ready.",
    invoke_without_command=True,
)
GroupOption = typer.Option(
    None,
    "--group",
    help="host or effect: needed only when a host kind and an effect provider share the name.",
)


@extensions_app.callback()
@handles_errors
def extensions(ctx: typer.Context, as_json: bool = JsonOption) -> None:
    """Every host kind and effect provider installed: the package and version that
    provide it, its entry point, whether it loads and, in a project, whether the
    project enabled it.

    Example: turnkeeper extensions --json
    """
    if ctx.invoked_subcommand is not None:
        return
    from rich.table import Table

    from turnkeeper.extensions.catalog import list_extensions

    found = list_extensions()
    settings = _project_settings()
    rows = []
    for ext in found:
        why = settings.disabled_reason(ext.group, ext.name) if settings is not None else None
        enabled = None if settings is None else why is None
        rows.append(ext.model_dump(mode="json") | {"enabled": enabled, "disabled_reason": why})
    if as_json:
        print_json({"extensions": rows})
        return
    table = Table(title="extensions")
    for column in ("name", "group", "package", "version"):
        table.add_column(column)
    table.add_column("target", overflow="fold")
    table.add_column("loads", overflow="fold")
    if settings is not None:
        table.add_column("enabled", overflow="fold")
    for ext, row in zip(found, rows, strict=True):
        loads = "yes" if ext.loads else f"[red]no[/]: {safe(ext.error)}"
        name = safe(ext.name) + ("" if ext.active else " [dim](shadowed)[/]")
        cells = [name, ext.group, safe(ext.package or "?"), safe(ext.version or "?")]
        cells += [safe(ext.target), loads]
        if settings is not None:
            why = row["disabled_reason"]
            cells.append("yes" if why is None else f"[red]no[/]: {safe(why)}")
        table.add_row(*cells)
    console.print(table)


@extensions_app.command("disable")
@handles_errors
def extensions_disable(
    name: str = typer.Argument(..., metavar="NAME", help="The host kind or effect provider."),
    reason: str = typer.Option("", "--reason", help="Why: shown wherever it is refused."),
    group: str | None = GroupOption,
    as_json: bool = JsonOption,
) -> None:
    """Disable an extension in this project, for every worker sharing its database.

    No session is created on a disabled host kind, a session on one is suspended
    before its next turn, and a disabled effect provider's effects are refused with
    nothing run.

    Example: turnkeeper extensions disable http --reason "the ticket API is frozen"
    """
    from turnkeeper.runtime.services.extension_settings import MAX_REASON_CHARS, ExtensionSettings

    if len(reason) > MAX_REASON_CHARS:
        raise InvalidArgument(
            f"--reason is at most {MAX_REASON_CHARS} characters", reason="reason_too_long"
        )
    kind = _installed_group(name, group)
    with open_project_store() as (_, store):
        state = ExtensionSettings(store).disable(kind, name, reason, default_owner())
    _said(kind, name, state.disabled_reason(kind, name), as_json)


@extensions_app.command("enable")
@handles_errors
def extensions_enable(
    name: str = typer.Argument(..., metavar="NAME", help="The host kind or effect provider."),
    group: str | None = GroupOption,
    as_json: bool = JsonOption,
) -> None:
    """Enable an extension this project disabled; enabling what is enabled changes nothing.

    Sessions suspended on it then need `turnkeeper session resume`.

    Example: turnkeeper extensions enable http
    """
    from turnkeeper.extensions.declared import declared_extensions
    from turnkeeper.runtime.services.extension_settings import ExtensionSettings

    with open_project_store() as (_, store):
        settings = ExtensionSettings(store)
        # What may be enabled: installed, or disabled by the project (installed or not).
        known = {(d.group, d.name) for d in declared_extensions()}
        kind = _group_of(name, group, known | set(settings.state().disabled_extensions()))
        state = settings.enable(kind, name, default_owner())
    _said(kind, name, state.disabled_reason(kind, name), as_json)


def _said(group: Group, name: str, disabled: str | None, as_json: bool) -> None:
    if as_json:
        print_json(
            {"name": name, "group": group, "enabled": disabled is None, "disabled_reason": disabled}
        )
        return
    what = "host kind" if group == "host" else "effect provider"
    state = "enabled" if disabled is None else f"disabled ({safe(disabled)})"
    console.print(f"{what} {safe(name)}: {state}")


def _installed_group(name: str, group: str | None) -> Group:
    from turnkeeper.extensions.declared import declared_extensions

    return _group_of(name, group, {(d.group, d.name) for d in declared_extensions()})


def _group_of(name: str, group: str | None, known: set[tuple[Group, str]]) -> Group:
    """The group of the extension ``name`` names, else NOT_FOUND listing what there is."""
    if group is not None and group not in ("host", "effect"):
        raise InvalidArgument("--group is host or effect", reason="bad_group")
    matches = sorted(g for g, n in known if n == name and (group is None or g == group))
    if not matches:
        names = sorted({n for _, n in known})
        raise NotFound(
            f"no extension named {name!r}; installed: {', '.join(names)}",
            reason="unknown_extension",
            details={"unknown": [name], "known": names},
        )
    if len(matches) > 1:
        raise InvalidArgument(
            f"{name!r} is both a host kind and an effect provider: give --group host or effect",
            reason="ambiguous_extension",
        )
    return "host" if matches[0] == "host" else "effect"


def _project_settings() -> ExtensionsState | None:
    """The project's extension settings, or None outside a project."""
    from turnkeeper.runtime.services.extension_settings import ExtensionSettings
    from turnkeeper.runtime.services.project import find_project

    try:
        project = find_project()
    except FailedPrecondition as error:
        if error.reason != "project_not_initialised":
            raise
        return None
    with open_project_store(project) as (_, store):
        return ExtensionSettings(store).state()


@handles_errors
def doctor(
    kinds: list[str] | None = typer.Argument(
        None, metavar="[KIND]...", help="Check only these extensions (default: all)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Check that each extension is ready: the agent CLIs' binary, version and key,
    every other extension loads, and (in a project) every session's host config.

    One finding per check, each problem with its fix. In a project, only the
    extensions its live sessions use (or the KINDs named) can fail it; the others'
    findings are listed as not used here. Exit code 0 when all that is used is ready,
    6 (FAILED_PRECONDITION, reason doctor_findings) otherwise. Key values are never
    printed, only where a key was found.

    Example: turnkeeper doctor codex --json
    """
    from turnkeeper.extensions.doctor import diagnose

    sessions, project = _project_sessions()
    report = diagnose(kinds or (), sessions, project)
    if project is not None:
        _record_verdicts(report)
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
    from turnkeeper.runtime.services.project import find_project
    from turnkeeper.runtime.services.sessions import SessionService

    try:
        project = find_project()
    except FailedPrecondition as error:
        if error.reason != "project_not_initialised":
            raise
        return None, None
    with open_project_store(project) as (_, store):
        return SessionService(store).list(), str(project.root)


def _record_verdicts(report: DoctorReport) -> None:
    """What doctor found on this machine, kept in the project for ``status``."""
    from turnkeeper.runtime.services.extension_settings import ExtensionSettings
    from turnkeeper.runtime.services.extension_states import this_machine

    with open_project_store() as (_, store):
        ExtensionSettings(store).record_check(this_machine(), report.verdicts)


def _render(report: DoctorReport) -> None:
    for finding in report.findings:
        unused = finding.extension in report.unused
        style = _STATUS_STYLE.get(finding.status, "yellow" if unused else "bold red")
        note = " [dim](not used by this project)[/]" if unused and not finding.ok else ""
        print_line(
            f"[{style}]{finding.status:<14}[/] {safe(finding.extension)} "
            f"[dim]{safe(finding.check)}[/]: {safe(finding.detail)}{note}"
        )
        if finding.fix:
            print_line(f"{'':<15}[bold]fix:[/] {safe(finding.fix)}")
    where = (
        f"{report.sessions_checked} session(s) of {safe(report.project)} checked"
        if report.project
        else "not in a project: no sessions checked"
    )
    verdict = "all ready" if report.ok else f"{len(report.problems)} problem(s)"
    informational = sorted({f.extension for f in report.informational})
    aside = f"; not used here, not ready: {safe(', '.join(informational))}" if informational else ""
    console.print(f"{verdict}; {where}{aside}")
