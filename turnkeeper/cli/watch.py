"""``turnkeeper gate ...``, ``monitor ...`` and ``evidence ...``."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from turnkeeper.cli import work_lists
from turnkeeper.cli.arguments import COMMAND_TIMEOUT_MAX_SECONDS, check_seconds
from turnkeeper.cli.context import (
    GoalArgument,
    JsonOption,
    goal_service,
    handles_errors,
    parse_json_arg,
    parse_json_object,
)
from turnkeeper.cli.output import console, err_console, safe, visible
from turnkeeper.cli.writes import QuietOption, check_output_mode, report, written
from turnkeeper.errors import InvalidArgument

if TYPE_CHECKING:
    from turnkeeper.json_types import JsonValue

# The kernel and the runtime are imported by the commands that use them, so that
# parsing a command line (and ``--help``) does not wait for them.

_PREFIXES = " Every id may be shortened to a unique prefix."
gate_app = typer.Typer(
    help="Gates: decisions that block work until resolved." + _PREFIXES, no_args_is_help=True
)
monitor_app = typer.Typer(
    help="Monitors: watched external facts." + _PREFIXES, no_args_is_help=True
)
evidence_app = typer.Typer(
    help="Evidence: results bound to command and revision." + _PREFIXES, no_args_is_help=True
)

gate_app.command("list")(work_lists.gate_list)
evidence_app.command("list")(work_lists.evidence_list)


@gate_app.command("open")
@handles_errors
def gate_open(
    goal_id: str = GoalArgument,
    title: str = typer.Argument(..., metavar="TITLE", help="The decision to be made."),
    non_blocking: bool = typer.Option(False, help="Record the decision without blocking work."),
    scope: list[str] = typer.Option([], help="A todo the gate blocks (default: the whole goal)."),
    as_json: bool = JsonOption,
    quiet: bool = QuietOption,
) -> None:
    """Open a gate: a decision that blocks a goal's work (or some todos) until resolved.

    Example:

    \b
        GATE=$(turnkeeper gate open "$GOAL" "Approve it" --scope "$TODO" -q)
    """
    from turnkeeper.kernel.proposals import OpenGate, checked_input
    from turnkeeper.runtime.services.goals import id_in_goal, new_id

    check_output_mode(as_json, quiet)
    gate_id = new_id("gate")
    with goal_service() as goals:
        gid = goals.resolve("goal", goal_id)
        state = goals.load(gid)
        todos = [id_in_goal(state, "todo", t) for t in scope]
        with checked_input():
            proposal = OpenGate(
                gate_id=gate_id, title=title, blocking=not non_blocking, scope=todos
            )
        done = goals.submit(gid, proposal)
    answer = written("gate", gate_id, done.state.gates[gate_id], done, gate_id=gate_id)
    report(answer, as_json=as_json, quiet=quiet, message=f"opened gate [bold]{safe(gate_id)}[/]")


@gate_app.command("resolve")
@handles_errors
def gate_resolve(
    gate_id: str = typer.Argument(..., metavar="GATE", help="A gate id, or a unique prefix."),
    decision: str = typer.Option(..., help="approved, rejected, or your own word."),
    by: str | None = typer.Option(
        None, help="Who decided (default: your login name, else 'operator')."
    ),
    payload: str = typer.Option(
        "{}", help="The decision's details as a JSON object ('-': stdin, @FILE: a file)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Resolve an open gate with a decision.

    --decision is the one thing turnkeeper cannot guess; --by defaults to your login
    name.

    Example:

    \b
        turnkeeper gate resolve "$GATE" --decision approved
        turnkeeper gate resolve "$GATE" --decision rejected --by alice
    """
    from turnkeeper.kernel.proposals import ResolveGate, checked_input

    data = parse_json_object("--payload", payload)
    with goal_service() as goals:
        gid, full = goals.locate("gate", gate_id)
        with checked_input():
            proposal = ResolveGate(
                gate_id=full, by=by or _login_name(), decision=decision, payload=data
            )
        done = goals.submit(gid, proposal)
    answer = written("gate", full, done.state.gates[full], done, gate_id=full)
    report(
        answer,
        as_json=as_json,
        quiet=False,
        message=f"resolved gate [bold]{safe(full)}[/]: {safe(decision)}",
    )


def _login_name() -> str:
    """Who is deciding, when --by is not given: the OS login name. A process with no
    resolvable user (a container without a passwd entry, say) is "operator"."""
    import getpass

    try:
        return getpass.getuser() or "operator"
    except (OSError, KeyError):
        return "operator"


@monitor_app.command("add")
@handles_errors
def monitor_add(
    goal_id: str = GoalArgument,
    target: str = typer.Argument(
        ..., metavar="TARGET", help="What is watched (a URL, a metric, ...)."
    ),
    cadence: int = typer.Option(..., help="Seconds between readbacks."),
    stall_limit: int = typer.Option(3, help="Unchanged readbacks before a replan is due."),
    required: bool = typer.Option(False, help="Closing the goal needs a fresh readback."),
    freshness: int = typer.Option(0, help="With --required: how old a readback may be (s)."),
    as_json: bool = JsonOption,
    quiet: bool = QuietOption,
) -> None:
    """Watch an external fact: it is due for a readback every --cadence seconds.

    Example:

    \b
        MON=$(turnkeeper monitor add "$GOAL" "ci status of main" --cadence 3600 -q)
    """
    from turnkeeper.kernel.proposals import AddMonitor, checked_input
    from turnkeeper.runtime.services.goals import new_id

    check_output_mode(as_json, quiet)
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
        done = goals.submit(goals.resolve("goal", goal_id), proposal)
    answer = written("monitor", mid, done.state.monitors[mid], done, monitor_id=mid)
    message = f"added monitor [bold]{safe(mid)}[/] on {safe(target)}"
    report(answer, as_json=as_json, quiet=quiet, message=message)


