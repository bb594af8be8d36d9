"""Project-wide commands: init, status, audit, verify, repair, propose."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from turnkeeper.cli import output
from turnkeeper.cli.context import (
    GoalArgument,
    JsonOption,
    goal_service,
    handles_errors,
    open_project_store,
    parse_json_arg,
    without_cycle_collection,
)
from turnkeeper.cli.output import print_json, safe, to_jsonable
from turnkeeper.errors import DataLoss, FailedPrecondition, NotFound

# What a command needs beyond parsing its arguments is imported when it runs.
if TYPE_CHECKING:
    from turnkeeper.runtime.control.controller_health import ControllerHealth
    from turnkeeper.runtime.services.session_listing import SessionSummary
    from turnkeeper.store.base import EventStore
    from turnkeeper.store.records import VerifyReport


@handles_errors
def init(
    path: Path = typer.Argument(Path("."), metavar="PATH", help="The project root."),
    database_url: str | None = typer.Option(
        None,
        "--database-url",
        help="Keep the project's state in this database (postgresql://USER@HOST/DB) instead "
        "of .turnkeeper/turnkeeper.db; recorded in .turnkeeper/database-url.",
    ),
    hooks: bool = typer.Option(
        False, "--hooks", help="Also install a git pre-commit hook that runs `turnkeeper scan`."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Create .turnkeeper/ (and its database) here, and keep it out of git.

    Example: turnkeeper init ~/src/parser
    """
    from turnkeeper.runtime.services.project import init_project
    from turnkeeper.store import open_store
    from turnkeeper.store.sql import display_url

    held: dict[str, int] = {}
    if database_url is not None:
        # Checked (and migrated) before it is recorded: a wrong URL leaves nothing behind.
        with open_store(database_url) as store:
            if _newly_named(path, database_url):
                held = _already_held(store)
    hook = None
    if hooks:  # before the project: a directory that is no git repository is refused first
        from turnkeeper.boundary.hooks import install_pre_commit

        hook = install_pre_commit(path)
    project, created = init_project(path, database_url)
    open_store(project.database_url).close()  # creates and migrates the schema now
    shown = display_url(project.database_url)
    if any(held.values()):
        output.print_line(
            f"note: database {safe(shown)} already holds {held['goals']} goal(s) and "
            f"{held['sessions']} session(s): this project now shares them (and every "
            "checkout using that database sees this one's). Another database keeps them "
            "apart.",
            stderr=True,
        )
    if as_json:
        done = {"root": str(project.root), "created": created, "database": shown}
        joined = {"already_held": held} if any(held.values()) else {}
        print_json(done | joined | ({"hook": hook} if hook else {}))
    else:
        verb = "initialised" if created else "already initialised"
        output.print_line(f"{verb} {safe(project.state_dir)} (database {safe(shown)})")
        if hook:
            output.print_line(safe(hook.message))


def _newly_named(path: Path, database_url: str) -> bool:
    """Whether ``init`` points this project at a database it did not use before (what
    it finds there then belongs to someone else, or to another checkout)."""
    from turnkeeper.runtime.services.project import DATABASE_URL_FILE, STATE_DIR_NAME

    recorded = path.resolve() / STATE_DIR_NAME / DATABASE_URL_FILE
    try:
        return recorded.read_text().strip() != database_url.strip()
    except FileNotFoundError:
        return True


def _already_held(store: EventStore) -> dict[str, int]:
    """How many goals and sessions the database holds (any status)."""
    from turnkeeper.runtime.services.goal_reads import GOAL_KIND
    from turnkeeper.runtime.services.session_listing import SESSION_KIND

    listed = store.list_projections_of((GOAL_KIND, SESSION_KIND))
    return {"goals": len(listed[GOAL_KIND]), "sessions": len(listed[SESSION_KIND])}


