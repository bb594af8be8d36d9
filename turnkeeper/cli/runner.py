"""``turnkeeper runner start|status|stop|serve``: the project's runner daemon."""

from __future__ import annotations

import typer

from turnkeeper.cli.context import JsonOption, handles_errors
from turnkeeper.cli.output import console, print_json, safe
from turnkeeper.errors import Unavailable

# The runner package (pydantic, the hosts) is imported when a command runs.
runner_app = typer.Typer(
    help="The runner: a daemon that owns the project's agent processes, so a control "
    "plane crash does not end its turns (docs/runner.md).",
    no_args_is_help=True,
)


@runner_app.command()
@handles_errors
def serve(
    max_unacked_events: int = typer.Option(
        50_000,
        envvar="TURNKEEPER_RUNNER_MAX_UNACKED_EVENTS",
        help="Unacknowledged events per turn before its host's output stops being read.",
    ),
    max_unacked_bytes: int = typer.Option(
        64 * 1024 * 1024,
        envvar="TURNKEEPER_RUNNER_MAX_UNACKED_BYTES",
        help="Unacknowledged journal bytes per turn before its output stops being read.",
    ),
    backpressure_seconds: float = typer.Option(
        600.0,
        envvar="TURNKEEPER_RUNNER_BACKPRESSURE_SECONDS",
        help="How long a turn may wait at that cap with no acknowledgement before it "
        "is ended (runner_backpressure).",
    ),
) -> None:
    """Run the runner in the foreground until SIGTERM (for systemd).

    Example: TURNKEEPER_DIR=~/src/parser turnkeeper runner serve
    """
    import logging

    from turnkeeper.runner.daemon import serve as serve_runner
    from turnkeeper.runner.turns import RunnerSettings
    from turnkeeper.runtime.services.project import find_project

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    settings = RunnerSettings(
        max_unacked_events=max_unacked_events,
        max_unacked_bytes=max_unacked_bytes,
        backpressure_seconds=backpressure_seconds,
    )
    serve_runner(find_project().state_dir, settings)


@runner_app.command()
@handles_errors
def start(
    timeout: float = typer.Option(15.0, help="Seconds to wait for it to answer."),
    as_json: bool = JsonOption,
) -> None:
    """Start the runner in the background (if none runs) and wait until it answers.

    Example: turnkeeper runner start
    """
    from turnkeeper.runner.control import start_detached, summary
    from turnkeeper.runtime.services.project import find_project

    identity, started = start_detached(find_project().state_dir, timeout)
    if as_json:
        print_json({**summary(identity), "started": started})
        return
    verb = "started" if started else "already running"
    console.print(f"runner {verb} (pid {identity.pid})")


@runner_app.command()
@handles_errors
def status(as_json: bool = JsonOption) -> None:
    """The runner's pid, uptime, turns and journal size (exit 9 if none runs).

    Example: turnkeeper runner status --json
    """
    from turnkeeper.runner.control import status as runner_status
    from turnkeeper.runner.control import summary
    from turnkeeper.runtime.services.project import find_project

    try:
        info = summary(runner_status(find_project().state_dir))
    except Unavailable as error:
        raise Unavailable(
            "no runner runs for this project (`turnkeeper runner start`)",
            reason="runner_not_running",
            details={"cause": error.message},
        ) from None
    if as_json:
        print_json(info)
        return
    console.print(
        f"runner pid {info['pid']}, up {info['uptime_seconds']}s: "
        f"{info['turns_live']} live turn(s), {info['turns_finished']} finished, "
        f"journal {info['journal_bytes']} bytes"
    )
    for turn in info["turns"]:
        reason = f" ({safe(turn['end_reason'])})" if turn["end_reason"] else ""
        console.print(
            f"  {safe(turn['turn_id'])}: {turn['state']}{reason}, "
            f"seq {turn['last_seq']}, acked {turn['acked_seq']}"
        )


@runner_app.command()
@handles_errors
def stop(
    force: bool = typer.Option(False, "--force", help="Kill the trees of live turns."),
    timeout: float = typer.Option(30.0, help="Seconds to wait for it to exit."),
    as_json: bool = JsonOption,
) -> None:
    """Stop the runner (SIGTERM, then wait). Refused while turns run, unless --force.

    Example: turnkeeper runner stop --force
    """
    from turnkeeper.runner.control import stop as stop_runner
    from turnkeeper.runtime.services.project import find_project

    result = stop_runner(find_project().state_dir, force=force, timeout=timeout)
    if as_json:
        print_json(result)
        return
    if not result["stopped"]:
        console.print("no runner runs for this project")
        return
    killed = result["killed_turns"]
    extra = f", {len(killed)} live turn(s) killed" if killed else ""
    console.print(f"runner {result['pid']} stopped{extra}")