@monitor_app.command("readback")
@handles_errors
def monitor_readback(
    monitor_id: str = typer.Argument(
        ..., metavar="MONITOR", help="A monitor id, or a unique prefix."
    ),
    value: str = typer.Option(
        ...,
        help="The observed value: JSON (a number, an object, ...), or plain text such as "
        "green, taken as a string; '-': stdin, @FILE: a file (JSON only).",
    ),
    as_json: bool = JsonOption,
) -> None:
    """Record what the monitored fact reads now.

    Example:

    \b
        turnkeeper monitor readback "$MON" --value green
        turnkeeper monitor readback "$MON" --value '{"failing": 0}'
    """
    from turnkeeper.kernel.proposals import RecordReadback, checked_input

    data = _readback_value(value)
    with goal_service() as goals:
        gid, mid = goals.locate("monitor", monitor_id)
        with checked_input():
            proposal = RecordReadback(monitor_id=mid, value=data)
        done = goals.submit(gid, proposal)
    monitor = done.state.monitors[mid]
    answer = written("monitor", mid, monitor, done, monitor_id=mid)
    message = (
        f"readback recorded; next due {monitor.next_due:%H:%M:%S}, "
        f"unchanged streak {monitor.no_change_streak}"
    )
    report(answer, as_json=as_json, quiet=False, message=message)


def _readback_value(text: str) -> JsonValue:
    """``--value``: JSON when it is JSON, else (given inline) the text as a JSON string,
    so ``--value green`` records ``"green"`` and ``--value 3`` the number 3.

    Text that sets out to be JSON (an object, an array, a quoted string) and fails is
    still refused as malformed, as are stdin and @FILE: there a typo is likelier than
    prose. So are JSON's own refusals (NaN, nesting past the bound)."""
    import json

    looks_like_json = text.lstrip()[:1] in {"{", "[", '"'}
    if text == "-" or text.startswith("@") or looks_like_json or not text.strip():
        return parse_json_arg("--value", text)
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return text  # not JSON at all: the plain word the user meant
    except (RecursionError, ValueError):
        pass  # JSON the bounds refuse: parse_json_arg says why
    return parse_json_arg("--value", text)


@evidence_app.command(
    "record", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
@handles_errors
def evidence_record(
    ctx: typer.Context,
    goal_id: str = GoalArgument,
    key: str = typer.Option("", help="What the check proves (default: the command text)."),
    freshness: int = typer.Option(3600, help="Seconds the result stays valid."),
    timeout: int = typer.Option(1800, help="Give up on the command after this many seconds."),
    as_json: bool = JsonOption,
    quiet: bool = QuietOption,
) -> None:
    """Run a command (after --) and record its result bound to revision and time.

    The result is recorded whatever the command's exit code; when it
    failed, this exits 1 afterwards (saying so on stderr), so a script
    notices.

    Example:

    \b
        EV=$(turnkeeper evidence record "$GOAL" --key tests -q -- pytest -q)
    """
    from rich.text import Text

    from turnkeeper.runtime.turn.evidence import record_command_evidence

    check_output_mode(as_json, quiet)
    argv = list(ctx.args)
    if not argv:
        raise InvalidArgument("give the command after --", reason="missing_command")
    check_seconds("--timeout", timeout, COMMAND_TIMEOUT_MAX_SECONDS)
    with goal_service() as goals:
        gid = goals.resolve("goal", goal_id)
        with console.status(f"running {safe(shlex.join(argv))}", spinner="dots"):
            recorded = record_command_evidence(
                goals,
                gid,
                argv,
                cwd=Path.cwd(),
                key=key,
                freshness_seconds=freshness,
                timeout_seconds=timeout,
            )
    evidence, done, output = recorded.evidence, recorded.submitted, recorded.output
    eid, exit_code, revision, timed_out = (
        evidence.id,
        evidence.exit_code,
        evidence.revision,
        recorded.timed_out,
    )
    answer = written("evidence", eid, evidence, done, evidence_id=eid, passed=evidence.passed)
    if not as_json and not quiet:
        tail = output.decode(errors="replace").strip().splitlines()[-5:]
        for line in tail:  # the command's own output: its escape sequences shown, not run
            console.print(Text(f"  {visible(line)}", style="dim"))
    style = "green" if exit_code == 0 else "red"
    report(
        answer,
        as_json=as_json,
        quiet=quiet,
        message=f"recorded evidence [bold]{safe(eid)}[/]: exit [{style}]{exit_code}[/] "
        f"at revision {safe((revision or 'none')[:12])}",
    )
    if exit_code != 0:
        # Recorded all the same (a failing run is evidence too); the exit status tells a
        # script that the check did not pass.
        what = f"timed out after {timeout}s" if timed_out else f"exited {exit_code}"
        err_console.print(f"recorded {safe(eid)}; the command {what}")
        raise typer.Exit(1)