@handles_errors
@without_cycle_collection
def status(as_json: bool = JsonOption) -> None:
    """Everything in flight: goals with their audit counters, sessions with their turns.

    Finished sessions (closed, deleted) are counted, not drawn: `session list` lists
    every session, and --json carries every one.

    A `run` on this machine whose background thread is down (its lease keeper, say,
    while the database restarts) is shown too — also while the database does not
    answer, before the UNAVAILABLE error (with --json: in the error's details).

    Example: turnkeeper status --json
    """
    from turnkeeper.errors import Unavailable
    from turnkeeper.notify.health import notification_status
    from turnkeeper.runtime.control.controller_health import health_json, read_controller_health
    from turnkeeper.runtime.control.controller_view import summaries_json
    from turnkeeper.runtime.services.extension_states import project_extension_states
    from turnkeeper.runtime.services.goal_reads import GOAL_KIND, audit_of, goal_states
    from turnkeeper.runtime.services.project import find_project
    from turnkeeper.runtime.services.session_listing import (
        FINISHED_SESSION_STATUSES,
        SESSION_KIND,
        summaries,
    )
    from turnkeeper.runtime.services.workspace_claims import check_workspaces_not_ahead

    project = find_project()
    # Read first, from files: what the running controllers say holds while the database
    # is away, when it matters most.
    controllers = read_controller_health(project.state_dir)
    try:
        with open_project_store(project) as (_, store):
            # Goals and sessions from one read of the projections: the store checks every
            # row of the table for a listing of any kind, so two listings checked each
            # twice. The goals are decoded and audited without the goal service, which
            # imports the kernel's events, proposals and decisions (goal_reads.py).
            listed = store.list_projections_of((GOAL_KIND, SESSION_KIND))
            rows = [(state, audit_of(store, state)) for state in goal_states(listed[GOAL_KIND])]
            sessions = summaries(listed[SESSION_KIND])
            # A log behind its workspaces' snapshots lost acknowledged writes: DATA_LOSS.
            check_workspaces_not_ahead(store, [s.state for s in sessions])
            extensions = project_extension_states(store, sessions)
            notifications = notification_status(store)  # failing webhook endpoints
    except Unavailable as down:
        if controllers and as_json:
            down.details["controllers"] = health_json(controllers)
        elif controllers:
            _render_controllers(controllers)  # before the error's own lines
        raise
    if as_json:
        goal_rows = [
            {
                "id": s.goal.id,
                "title": s.goal.title,
                "status": s.goal.status.value,
                "todos": len(s.todos),
                "audit": a,
            }
            for s, a in rows
        ]
        print_json(
            {
                "sessions": summaries_json(sessions),  # parsed projections: JSON already
                "extensions": to_jsonable(extensions),
                "goals": to_jsonable(goal_rows),
                "controllers": health_json(controllers),
                "notifications": notifications.model_dump(mode="json"),
            },
            plain=True,
        )
        return
    _render_controllers(controllers)
    for endpoint in notifications.failing:
        output.console.print(f"[red]{safe(endpoint.describe())}[/]")
    if not rows:
        output.console.print("no goals yet: `turnkeeper goal add TITLE`")
        return
    from turnkeeper.cli.render import render_goal_list
    from turnkeeper.cli.render_extensions import render_extension_states
    from turnkeeper.cli.render_sessions import render_session_list

    render_goal_list(rows)
    render_extension_states(extensions)
    # Finished sessions are history, not in flight: at a thousand sessions their rows
    # buried the few still working. They are counted here, listed by `session list`,
    # and `--json` (what scripts read) keeps every session.
    in_flight = [s for s in sessions if s.status not in FINISHED_SESSION_STATUSES]
    if in_flight:
        render_session_list(in_flight)
    finished = len(sessions) - len(in_flight)
    if finished:
        output.console.print(
            f"{finished} finished session{'s' if finished != 1 else ''} not shown: "
            "`turnkeeper session list` lists every session"
        )
    _render_session_notes(in_flight)


def _render_session_notes(in_flight: list[SessionSummary]) -> None:
    """Under the table: each session's recovery report (after lost turns) and why its
    last turn has no snapshot."""
    from turnkeeper.cli.render_sessions import render_recovery_report
    from turnkeeper.runtime.services.session_listing import recovery_report

    for session in in_flight:
        report = recovery_report(session) if session.counters.get("turns_lost") else None
        if report is not None:
            output.console.print(f"[bold]session {safe(session.session_id[:8])}[/]")
            render_recovery_report(report)
        failed = session.snapshot_failed
        if failed:
            output.console.print(f"[red]session {safe(session.session_id[:8])}[/]: {safe(failed)}")


def _render_controllers(controllers: list[ControllerHealth]) -> None:
    """A line per background thread of a running controller that is down."""
    for controller in controllers:
        for line in controller.describe_down():
            output.print_line(f"[red]{safe(line)}[/]")


@handles_errors
def audit(goal_id: str = GoalArgument, as_json: bool = JsonOption) -> None:
    """The terminal audit of a goal: every counter and every named blocker.

    Example: turnkeeper audit parser
    """
    from turnkeeper.cli.render import render_audit

    with goal_service(reading=True) as goals:
        goal_id = goals.resolve("goal", goal_id)  # a unique prefix will do
        result = goals.audit(goal_id)
    if as_json:
        print_json({"goal_id": goal_id, "counters": result.counters(), "audit": result})
    else:
        render_audit(result)


