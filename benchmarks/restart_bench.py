"""Restart benchmark: how soon each session works again after ``turnkeeper run`` is SIGKILLed.

Run ``python -m benchmarks.restart_bench`` (``--quick``: one repeat per size;
``--smoke``: tiny, for the tests; ``--json``). On the project's own disk (a temp dir
under ``.cache/``). For 1, 16 and 64 sessions, sizes interleaved over the repeats:

1. a project made by ``turnkeeper init`` (:func:`benchmarks.real_run.make_project`),
   each session on its own goal and todo in its own git workspace, host
   ``{"command": ["sleep", "30"]}``;
2. ``turnkeeper run --json --concurrency N --idle-turns 1000000`` until every
   session's turn is in flight (its ``turn.host_started`` is in the log);
3. that run is SIGKILLed (our own child, by pid): its hosts live on, orphaned;
4. a new ``turnkeeper run`` with the same options is started, and for each session
   the time from that start to its next ``turn.accepted`` — the continuation, after
   the recovery table proved the old host gone (or ended it) and recorded the lost
   turn — is read from the session streams;
5. the new run is stopped as a user stops it: SIGTERM twice (the first asks it to
   stop after the turns in flight, the second ends their hosts' trees).

Reported: per size the median and the largest of those times (medians over the
repeats, and the worst repeat), the new process's start-up (its start to its first
write in the store), and how many killed turns were recorded lost.
"""

from __future__ import annotations

import signal
import sqlite3
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import (
    Say,
    add_columns,
    announce_machine,
    benchmark_arguments,
    chosen_settings,
    judged,
    load_average,
    render_machine,
    render_targets,
    run_and_print,
    run_in_directory,
)
from benchmarks.real_run import Project, RunProcess, make_project
from benchmarks.turn_log import Turn, read_turns

TARGET_MAX_S = 3.0  # every session's next turn, at 64 sessions
HOST = ["sleep", "30"]
POLL_S = 0.1
STOP_TIMEOUT_S = 60.0


@dataclass
class Settings:
    sizes: tuple[int, ...]
    repeats: int


FULL = Settings(sizes=(1, 16, 64), repeats=3)
QUICK = Settings(sizes=(1, 16, 64), repeats=1)
SMOKE = Settings(sizes=(1, 2), repeats=1)


@dataclass
class Restart:
    sessions: int
    next_turn_s: list[float]  # per session: restart -> its next turn.accepted
    median_s: float
    max_s: float
    startup_s: float  # restart -> the new controller's first write in the store
    lost_turns: int  # killed turns the new controller recorded lost
    stopped_cleanly: bool  # the new run ended on SIGTERM x2 (else it was SIGKILLed)


@dataclass
class Size:
    sessions: int
    restarts: list[Restart] = field(default_factory=list)
    median_of_medians_s: float = 0.0
    median_of_max_s: float = 0.0
    worst_max_s: float = 0.0


@dataclass
class Results:
    machine: dict[str, Any]
    settings: dict[str, Any]
    sizes: dict[str, Size] = field(default_factory=dict)
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)


def _wait_for(what: str, done: Any, timeout_s: float, run: RunProcess) -> Any:
    """Poll ``done()`` until it returns something truthy; raise past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = done()
        if found:
            return found
        if not run.running():
            raise RuntimeError(f"turnkeeper run ended while waiting for {what}\n{run.log()}")
        time.sleep(POLL_S)
    raise RuntimeError(f"no {what} after {timeout_s:.0f} s\n{run.log()}")


def _all_in_flight(project: Project) -> bool:
    log = read_turns(project.database)
    return len(log) == len(project.session_ids) and all(
        ts and ts[-1].host_started is not None and not ts[-1].outcome for ts in log.values()
    )


def _next_turns(project: Project, since: float) -> dict[str, Turn] | None:
    """Each session's first turn accepted after ``since``; None until every one has it."""
    found = {}
    for stream, turns in read_turns(project.database).items():
        later = [t for t in turns if t.accepted >= since]
        if not later:
            return None
        found[stream] = later[0]
    return found if len(found) == len(project.session_ids) else None


def _first_write_after(database: Path, since: float) -> float:
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30)
    try:
        (first,) = conn.execute(
            "SELECT MIN(recorded_at) FROM events WHERE recorded_at >= ?", (int(since * 1e6),)
        ).fetchone()
    finally:
        conn.close()
    return float(first) / 1e6 - since if first is not None else 0.0


