"""``turnkeeper run``: recover what was in flight, then drive sessions (or, with
``--worker``, share one database's sessions with other workers) until they stop."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from turnkeeper.cli.arguments import check_run_options
from turnkeeper.cli.context import (
    JsonOption,
    SiteOption,
    handles_errors,
    open_project_store,
    open_project_store_waiting,
)
from turnkeeper.cli.output import console, print_json, print_line, safe
from turnkeeper.errors import InvalidArgument

# The runtime is imported when the command runs: parsing a command line stays quick.
if TYPE_CHECKING:
    from turnkeeper.runtime.turn.runner_link import RunnerLink


def pick_runner(state_dir: Path, choice: str) -> RunnerLink | None:
    """``run --runner``: the project's runner, if it is to be used."""
    from turnkeeper.errors import FailedPrecondition
    from turnkeeper.runtime.turn.runner_link import RunnerLink

    if choice not in ("auto", "require", "off"):
        raise InvalidArgument(
            f"--runner must be auto, require or off, not {choice!r}", reason="bad_runner_choice"
        )
    if choice == "off":
        return None
    link = RunnerLink(state_dir, required=choice == "require")
    if link.available():
        return link
    if choice == "require":
        raise FailedPrecondition(
            "no runner answers for this project (start one: turnkeeper runner start)",
            reason="runner_not_running",
        )
    return None


def check_seconds(option: str, value: float, *, low: float, high: float) -> None:
    if not (math.isfinite(value) and low <= value <= high):
        raise InvalidArgument(
            f"{option} must be between {low} and {high} seconds, not {value}",
            reason="out_of_range",
            details={"option": option},
        )


