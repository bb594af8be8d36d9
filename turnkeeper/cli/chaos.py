"""``turnkeeper chaos``: SIGKILL the real control plane everywhere, and check it recovers."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import typer

from turnkeeper.cli.context import JsonOption, handles_errors
from turnkeeper.cli.output import console, err_console, print_json

# The harness is not part of turnkeeper's core: it is the sibling package turnkeeper_chaos
# (docs/chaos.md), and this command is the one place in turnkeeper that imports it — when
# the command runs, after require_harness(), so the command line of every other command
# is built without it (and without the whole runtime it imports) and an install without
# it fails here with a typed error, not a traceback. The progress display is imported
# when the command runs too.
if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import TaskID

    from turnkeeper_chaos.harness import ModeChoice
    from turnkeeper_chaos.scenarios import Mode, ScenarioResult

VIOLATIONS_EXIT_CODE = 11
_MODES: dict[str, ModeChoice] = {
    "enumerated": "enumerated",
    "random": "random",
    "host-faults": "host-faults",
    "all": "all",
}
WORKERS_MODE = "workers"
RUNNER_MODE = "runner"
_LABELS = {"enumerated": "crash points", "random": "random kills", "host-faults": "host faults"}
HARNESS_PACKAGE = "turnkeeper_chaos"


def require_harness() -> None:
    """FAILED_PRECONDITION ``missing_extra``, naming the install command, when the harness
    (turnkeeper_chaos) is not installed. An ImportError from inside it — one of its modules,
    or of turnkeeper, that is broken — is a fault, and goes on as it is."""
    from turnkeeper.extras import missing_extra

    try:
        import turnkeeper_chaos  # noqa: F401  (its absence is the question)
    except ImportError as exc:
        if exc.name != HARNESS_PACKAGE:
            raise
        raise missing_extra("chaos", "turnkeeper chaos") from None


class _Display:
    """A progress bar per mode on stderr; one line per scenario when not a terminal."""

    def __init__(self, out: Console) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self._out = out
        self._lock = threading.Lock()
        self._live = out.is_terminal
        self._bar = RichProgress(
            TextColumn("{task.description:>13}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=out,
            disable=not self._live,
        )
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> _Display:
        self._bar.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._bar.stop()

    def planned(self, mode: Mode, total: int) -> None:
        with self._lock:
            self._tasks[mode] = self._bar.add_task(_LABELS[mode], total=total)

    def advance(self, mode: Mode, amount: int = 1) -> None:
        with self._lock:
            self._bar.advance(self._tasks[mode], amount)

    def scenario_done(self, result: ScenarioResult) -> None:
        verdict = "ok" if result.ok else f"{len(result.violations)} VIOLATIONS"
        hits = f" at {', '.join(result.crash_points)}" if result.crash_points else ""
        line = (
            f"[{result.mode}] {result.name}: {verdict} - {result.kills} kills{hits}, "
            f"{result.facts.turns} turns, {result.facts.effects_applied} effects, "
            f"{result.seconds:.1f}s"
        )
        with self._lock:
            style = "dim" if result.ok else "red"
            self._out.print(line, style=style, markup=False, highlight=False, soft_wrap=True)


@handles_errors
def chaos(
    mode: str = typer.Option(
        "all",
        help="enumerated (every crash point), random, host-faults, all, or workers "
        "(many `run --worker` on one PostgreSQL database; needs --database-url), or runner "
        "(the control plane and `turnkeeper runner` SIGKILLed while turns run there).",
    ),
    kills: int = typer.Option(
        20, help="Random, workers and runner modes: SIGKILLs at random moments, in total."
    ),
    seed: int = typer.Option(-1, help="Random mode's seed (default: a new one, printed)."),
    workers: int = typer.Option(
        2, help="Scenarios run side by side, in threads (workers mode: worker processes)."
    ),
    keep: bool = typer.Option(False, "--keep", help="Keep every scenario's directory."),
    time_limit: float = typer.Option(3600.0, help="Random mode starts no kill after this (s)."),
    directory: Path | None = typer.Option(
        None, "--dir", help="Where scenario directories go (default: a new temp dir)."
    ),
    only: list[str] = typer.Option([], help="Run only these fixed scenarios (by name)."),
    database_url: str | None = typer.Option(
        None, help="Workers mode: a PostgreSQL server; the run makes its own database there."
    ),
    sessions: int = typer.Option(32, help="Workers mode: sessions (one goal each)."),
    restarts: int = typer.Option(0, help="Workers mode: database restarts, at random."),
    restart_database_command: str | None = typer.Option(
        None, help="Workers mode: a shell command that restarts the database server."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Crash-test turnkeeper itself: SIGKILL it everywhere and check what it recovers.

    Kills the real control plane at every crash point and at random moments, fails its
    agent hosts, and after every scenario checks that no turn was left unfinished, no
    failed host step ran again, no effect was applied twice, every record passes its
    checksum and every projection equals its events (docs/design.md, "Invariants").
    Exit code 0 when nothing was violated, 11 when anything was.

    Example: turnkeeper chaos --mode random --kills 50 --seed 7
    """
    require_harness()
    from turnkeeper_chaos.harness import ChaosConfig, run_chaos
    from turnkeeper_chaos.report import render

    if mode == RUNNER_MODE:
        _runner(
            kills=kills,
            seed=seed if seed >= 0 else random.randrange(1, 1_000_000),
            keep=keep,
            directory=directory,
            time_limit=time_limit,
            as_json=as_json,
        )
        return
    if mode == WORKERS_MODE:
        _workers(
            database_url=database_url,
            workers=workers,
            sessions=sessions,
            kills=kills,
            restarts=restarts,
            restart_command=restart_database_command,
            seed=seed if seed >= 0 else random.randrange(1, 1_000_000),
            keep=keep,
            directory=directory,
            time_limit=time_limit,
            as_json=as_json,
        )
        return
    chosen = _MODES.get(mode)
    if chosen is None:
        raise typer.BadParameter(f"unknown mode {mode!r}", param_hint="--mode")
    config = ChaosConfig(
        mode=chosen,
        kills=kills,
        seed=seed if seed >= 0 else random.randrange(1, 1_000_000),
        workers=workers,
        keep=keep,
        base_dir=directory,
        time_limit=time_limit,
        only=tuple(only),
    )
    config.validate()
    err_console.print(
        f"[bold]turnkeeper chaos[/] mode={config.mode} kills={config.kills} "
        f"seed={config.seed} workers={config.workers}",
        highlight=False,
    )
    with _Display(err_console) as display:
        report = run_chaos(config, display)
    if as_json:
        print_json(report.to_json())
    else:
        render(report, console)
    if not report.ok:
        raise typer.Exit(VIOLATIONS_EXIT_CODE)