def _exit_for(report: VerifyReport) -> None:
    if report.ok:
        return
    if report.data_loss:  # a damaged or lost record, even one repair can rebuild
        raise typer.Exit(DataLoss("").exit_code)
    raise typer.Exit(FailedPrecondition("").exit_code)


# A database outside any project: one a LangGraph saver writes (docs/langgraph.md).
_OTHER_DATABASE = typer.Option(
    None,
    "--database-url",
    metavar="URL",
    help="Check this database (a SQLite file or postgresql:// URL) instead of the "
    "project's: one a LangGraph saver keeps outside any project.",
)


@contextmanager
def _store_to_check(database_url: str | None) -> Iterator[EventStore]:
    """The project's store, or the database ``--database-url`` names, which must exist:
    checking a database never creates one."""
    if database_url is None:
        with open_project_store() as (_, store):
            yield store
        return
    from turnkeeper.store import open_store

    # A SQLite file is a path, or a sqlite:/// URL's path; a server's URL is tried as is.
    scheme, _, rest = database_url.partition("://")
    path = rest[1:] if scheme.startswith("sqlite") else None if rest else database_url
    if path is not None and not Path(path).expanduser().is_file():
        raise NotFound(
            f"no database at {database_url}",
            reason="database_not_found",
            details={"database_url": database_url},
        )
    store = open_store(database_url)
    try:
        yield store
    finally:
        store.close()


@handles_errors
def verify(database_url: str | None = _OTHER_DATABASE, as_json: bool = JsonOption) -> None:
    """Check the whole store: every checksum, every projection against its events.

    Exit code 0 when all is well, 10 (DATA_LOSS) for a damaged or lost record, 6 for
    a projection that disagrees with its events (`repair` rebuilds it).

    Example: turnkeeper verify --json
    """
    from turnkeeper.cli.render import render_verify
    from turnkeeper.runtime.services.folder import kernel_folder
    from turnkeeper.runtime.services.workspace_claims import behind_mismatches

    with _store_to_check(database_url) as store, output.console.status("verifying"):
        report = store.verify(kernel_folder())
        report.mismatches.extend(behind_mismatches(store))
    if as_json:
        print_json(report.model_dump(mode="json") | {"ok": report.ok})
    else:
        render_verify(report)
    _exit_for(report)


@handles_errors
def repair(
    accept_loss: list[str] = typer.Option(
        [],
        "--accept-loss",
        metavar="SESSION",
        help="Accept that the database lost this session's later turns (verify: "
        "database_behind_workspace): its snapshots the log lacks move to "
        "refs/turnkeeper/lost/ and `run` goes on from what the log holds.",
    ),
    database_url: str | None = _OTHER_DATABASE,
    as_json: bool = JsonOption,
) -> None:
    """Rebuild every projection that disagrees with its events, then verify again.

    Example: turnkeeper repair
    """
    from turnkeeper.cli.render import render_repair
    from turnkeeper.runtime.services.folder import kernel_folder
    from turnkeeper.runtime.services.workspace_claims import accept_losses, behind_mismatches

    with _store_to_check(database_url) as store, output.console.status("repairing"):
        moved = accept_losses(store, accept_loss)
        report = store.repair(kernel_folder())
        report.after.mismatches.extend(behind_mismatches(store))
    if as_json:
        print_json(report.model_dump(mode="json") | {"ok": report.after.ok, "lost": moved})
    else:
        for ref in moved:
            output.console.print(f"kept the snapshot the log lacks as {safe(ref)}")
        render_repair(report)
    _exit_for(report.after)


@handles_errors
def propose(
    goal_id: str = GoalArgument,
    proposal: str = typer.Option(
        ..., "--proposal", help="A kernel proposal as JSON ('-': stdin, @FILE: a file)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Submit any goal proposal as JSON (the full surface, for scripts and agents).

    Example: turnkeeper propose parser --proposal '{"kind": "note", "author": "me", "text": "hi"}'
    """
    from turnkeeper.kernel import parse_proposal

    parsed = parse_proposal(parse_json_arg("--proposal", proposal))
    with goal_service() as goals:
        # A unique prefix names an existing goal; a goal being created is named in full.
        if parsed.kind != "create_goal":
            goal_id = goals.resolve("goal", goal_id)
        done = goals.submit(goal_id, parsed)
    if as_json:
        print_json({"events": done.events, "head_seq": done.head_seq})
    else:
        output.console.print(f"accepted: {len(done.events)} events, head #{done.head_seq}")