@handles_errors
def run(
    session: list[str] = typer.Option([], help="Drive only these sessions (default: all)."),
    max_turns: int = typer.Option(0, help="Stop after this many turns (0: no limit)."),
    concurrency: int = typer.Option(
        64, min=1, max=4096, help="Sessions whose hosts run at the same time."
    ),
    lease: float = typer.Option(120.0, help="Session lease length in seconds."),
    host_timeout: int = typer.Option(3600, help="Seconds a host may run one turn."),
    idle_turns: int = typer.Option(
        3,
        min=1,
        max=1_000_000,
        help="Turns in a row that change nothing in the goal before a replan is raised.",
    ),
    idle_replans: int = typer.Option(
        2,
        min=1,
        max=1_000_000,
        help="Replan turns in a row that change nothing before the session is suspended.",
    ),
    host_failures: int = typer.Option(
        5, min=1, max=1_000_000, help="Host failures in a row before the session is marked crashed."
    ),
    backoff: float = typer.Option(
        5.0, help="Seconds to wait after a first host failure; doubles with each one in a row."
    ),
    max_turn_events: int = typer.Option(
        10_000, min=1, max=1_000_000, help="Host events journaled per turn; the rest is counted."
    ),
    max_turn_output_bytes: int = typer.Option(
        4 * 1024 * 1024,
        min=1024,
        max=1024**3,
        help="Bytes of host output journaled per turn; the rest is counted and digested.",
    ),
    silence_warning: float = typer.Option(
        120.0,
        "--silence-warning",
        help="Warn when a running host has printed nothing for this many seconds.",
    ),
    silence_timeout: float = typer.Option(
        600.0,
        "--silence-timeout",
        help="End a host that makes no progress (no event but error events, no CPU in "
        "its processes) for this many seconds; its turn fails as hung (0: never).",
    ),
    max_hangs: int = typer.Option(
        2,
        min=1,
        max=1_000_000,
        help="Hung turns in a row before the session is suspended (reason hung).",
    ),
    max_lost: int = typer.Option(
        8,
        min=1,
        max=1_000_000,
        help="Lost turns in a row (ended without a result: their run died or lost its "
        "lease) before the session is suspended (reason lost_turns).",
    ),
    worker: bool = typer.Option(
        False,
        "--worker",
        help="Share the sessions with other workers on this database: claim sessions as "
        "they become runnable (new, resumed, a dead worker's), until stopped.",
    ),
    site: str | None = SiteOption,
    max_sessions: int = typer.Option(
        64, min=1, max=4096, help="--worker: sessions this worker holds at once."
    ),
    idle_exit: float = typer.Option(
        0.0, help="--worker: stop after this many seconds with nothing to drive (0: never)."
    ),
    poll: float = typer.Option(
        2.0, help="--worker: seconds between looks for work when nothing wakes it."
    ),
    database_wait: float = typer.Option(
        300.0, help="--worker: seconds to wait for a database that is away at start."
    ),
    runner: str = typer.Option(
        "auto",
        help="Run hosts in the project's runner (`turnkeeper runner start`), so turns "
        "outlive this process: auto (when one answers), require, or off.",
    ),
    runner_wait: float = typer.Option(
        300.0,
        help="--runner require: seconds a session waits for a runner that stops "
        "answering (no turn starts meanwhile) before it stops.",
    ),
    stop_timeout: float = typer.Option(
        30.0,
        "--stop-timeout",
        help="After SIGINT/SIGTERM, seconds to wait for the turns in flight; a host still "
        "running then is ended and its turn recorded as failed.",
    ),
    as_json: bool = JsonOption,
) -> None:
    """Recover every in-flight turn, then drive sessions until their goals are done.

    While hosts run it shows each one's elapsed time and the agent's latest message
    (a live table on a terminal, lines otherwise), warns about a host that has been
    silent for --silence-warning seconds, and names the reason of a failed turn.
    With --json every line is one JSON object: records with "progress" (the line) and
    "record" (session, turn, message, agent_error, refusal, host_silent, note, health:
    a background thread that went down or came back), then the summary.

    A session stops by itself when its goal passes the terminal audit, a gate blocks,
    its host keeps failing (backing off in between), its host hangs --max-hangs turns
    in a row (no progress for --silence-timeout seconds: no event but errors, no CPU),
    --max-lost turns in a row are lost (ended without a result),
    its turns make no progress (a replan is raised first), or its agent CLI is not
    ready here (missing, too old, no key: `turnkeeper doctor`); `status` and the
    summary say why. The agent's error events and what the goal refused of its
    results are shown as they happen.

    SIGINT or SIGTERM stops after the turns in flight end, waiting at most
    --stop-timeout seconds (a host still running then is ended and its turn recorded
    as failed); a second signal ends the hosts at once.

    With --worker several `run` processes, on one machine or several, share one
    database's sessions (docs/postgresql.md): each claims sessions of its --site with a
    fenced lease, takes over those of a worker that died once its lease expires, and
    rides out the database going away (it backs off and carries on).

    Example:

    \b
        turnkeeper run --max-turns 20 --silence-warning 300
        turnkeeper run --worker --site build-1 --max-sessions 8
    """
    from turnkeeper.cli.run_display import RunDisplay, pick_mode
    from turnkeeper.hosts.base import TurnLimits
    from turnkeeper.kernel.session import ProgressPolicy, RecoveryPolicy
    from turnkeeper.notify.deliverer import DRAIN_SECONDS, delivering
    from turnkeeper.runtime.control.controller import Controller, ControllerConfig
    from turnkeeper.runtime.control.controller_health import publishing_health
    from turnkeeper.runtime.control.stopping import stop_on_signals

    check_run_options(lease=lease, host_timeout=host_timeout, max_turns=max_turns)
    week = 7 * 24 * 3600.0
    for option, seconds, low, high in (
        ("--backoff", backoff, 0.1, 3600.0),
        ("--silence-warning", silence_warning, 0.1, week),
        ("--silence-timeout", silence_timeout or None, 0.5, week),  # 0: never
        ("--poll", poll, 0.05, 3600.0),
        ("--database-wait", database_wait, 0.0, week),
        ("--runner-wait", runner_wait, 0.0, week),
        ("--stop-timeout", stop_timeout, 0.0, week),
        ("--idle-exit", idle_exit or None, 0.1, 30 * 24 * 3600.0),  # 0: never
    ):
        if seconds is not None:
            check_seconds(option, seconds, low=low, high=high)
    if worker and session:
        raise InvalidArgument(
            "--worker drives whatever sessions are runnable; it takes no --session",
            reason="worker_with_sessions",
        )
    config = ControllerConfig(
        lease_seconds=lease,
        host_timeout_seconds=host_timeout,
        max_turns=max_turns or None,
        max_concurrent=concurrency,
        policy=RecoveryPolicy(
            max_attempts=4,
            backoff_base_seconds=backoff,
            backoff_max_seconds=max(300.0, backoff),
            max_consecutive_host_failures=host_failures,
            max_consecutive_hangs=max_hangs,
            max_consecutive_lost=max_lost,
        ),
        progress=ProgressPolicy(
            max_turns_without_progress=idle_turns, max_replans_without_progress=idle_replans
        ),
        turn_limits=TurnLimits(max_events=max_turn_events, max_output_bytes=max_turn_output_bytes),
        silence_warning_seconds=silence_warning,
        silence_timeout_seconds=silence_timeout or None,
        runner_wait_seconds=runner_wait,
    )
    # Records come from every session's thread: the display keeps each line whole.
    display = RunDisplay(pick_mode(as_json), silence_warning)

    opening = (
        open_project_store_waiting(database_wait, display.note) if worker else open_project_store()
    )
    with opening as (project, store):
        config.runner = pick_runner(project.state_dir, runner)
        config.tools_dir = project.tools_dir
        if config.runner is not None:
            display.note("hosts run in the project's runner: turns outlive this process")
        controller = Controller(store, config, reporter=display.report)
        display.on_reader_gone = controller.request_stop  # ``run --json | head``
        ids = [controller.sessions.resolve_id(s) for s in session] or None
        with (
            stop_on_signals(controller, announce=display.note, stop_timeout=stop_timeout),
            display.showing(controller.monitor),
            # Its background loops' health, where `status` reads it with the database away.
            publishing_health(
                project.state_dir,
                controller.owner,
                "worker" if worker else "run",
                report=controller.report,
            ),
            # Webhooks for what needs a person (docs/notifications.md); as the run ends,
            # what is due (the gate that ended it, say) is delivered for a bounded time.
            delivering(
                store,
                drain_seconds=DRAIN_SECONDS,
                note=display.note,
                hurry=lambda: controller.stopping,  # signalled: no waiting for retries
            ),
        ):
            if worker:
                from turnkeeper.runtime.control.worker import Worker, WorkerConfig

                shared = WorkerConfig(
                    site=site or None,
                    max_sessions=max_sessions,
                    poll_seconds=poll,
                    idle_exit_seconds=idle_exit or None,
                    ride_out_seconds=lease / 2,
                )
                summary = Worker(controller, shared).run()
            else:
                summary = controller.run(ids)
    from turnkeeper.runtime.control.run_outcome import EXIT_CODES

    code = summary.exit_code()
    if as_json:
        summary_json = {
            "turns": summary.turns,
            "failed_turns": summary.failed_turns,
            "reattached_turns": summary.reattached,
            "stops": summary.stops,
            "reasons": summary.reasons,
            "outcomes": {sid: str(outcome) for sid, outcome in summary.outcomes.items()},
            "exit_code": code,
        }
        print_json(summary_json, one_line=True)  # the last of run's JSON lines
    else:
        again = f", finished {summary.reattached} reattached" if summary.reattached else ""
        turns = "1 turn" if summary.turns == 1 else f"{summary.turns} turns"
        console.print(f"ran {turns} ({summary.failed_turns} failed){again}")
        for sid, why in summary.stops.items():
            reason = summary.reasons.get(sid)
            shown = f"{why} ({reason})" if reason and reason != why else why
            # Named where it is not a success (and not already the stop's own word).
            outcome = summary.outcomes.get(sid)
            if outcome in EXIT_CODES and outcome != why:
                shown = f"{outcome}: {shown}"
            # One line a session, like the progress lines above it (a reason can be long).
            print_line(f"  session {sid[:8]}: {safe(shown)}")
    # Not 0 when a session it drove ended crashed, suspended or blocked (README's table).
    if code:
        raise typer.Exit(code)
