"""``turnkeeper gate ...``, ``monitor ...`` and ``evidence ...``."""

from __future__ import annotations

import hashlib
import shlex
import subprocess
from pathlib import Path

import typer

from turnkeeper.cli.arguments import COMMAND_TIMEOUT_MAX_SECONDS, check_seconds
from turnkeeper.cli.context import (
    JsonOption,
    goal_service,
    handles_errors,
    parse_json_arg,
    parse_json_object,
)
from turnkeeper.cli.output import console, print_json, safe, visible
from turnkeeper.errors import InvalidArgument

# The kernel and the runtime are imported by the commands that use them, so that
# parsing a command line (and ``--help``) does not wait for them.

gate_app = typer.Typer(
    help="Gates: decisions that block work until resolved.", no_args_is_help=True
)
monitor_app = typer.Typer(help="Monitors: watched external facts.", no_args_is_help=True)
evidence_app = typer.Typer(
    help="Evidence: results bound to command and revision.", no_args_is_help=True
)


@gate_app.command("open")
@handles_errors
def gate_open(
    goal_id: str,
    title: str,
    non_blocking: bool = typer.Option(False, help="Record the decision without blocking work."),
    scope: list[str] = typer.Option([], help="A todo the gate blocks (default: the whole goal)."),
    as_json: bool = JsonOption,
) -> None:
    """Open a gate on a goal."""
    from turnkeeper.kernel.proposals import OpenGate, checked_input
    from turnkeeper.runtime.goals import new_id

    gid = new_id("gate")
    with checked_input():
        proposal = OpenGate(gate_id=gid, title=title, blocking=not non_blocking, scope=scope)
    with goal_service() as goals:
        done = goals.submit(goal_id, proposal)
    if as_json:
        print_json({"gate_id": gid, "events": done.events})
    else:
        console.print(f"opened gate [bold]{safe(gid)}[/]")


@gate_app.command("resolve")
@handles_errors
def gate_resolve(
    gate_id: str,
    decision: str = typer.Option(..., help="approved, rejected, or your own word."),
    by: str = typer.Option(..., help="Who decided."),
    payload: str = typer.Option(
        "{}", help="The decision's details as a JSON object ('-': stdin, @FILE: a file)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Resolve an open gate."""
    from turnkeeper.kernel.proposals import ResolveGate, checked_input

    data = parse_json_object("--payload", payload)
    with checked_input():
        proposal = ResolveGate(gate_id=gate_id, by=by, decision=decision, payload=data)
    with goal_service() as goals:
        done = goals.submit(goals.goal_of(gate_id, "gate"), proposal)
    if as_json:
        print_json({"gate_id": gate_id, "events": done.events})
    else:
        console.print(f"resolved gate [bold]{safe(gate_id)}[/]: {safe(decision)}")


@monitor_app.command("add")
@handles_errors
def monitor_add(
    goal_id: str,
    target: str,
    cadence: int = typer.Option(..., help="Seconds between readbacks."),
    stall_limit: int = typer.Option(3, help="Unchanged readbacks before a replan is due."),
    required: bool = typer.Option(False, help="Closing the goal needs a fresh readback."),
    freshness: int = typer.Option(0, help="With --required: how old a readback may be (s)."),
    as_json: bool = JsonOption,
) -> None:
    """Watch an external fact."""
    from turnkeeper.kernel.proposals import AddMonitor, checked_input
    from turnkeeper.runtime.goals import new_id

    mid = new_id("mon")
    with checked_input():
        proposal = AddMonitor(
            monitor_id=mid,
            target=target,
            cadence_seconds=cadence,
            stall_limit=stall_limit,
            required=required,
            freshness_seconds=freshness or None,
        )
    with goal_service() as goals:
        done = goals.submit(goal_id, proposal)
    if as_json:
        print_json({"monitor_id": mid, "events": done.events})
    else:
        console.print(f"added monitor [bold]{safe(mid)}[/] on {safe(target)}")


@monitor_app.command("readback")
@handles_errors
def monitor_readback(
    monitor_id: str,
    value: str = typer.Option(..., help="The observed value as JSON ('-': stdin, @FILE: a file)."),
    as_json: bool = JsonOption,
) -> None:
    """Record what the monitored fact reads now."""
    from turnkeeper.kernel.proposals import RecordReadback, checked_input

    data = parse_json_arg("--value", value)
    with checked_input():
        proposal = RecordReadback(monitor_id=monitor_id, value=data)
    with goal_service() as goals:
        gid = goals.goal_of(monitor_id, "monitor")
        done = goals.submit(gid, proposal)
    monitor = done.state.monitors[monitor_id]
    if as_json:
        print_json({"monitor": monitor, "events": done.events})
    else:
        console.print(
            f"readback recorded; next due {monitor.next_due:%H:%M:%S}, "
            f"unchanged streak {monitor.no_change_streak}"
        )


@evidence_app.command(
    "record", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
@handles_errors
def evidence_record(
    ctx: typer.Context,
    goal_id: str,
    key: str = typer.Option("", help="What the check proves (default: the command text)."),
    freshness: int = typer.Option(3600, help="Seconds the result stays valid."),
    timeout: int = typer.Option(1800, help="Give up on the command after this many seconds."),
    as_json: bool = JsonOption,
) -> None:
    """Run a command (after --) and record its result bound to revision and time."""
    from rich.text import Text

    from turnkeeper.kernel.proposals import RecordEvidence, checked_input
    from turnkeeper.runtime.goals import new_id
    from turnkeeper.runtime.workspace import git_revision

    argv = list(ctx.args)
    if not argv:
        raise InvalidArgument("give the command after --", reason="missing_command")
    check_seconds("--timeout", timeout, COMMAND_TIMEOUT_MAX_SECONDS)
    cwd = Path.cwd()
    revision = git_revision(cwd)
    eid = new_id("ev")
    # Checked before the command runs: what would be refused after it must not run it.
    with checked_input():
        draft = RecordEvidence(
            evidence_id=eid,
            command=shlex.join(argv),
            key=key or None,
            revision=revision,
            exit_code=0,
            freshness_seconds=freshness,
        )
    with console.status(f"running {safe(draft.command)}", spinner="dots"):
        try:
            proc = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=timeout, check=False)
            exit_code, output = proc.returncode, proc.stdout + proc.stderr
        except FileNotFoundError as exc:
            raise InvalidArgument(
                f"cannot run {argv[0]!r}: {exc}", reason="command_not_found"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            exit_code, output = 124, (exc.stdout or b"") + (exc.stderr or b"")
    proposal = draft.model_copy(
        update={"exit_code": exit_code, "output_digest": hashlib.sha256(output).hexdigest()}
    )
    with goal_service() as goals:
        done = goals.submit(goal_id, proposal)
    if as_json:
        print_json({"evidence": done.state.evidence[eid], "events": done.events})
        return
    style = "green" if exit_code == 0 else "red"
    tail = output.decode(errors="replace").strip().splitlines()[-5:]
    for line in tail:  # the command's own output: its escape sequences shown, not run
        console.print(Text(f"  {visible(line)}", style="dim"))
    console.print(
        f"recorded evidence [bold]{safe(eid)}[/]: exit [{style}]{exit_code}[/] "
        f"at revision {safe((revision or 'none')[:12])}"
    )