def _workers(
    *,
    database_url: str | None,
    workers: int,
    sessions: int,
    kills: int,
    restarts: int,
    restart_command: str | None,
    seed: int,
    keep: bool,
    directory: Path | None,
    time_limit: float,
    as_json: bool,
) -> None:
    from turnkeeper.extras import needs_extra
    from turnkeeper_chaos.worker_checks import render_workers

    if not database_url:
        raise typer.BadParameter(
            "workers mode needs a PostgreSQL server", param_hint="--database-url"
        )
    with needs_extra("postgres", "turnkeeper chaos --mode workers"):
        from turnkeeper_chaos.workers import WorkersConfig, run_workers_chaos

    config = WorkersConfig(
        database_url=database_url,
        workers=workers,
        sessions=sessions,
        kills=kills,
        restarts=restarts,
        restart_command=restart_command,
        seed=seed,
        keep=keep,
        base_dir=directory,
        time_limit=min(time_limit, 3600.0),
    )
    config.validate()
    err_console.print(
        f"[bold]turnkeeper chaos[/] mode=workers workers={workers} sessions={sessions} "
        f"kills={kills} restarts={restarts} seed={seed}",
        highlight=False,
    )
    report = run_workers_chaos(config)
    if as_json:
        print_json(report.to_json())
    else:
        render_workers(report, console)
    if not report.ok:
        raise typer.Exit(VIOLATIONS_EXIT_CODE)


def _runner(
    *, kills: int, seed: int, keep: bool, directory: Path | None, time_limit: float, as_json: bool
) -> None:
    from turnkeeper_chaos.runner_checks import render_runner
    from turnkeeper_chaos.runner_mode import RunnerChaosConfig, run_runner_chaos

    config = RunnerChaosConfig(
        kills=kills, seed=seed, keep=keep, base_dir=directory, time_limit=min(time_limit, 3600.0)
    )
    config.validate()
    err_console.print(
        f"[bold]turnkeeper chaos[/] mode=runner kills={kills} seed={seed}", highlight=False
    )
    report = run_runner_chaos(config)
    if as_json:
        print_json(report.to_json())
    else:
        render_runner(report, console)
    if not report.ok:
        raise typer.Exit(VIOLATIONS_EXIT_CODE)
