"""``turnkeeper session ...``, ``run`` and ``recover``."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import typer

from turnkeeper.cli.context import JsonOption, handles_errors, open_project_store, parse_json_arg
from turnkeeper.cli.output import console, print_json
from turnkeeper.cli.render_sessions import render_session, render_session_list, render_snapshots
from turnkeeper.effects import split_host_config
from turnkeeper.errors import InvalidArgument
from turnkeeper.hosts import load_host
from turnkeeper.kernel.session import SessionState, SetStatus
from turnkeeper.kernel.session.events import StatusAction
from turnkeeper.runtime.controller import Controller, ControllerConfig, stop_on_signals
from turnkeeper.runtime.goals import GoalService
from turnkeeper.runtime.operations import OperationResult, Operations
from turnkeeper.runtime.request_ids import check_request_id
from turnkeeper.runtime.sessions import SessionService
from turnkeeper.runtime.snapshots import session_refs

session_app = typer.Typer(help="Sessions: one agent working on one goal.", no_args_is_help=True)


def _host_config(text: str) -> dict[str, Any]:
    if text.startswith("@"):
        path = Path(text[1:])
        if not path.is_file():
            raise InvalidArgument(f"no such file: {path}", reason="missing_file")
        text = path.read_text()
    data = parse_json_arg("--host-config", text)
    if not isinstance(data, dict):
        raise InvalidArgument("--host-config must be a JSON object", reason="malformed_json")
    return data


@session_app.command("create")
@handles_errors
def session_create(
    goal_id: str,
    host: str = typer.Option("scripted", help="Host kind: subprocess, python, scripted, ..."),
    host_config: str = typer.Option("{}", help="Host configuration as JSON, or @FILE."),
    workspace: Path = typer.Option(Path("."), help="The git worktree the agent works in."),
    request_id: str | None = typer.Option(
        None,
        "--request-id",
        help="Client request id: a retry with the same id and arguments returns the same "
        "session. Default: a new id, printed.",
    ),
    as_json: bool = JsonOption,
) -> None:
    """Bind an agent host to a goal and a workspace."""
    # Generated when omitted, and printed: the caller can still retry under it.
    rid = request_id if request_id is not None else str(uuid.uuid4())
    check_request_id(rid)
    config = _host_config(host_config)
    if not workspace.is_dir():
        raise InvalidArgument(f"workspace {workspace} is not a directory", reason="no_workspace")
    # An unknown kind or a config the host rejects is refused here, before anything is
    # written: a session that cannot load its host would fail every turn it is given.
    load_host(host, split_host_config(config))  # as the driver loads it
    with open_project_store() as (_, store):
        GoalService(store).load(goal_id)  # NOT_FOUND before anything is written
        state = SessionService(store).create(goal_id, workspace, host, config, request_id=rid)
    if as_json:
        print_json({**state.model_dump(mode="json"), "request_id": rid})
    else:
        console.print(
            f"created session [bold]{state.session_id}[/] on goal {goal_id} (request {rid})"
        )


@session_app.command("show")
@handles_errors
def session_show(session_id: str, as_json: bool = JsonOption) -> None:
    """A session: status, lease, turn in flight, counters and its latest recovery report."""
    with open_project_store() as (_, store):
        sessions = SessionService(store)
        state = sessions.load(sessions.resolve_id(session_id))
    if as_json:
        print_json(state)
    else:
        render_session(state)


@session_app.command("list")
@handles_errors
def session_list(as_json: bool = JsonOption) -> None:
    """Every session with its status and counters."""
    with open_project_store() as (_, store):
        states = SessionService(store).list()
    if as_json:
        print_json(states)
    else:
        render_session_list(states)


def _operator_status(
    session_id: str, action: StatusAction, reason: str
) -> tuple[str, SessionState | None]:
    """An operator's status change under a short-lived lease of this command's own."""
    with open_project_store() as (_, store):
        controller = Controller(store)
        sid = controller.sessions.resolve_id(session_id)
        token = controller.acquire(sid)
        try:
            done = controller.sessions.execute(
                sid, SetStatus(lease=token, action=action, reason=reason)
            )
        finally:
            controller.release(sid)
    return sid, done.state


@session_app.command("stop")
@handles_errors
def session_stop(
    session_id: str,
    reason: str = typer.Option("stopped by operator", help="Recorded with the stop."),
    as_json: bool = JsonOption,
) -> None:
    """Suspend a session (abandoning a turn in flight); `run` leaves it alone until resumed."""
    sid, state = _operator_status(session_id, "stop", reason)
    if as_json:
        print_json(state)
    else:
        console.print(f"stopped session [bold]{sid}[/]")


@session_app.command("snapshots")
@handles_errors
def session_snapshots(session_id: str, as_json: bool = JsonOption) -> None:
    """The session's snapshots, oldest first: one per completed turn, while retained."""
    with open_project_store() as (_, store):
        sessions = SessionService(store)
        sid = sessions.resolve_id(session_id)
        state = sessions.load(sid)
        completed = sessions.completed_turns(sid)
    retained = {ref for ref, _ in session_refs(Path(state.workspace), sid)}
    rows = [
        {
            "turn_id": event.turn_id,
            "completed_at": event.at.isoformat(),
            "retained": event.snapshot.snapshot_ref in retained,
            **event.snapshot.model_dump(mode="json"),
        }
        for event in completed
    ]
    if as_json:
        print_json({"session_id": sid, "snapshots": rows})
    else:
        render_snapshots(sid, rows)


