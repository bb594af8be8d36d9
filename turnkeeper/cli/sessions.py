"""``turnkeeper session ...``, ``operation show`` and ``recover``."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from turnkeeper.cli import output
from turnkeeper.cli.context import (
    GoalArgument,
    JsonOption,
    SessionArgument,
    SiteOption,
    handles_errors,
    open_project_store,
    parse_json_object,
    without_cycle_collection,
)
from turnkeeper.cli.output import print_json, safe
from turnkeeper.cli.writes import QuietOption, check_output_mode, say

# The runtime, the hosts and the kernel are imported by the commands that use them, so
# that parsing a command line (and ``--help``) does not wait for them.
if TYPE_CHECKING:
    from turnkeeper.json_types import JsonDict
    from turnkeeper.runtime.control.operations import OperationResult
    from turnkeeper.runtime.control.operator import OperatorResult
    from turnkeeper.store.base import EventStore

session_app = typer.Typer(help="Sessions: one agent working on one goal.", no_args_is_help=True)


def _host_config(text: str) -> JsonDict:
    """The JSON object given inline, as ``@FILE`` or as ``-`` (stdin); see parse_json_arg."""
    return parse_json_object("--host-config", text)


@session_app.command("create")
@handles_errors
def session_create(
    goal_id: str = GoalArgument,
    host: str = typer.Option(
        "scripted",
        help="Host kind: subprocess (any command, see docs/agents.md), codex, claude, "
        "python, scripted, or one a plugin installs.",
    ),
    host_config: str = typer.Option(
        "{}",
        help="Host configuration as JSON, @FILE or - (stdin). For subprocess: command, "
        "event_format, stdin, complete_todo (default on_success), ... (docs/agents.md).",
    ),
    workspace: Path = typer.Option(Path("."), help="The git worktree the agent works in."),
    request_id: str | None = typer.Option(
        None,
        "--request-id",
        help="Client request id: a retry with the same id and arguments returns the same "
        "session. Default: a new id, printed.",
    ),
    no_snapshots: bool = typer.Option(
        False,
        "--no-snapshots",
        help="Take no workspace snapshot at completed turns (a workspace that is not a git "
        "repository); the session cannot be reverted.",
    ),
    site: str | None = SiteOption,
    as_json: bool = JsonOption,
    quiet: bool = QuietOption,
) -> None:
    """Bind an agent host to a goal and a workspace.

    The workspace is the top of a git repository, or any directory with --no-snapshots.

    Example:

    \b
        turnkeeper session create parser --host subprocess --host-config @a.json
        SESSION=$(turnkeeper session create parser --host-config @a.json -q)
    """
    from turnkeeper.runtime.services.goals import GoalService
    from turnkeeper.runtime.services.session_admission import create_session

    check_output_mode(as_json, quiet)
    # Generated when omitted, and printed: the caller can still retry under it.
    rid = request_id if request_id is not None else str(uuid.uuid4())
    config = _host_config(host_config)
    with open_project_store() as (_, store):
        gid = GoalService(store).resolve("goal", goal_id)
        state = create_session(
            store,
            gid,
            workspace,
            host,
            config,
            request_id=rid,
            snapshots=not no_snapshots,
            site=site or None,
        )
    if as_json:
        # ``id`` at the top level, as every write's answer has it, beside the state.
        print_json({"id": state.session_id, **state.model_dump(mode="json"), "request_id": rid})
    elif quiet:
        say(state.session_id)
    else:
        snapshots = "" if state.snapshots else ", snapshots off"
        output.print_line(
            f"created session [bold]{safe(state.session_id)}[/] on goal {safe(goal_id)} "
            f"(request {safe(rid)}){snapshots}"
        )


@session_app.command("show")
@handles_errors
def session_show(session_id: str = SessionArgument, as_json: bool = JsonOption) -> None:
    """A session: status, lease, turn in flight, counters and its latest recovery report.

    Example:

    \b
        turnkeeper session show 3f2a
    """
    from turnkeeper.cli.output import to_jsonable
    from turnkeeper.cli.render_sessions import render_session
    from turnkeeper.runtime.control.controller_view import controller_json, state_controller
    from turnkeeper.runtime.services.sessions import SessionService

    with open_project_store(reading=True) as (_, store):
        sessions = SessionService(store)
        state = sessions.load(sessions.resolve_id(session_id))
    if as_json:
        # The state, and whether the controller its lease names still runs.
        shown = to_jsonable(state)
        assert isinstance(shown, dict)  # a model is a JSON object
        print_json({**shown, "controller": controller_json(state_controller(state))})
    else:
        render_session(state)


@session_app.command("list")
@handles_errors
@without_cycle_collection
def session_list(as_json: bool = JsonOption) -> None:
    """Every session with its status and counters.

    Example:

    \b
        turnkeeper session list --json
    """
    from turnkeeper.runtime.control.controller_view import summaries_json
    from turnkeeper.runtime.services.session_listing import list_sessions
    from turnkeeper.runtime.services.workspace_claims import check_workspaces_not_ahead

    with open_project_store() as (_, store):
        sessions = list_sessions(store)
        # A read's check (open_project_store(reading=True)), on the sessions listed here.
        check_workspaces_not_ahead(store, [s.state for s in sessions])
    if as_json:
        print_json(summaries_json(sessions), plain=True)  # the parsed projections
    else:
        from turnkeeper.cli.render_sessions import render_session_list

        render_session_list(sessions)


def _print_operator(result: OperatorResult, as_json: bool, said: str) -> None:
    if as_json:
        print_json(
            {
                **result.state.model_dump(mode="json"),
                "taken_from": result.taken_from,
                "ended_turn": result.ended_turn,
                "killed_pids": result.killed_pids,
                "released_todos": result.released_todos,
            }
        )
        return
    output.print_line(f"{said} session [bold]{result.state.session_id}[/] ({result.state.status})")
    if result.taken_from:
        output.print_line(f"  took the session over from {safe(result.taken_from)}")
    if result.ended_turn:
        pids = ", ".join(map(str, result.killed_pids)) or "none left running"
        output.print_line(f"  abandoned turn {result.ended_turn}; ended host processes: {pids}")
    if result.released_todos:
        output.print_line(f"  released the claims on {safe(', '.join(result.released_todos))}")


@session_app.command("stop")
@handles_errors
def session_stop(
    session_id: str = SessionArgument,
    reason: str = typer.Option("stopped by operator", help="Recorded with the stop."),
    as_json: bool = JsonOption,
) -> None:
    """Suspend a session now: end its running host, abandon the turn, release its todos.

    Works while `run` drives the session (that run lets it go and goes on with the
    others). `run` leaves a stopped session alone until `session resume`.

    Example:

    \b
        turnkeeper session stop 3f2a --reason "wrong approach"
    """
    from turnkeeper.runtime.control.operator import OperatorActions

    with open_project_store() as (_, store):
        result = OperatorActions(store).stop(session_id, reason)
    _print_operator(result, as_json, "stopped")


@session_app.command("resume")
@handles_errors
def session_resume(
    session_id: str = SessionArgument,
    reason: str = typer.Option("resumed by operator", help="Recorded with the resume."),
    as_json: bool = JsonOption,
) -> None:
    """Bring a stopped, suspended, crashed or reverted session back to ready for `run`.

    Example:

    \b
        turnkeeper session resume 3f2a && turnkeeper run
    """
    from turnkeeper.runtime.control.operator import OperatorActions

    with open_project_store() as (_, store):
        result = OperatorActions(store).resume(session_id, reason)
    _print_operator(result, as_json, "resumed")


@session_app.command("snapshots")
@handles_errors
def session_snapshots(session_id: str = SessionArgument, as_json: bool = JsonOption) -> None:
    """The session's snapshots, oldest first: one per completed turn, while retained.

    Example:

    \b
        turnkeeper session snapshots 3f2a
    """
    from turnkeeper.cli.render_sessions import render_snapshots
    from turnkeeper.runtime.services.snapshot_listing import snapshot_rows

    with open_project_store(reading=True) as (_, store):
        sid, rows = snapshot_rows(store, session_id)
    if as_json:
        print_json({"session_id": sid, "snapshots": [row.as_json() for row in rows]})
    else:
        render_snapshots(sid, rows)


@session_app.command("crash")
@handles_errors
def session_crash(
    session_id: str = SessionArgument,
    reason: str = typer.Option("marked crashed by operator", help="Recorded with the mark."),
    as_json: bool = JsonOption,
) -> None:
    """Mark a session crashed (an operator's call): `session revert` can then restore it.

    The host of a turn still in flight (a controller killed mid-turn leaves it running)
    is ended first, so nothing changes the workspace before the revert.

    Example:

    \b
        turnkeeper session crash 3f2a --reason "agent broke the build"
    """
    from turnkeeper.runtime.control.operator import OperatorActions

    with open_project_store() as (_, store):
        result = OperatorActions(store).crash(session_id, reason)
    _print_operator(result, as_json, "marked crashed:")


RequestIdOption = typer.Option(
    None,
    "--request-id",
    help="Client request id: a retry with it joins the same operation. Default: the "
    "session's unfinished operation of this kind (a retry after a crash), else a new id.",
)


def _request_id(store: EventStore, session_id: str, kind: str, given: str | None) -> str:
    """``given``, else the id of the session's unfinished operation of ``kind`` (so a
    plain retry finishes it rather than being refused), else a new one (printed)."""
    if given is not None:
        return given
    from turnkeeper.runtime.services.sessions import SessionService

    sessions = SessionService(store)
    pending = sessions.load(sessions.resolve_id(session_id)).operation
    if pending is not None and pending.kind == kind:
        return pending.request_id
    return f"{kind}-{uuid.uuid4().hex[:12]}"


@session_app.command("revert")
@handles_errors
def session_revert(
    session_id: str = SessionArgument,
    request_id: str | None = RequestIdOption,
    as_json: bool = JsonOption,
) -> None:
    """Revert a crashed session to its last completed snapshot (workspace + host session).

    Example:

    \b
        turnkeeper session revert 3f2a
    """
    from turnkeeper.runtime.control.operations import Operations

    with open_project_store() as (_, store):
        rid = _request_id(store, session_id, "revert", request_id)
        done = Operations(store).revert(session_id, rid)
    _print_operation(done, as_json)


@session_app.command("delete")
@handles_errors
def session_delete(
    session_id: str = SessionArgument,
    request_id: str | None = RequestIdOption,
    as_json: bool = JsonOption,
) -> None:
    """Delete a session, closed or not (superseding a pending revert), and its snapshots.

    Example:

    \b
        turnkeeper session delete 3f2a
    """
    from turnkeeper.runtime.control.operations import Operations

    with open_project_store() as (_, store):
        rid = _request_id(store, session_id, "delete", request_id)
        done = Operations(store).delete(session_id, rid)
    _print_operation(done, as_json)


def _print_operation(done: OperationResult, as_json: bool) -> None:
    if as_json:
        print_json(done.as_json())
        return
    state = done.session
    output.print_line(
        f"{done.result}: session [bold]{state.session_id}[/] is {state.status} "
        f"(request {safe(done.request_id)})"
    )
    _print_preserved(done.operation.preserved if done.operation else None)


def _print_preserved(preserved: Mapping[str, object] | None) -> None:
    if preserved:
        output.print_line(
            f"  moved aside rather than overwritten or removed: {preserved['count']} "
            f"paths, in {safe(preserved['directory'])}"
        )


operation_app = typer.Typer(
    help="Durable session operations (create, revert, delete).", no_args_is_help=True
)


@operation_app.command("show")
@handles_errors
def operation_show(
    request_id: str = typer.Argument(
        ..., metavar="REQUEST", help="The operation's request id (--request-id)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """An operation by its request id: kind, session, status, steps and outcome.

    Example:

    \b
        turnkeeper operation show revert-1
    """
    from turnkeeper.runtime.control.operations import Operations

    with open_project_store(reading=True) as (_, store):
        record = Operations(store).show(request_id)
    if as_json:
        print_json(record.as_json())
        return
    output.console.print(
        f"[bold]operation {safe(record.request_id)}[/]  {record.kind}  {record.status}"
    )
    output.console.print(f"  session {record.session_id}  generation {record.generation}")
    if record.root_request_id != record.request_id:
        output.console.print(f"  joined {safe(record.root_request_id)}")
    output.console.print(
        f"  steps {safe(', '.join(record.steps) or '-')}  outcome {safe(record.outcome or '-')}"
    )
    _print_preserved(record.preserved)


@handles_errors
def recover(
    turn_id: str = typer.Argument(
        ..., metavar="TURN", help="The failed turn's id, as `turn list` shows it."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Validate a failed turn's host recovery record and resume its session.

    Example:

    \b
        turnkeeper recover turn-9c1e2d3f4a5b6c7d
    """
    from turnkeeper.runtime.control.operator import recover_turn

    with open_project_store() as (_, store):
        state = recover_turn(store, turn_id)
    sid = state.session_id
    pending = state.recovery
    nxt = pending.next if pending is not None else None
    if as_json:
        print_json({"session_id": sid, "recovery": pending, "next": nxt})
        return
    output.console.print(f"recovered turn {turn_id}: session {sid[:8]} resumes")
    if nxt is not None:
        output.console.print(
            f"  next: {nxt.kind} turn, attempt {nxt.attempt}; run `turnkeeper run`"
        )