def _stop(run: RunProcess) -> bool:
    """Stop ``run`` as a user does (SIGTERM, then SIGTERM again); SIGKILL it if it is
    still there after that. True if the signals were enough."""
    run.signal(signal.SIGTERM)
    time.sleep(0.5)
    run.signal(signal.SIGTERM)
    try:
        run.wait(timeout_s=STOP_TIMEOUT_S)
    except RuntimeError:
        return False  # wait() SIGKILLed it
    return True


def restart_once(work: Path, sessions: int, say: Say) -> Restart:
    project = make_project(work, sessions, HOST, say)
    args = ["--json", "--concurrency", str(sessions), "--idle-turns", "1000000"]
    first = RunProcess(project.root, args, work / "first", timed=False)
    try:
        _wait_for(
            "turn in flight in every session",
            lambda: _all_in_flight(project),
            60 + sessions,
            first,
        )
    finally:
        first.kill()
        first.wait(timeout_s=STOP_TIMEOUT_S)
    restarted = RunProcess(project.root, args, work / "restarted", timed=False)
    try:
        found = _wait_for(
            "next turn in every session",
            lambda: _next_turns(project, restarted.started_at),
            60 + sessions,
            restarted,
        )
    finally:
        clean = _stop(restarted)
    latencies = sorted(t.accepted - restarted.started_at for t in found.values())
    lost = sum(
        1
        for turns in read_turns(project.database).values()
        for t in turns
        if t.outcome == "lost" and t.accepted < restarted.started_at
    )
    return Restart(
        sessions=sessions,
        next_turn_s=latencies,
        median_s=statistics.median(latencies),
        max_s=latencies[-1],
        startup_s=_first_write_after(project.database, restarted.started_at),
        lost_turns=lost,
        stopped_cleanly=clean,
    )


def run(settings: Settings, say: Say, directory: Path | None = None) -> Results:
    def body(work: Path) -> Results:
        info = announce_machine(work, say)
        res = Results(machine=info, settings=asdict(settings))
        sizes = list(settings.sizes)
        for n in sizes:
            res.sizes[str(n)] = Size(sessions=n)
        for r in range(settings.repeats):
            for n in sizes[r % len(sizes) :] + sizes[: r % len(sizes)]:
                say(f"repeat {r + 1}/{settings.repeats}: {n} session(s), load {load_average()}")
                point = restart_once(work / f"r{r}-n{n}", n, say)
                res.sizes[str(n)].restarts.append(point)
                say(
                    f"  next turn after the restart: median {point.median_s:.2f} s, "
                    f"max {point.max_s:.2f} s; start-up {point.startup_s:.2f} s; "
                    f"{point.lost_turns} lost turn(s) recorded"
                )
        for size in res.sizes.values():
            size.median_of_medians_s = statistics.median(p.median_s for p in size.restarts)
            size.median_of_max_s = statistics.median(p.max_s for p in size.restarts)
            size.worst_max_s = max(p.max_s for p in size.restarts)
        if "64" in res.sizes:
            res.targets["max_next_turn_s_at_64"] = judged(
                res.sizes["64"].median_of_max_s, at_most=TARGET_MAX_S
            )
        res.machine["loadavg_end"] = load_average()
        return res

    return run_in_directory(directory, "restart-bench-", body)


def render(res: Results, console: Console) -> None:
    table = Table(title="SIGKILL turnkeeper run, start it again: each session's next turn")
    add_columns(
        table, "sessions", "median s", "max s", "worst max s", "start-up s", "lost", "repeats"
    )
    for key, size in res.sizes.items():
        table.add_row(
            key,
            f"{size.median_of_medians_s:.2f}",
            f"{size.median_of_max_s:.2f}",
            f"{size.worst_max_s:.2f}",
            f"{statistics.median(p.startup_s for p in size.restarts):.2f}",
            f"{statistics.median(p.lost_turns for p in size.restarts):.0f}",
            str(len(size.restarts)),
        )
    console.print(table)
    render_targets(res.targets, console)
    render_machine(res.machine, console)


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_arguments(__doc__, "one repeat per size")
    parser.add_argument("--sizes", help="comma-separated session counts (default 1,16,64)")
    args = parser.parse_args(argv)
    settings = chosen_settings(args, FULL, QUICK, SMOKE)
    if args.sizes:
        settings = replace(settings, sizes=tuple(int(n) for n in args.sizes.split(",")))
    return run_and_print(args, settings, run, render)


if __name__ == "__main__":
    raise SystemExit(main())