@session_app.command("crash")
@handles_errors
def session_crash(
    session_id: str,
    reason: str = typer.Option("marked crashed by operator", help="Recorded with the mark."),
    as_json: bool = JsonOption,
) -> None:
    """Mark a session crashed (an operator's call): `session revert` can then restore it."""
    sid, state = _operator_status(session_id, "mark_crashed", reason)
    if as_json:
        print_json(state)
    else:
        console.print(f"marked session [bold]{sid}[/] crashed")


RequestIdOption = typer.Option(..., "--request-id", help="Client request id: a retry joins it.")


@session_app.command("revert")
@handles_errors
def session_revert(
    session_id: str, request_id: str = RequestIdOption, as_json: bool = JsonOption
) -> None:
    """Revert a crashed session to its last completed snapshot (workspace + host session)."""
    with open_project_store() as (_, store):
        done = Operations(store).revert(session_id, request_id)
    _print_operation(done, as_json)


@session_app.command("delete")
@handles_errors
def session_delete(
    session_id: str, request_id: str = RequestIdOption, as_json: bool = JsonOption
) -> None:
    """Delete a session, closed or not (superseding a pending revert), and its snapshots."""
    with open_project_store() as (_, store):
        done = Operations(store).delete(session_id, request_id)
    _print_operation(done, as_json)


def _print_operation(done: OperationResult, as_json: bool) -> None:
    if as_json:
        print_json(done.as_json())
        return
    state = done.session
    console.print(
        f"{done.result}: session [bold]{state.session_id}[/] is {state.status} "
        f"(request {done.request_id})"
    )


operation_app = typer.Typer(
    help="Durable session operations (create, revert, delete).", no_args_is_help=True
)


@operation_app.command("show")
@handles_errors
def operation_show(request_id: str, as_json: bool = JsonOption) -> None:
    """An operation by its request id: kind, session, status, steps and outcome."""
    with open_project_store() as (_, store):
        record = Operations(store).show(request_id)
    if as_json:
        print_json(record.as_json())
        return
    console.print(f"[bold]operation {record.request_id}[/]  {record.kind}  {record.status}")
    console.print(f"  session {record.session_id}  generation {record.generation}")
    if record.root_request_id != record.request_id:
        console.print(f"  joined {record.root_request_id}")
    console.print(f"  steps {', '.join(record.steps) or '-'}  outcome {record.outcome or '-'}")


@handles_errors
def run(
    session: list[str] = typer.Option([], help="Drive only these sessions (default: all)."),
    max_turns: int = typer.Option(0, help="Stop after this many turns (0: no limit)."),
    lease: float = typer.Option(120.0, help="Session lease length in seconds."),
    host_timeout: int = typer.Option(3600, help="Seconds a host may run one turn."),
    as_json: bool = JsonOption,
) -> None:
    """Recover every in-flight turn, then drive sessions until their goals are done."""
    config = ControllerConfig(
        lease_seconds=lease, host_timeout_seconds=host_timeout, max_turns=max_turns or None
    )

    def progress(line: str) -> None:
        if as_json:
            print(json.dumps({"progress": line}), flush=True)
        else:
            console.print(f"[dim]>[/] {line}")

    with open_project_store() as (_, store):
        controller = Controller(store, config, progress=progress)
        ids = [controller.sessions.resolve_id(s) for s in session] or None
        with stop_on_signals(controller):
            summary = controller.run(ids)
    if as_json:
        summary_json = {
            "turns": summary.turns,
            "failed_turns": summary.failed_turns,
            "stops": summary.stops,
        }
        print_json(summary_json, one_line=True)  # the last of run's JSON lines
    else:
        console.print(f"ran {summary.turns} turns ({summary.failed_turns} failed)")
        for sid, why in summary.stops.items():
            console.print(f"  session {sid[:8]}: {why}")


@handles_errors
def recover(turn_id: str, as_json: bool = JsonOption) -> None:
    """Validate a failed turn's host recovery record and resume its session (seed 000)."""
    with open_project_store() as (_, store):
        controller = Controller(store)
        sid = controller.sessions.session_of_turn(turn_id)
        # Taking the lease is a write: check the record first, so a refused one
        # (forged, stale, already resolved) leaves the store untouched.
        controller.recovery.check_failed_turn(sid, turn_id)
        controller.acquire(sid)
        try:
            controller.recovery.resolve_failed_turn(sid, turn_id)
        finally:
            controller.release(sid)
        state = controller.sessions.load(sid)
    pending = state.recovery
    nxt = pending.next if pending is not None else None
    if as_json:
        print_json({"session_id": sid, "recovery": pending, "next": nxt})
        return
    console.print(f"recovered turn {turn_id}: session {sid[:8]} resumes")
    if nxt is not None:
        console.print(f"  next: {nxt.kind} turn, attempt {nxt.attempt}; run `turnkeeper run`")
