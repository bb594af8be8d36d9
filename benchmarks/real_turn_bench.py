"""Real-turn benchmark: what one turn of the real ``turnkeeper run`` costs beyond its host.

Run ``python -m benchmarks.real_turn_bench`` (``--quick``, ``--smoke`` for the tests,
``--json``; ``--no-profile`` to skip the py-spy run). On the project's own disk (a
temp dir under ``.cache/``). Side by side, in interleaved rounds (the order rotates
every round), medians over the rounds:

(r) the real turn: a project made by ``turnkeeper init`` in a git repository, one
    session in a git workspace, host ``{"command": ["true"]}``; each round is one
    ``turnkeeper run --max-turns 300 --idle-turns 1000000`` (a child process under GNU
    time). Its steady window (the first turn and the process's start-up left out)
    gives the wall time per turn, from the turns' own timestamps, and the
    controller's own CPU per turn, from ``/proc/<pid>/stat`` sampled while it runs;
(l) the same run with no ``--json``, its progress lines going to a file, as
    ``turnkeeper run > run.log`` writes them: its controller CPU per turn beside (r)'s;
(s) ``subprocess.run(["true"])`` from Python: what the host costs bare. The wall
    overhead of a turn is (r) minus (s);
(t) the in-process turn of ``turn_bench`` (its :class:`~benchmarks.turn_bench.TurnPeer`:
    no-op host, git workspace, the controller's load-plan-run_turn in one thread);
(c) two bare fsync'd sqlite3 commits (``peers.BareCommit``): the floor of a turn
    that records its intent before the host runs and its outcome after;
(w) the working turn (:mod:`benchmarks.working_turn`): the same ``turnkeeper run`` on a
    project whose host, ``sh -c 'echo "{turn_id}" >> work.log'``, changes the
    workspace every turn and completes the turn's todo (the goal has a todo for every
    turn; the project is put back as it was built before every run), so every turn
    takes a new snapshot and retention prunes the oldest: what a turn that does work
    costs. Its wall, the controller's own CPU and its reaped children's (host,
    launcher, git) per turn;
(h) that host command spawned bare from Python: its wall, and the CPU it costs. A
    working turn's cost to turnkeeper, git included, is (w)'s own CPU plus its
    children's minus (h)'s CPU; its wall overhead is (w) minus (h).

Once, after the rounds, two more working runs of different lengths under ``strace
-f -e trace=execve`` count the processes a steady working turn starts, by program
(:mod:`benchmarks.child_processes`; skipped, and said so, without strace; not with
``--smoke``).

With ``--before COMMIT`` (or a directory holding a ``turnkeeper/`` package), every round
also runs (r) on that commit's code, exported with ``git archive``, and this code runs
through ``PYTHONPATH`` too, so the two differ in nothing but the code: the controller's
CPU per turn of both and their ratio, per round and as the median of those ratios.

Then one more run of (r), five times as long, and one of (w), as long as a measured
run (its goal has no more todos), under ``py-spy record -f raw --threads --gil`` say
where the controller's CPU goes in their steady turns, by turnkeeper function; and
the turns' own event timestamps say where their wall time goes
(:func:`benchmarks.turn_log.steps_in`).
"""

from __future__ import annotations

import statistics
import subprocess
from collections.abc import Callable
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
    timed,
)
from benchmarks.child_processes import ExecCount, count_execs, render_counts
from benchmarks.commands_bench import code_of, this_code
from benchmarks.peers import BareCommit
from benchmarks.pyspy_summary import render_pyspy, summarise
from benchmarks.real_run import (
    PROFILE_RATE_HZ,
    Project,
    cpu_between,
    finished,
    make_project,
    profiler_available,
    started_run,
    working_host,
)
from benchmarks.turn_bench import TURN, TurnPeer
from benchmarks.turn_log import read_turns, steady_window, steps_in
from benchmarks.working_turn import BareHost, WorkingTurns

TARGET_CPU_MS = 2.0
TARGET_OVERHEAD_MS = 5.0
# A working turn's CPU, every process it starts included (git, the host's launcher),
# the host's own work left out.
TARGET_WORKING_CPU_MS = 5.0
PROFILE_RUN_FACTOR = 5  # the profiled run's turns, in measured runs
REAL, LINES, SPAWN, IN_PROCESS, TWO_COMMITS, BEFORE, BEFORE_LINES = (
    "real_turn",
    "real_turn_lines",
    "bare_spawn_true",
    "in_process_turn",
    "two_commits",
    "real_turn_before",
    "real_turn_lines_before",
)
WORKING, WORKING_HOST = "working_turn", "bare_spawn_working_host"
LABELS = {
    REAL: "(r) real turn: turnkeeper run, host `true`, wall per turn",
    BEFORE: "(r) on the --before code",
    LINES: "(l) the same, progress lines to a file (no --json)",
    BEFORE_LINES: "(l) on the --before code",
    SPAWN: '(s) subprocess.run(["true"]) from Python',
    IN_PROCESS: "(t) in-process turn (turn_bench: no-op host, git workspace)",
    TWO_COMMITS: "(c) two bare fsync'd sqlite3 commits",
    WORKING: "(w) working turn: host appends a line, completes its todo",
    WORKING_HOST: "(h) the working host's command spawned from Python",
}


@dataclass
class Settings:
    rounds: int
    turns_per_run: int
    ops_per_round: int  # of (s), (t), (c) and (h)
    profile: bool = True
    before: str | None = None  # a commit, or a directory holding a turnkeeper/ package
    # The two traced working runs' lengths (turns) that count a turn's processes.
    count_turns: tuple[int, int] | None = (10, 30)


FULL = Settings(rounds=5, turns_per_run=300, ops_per_round=200, count_turns=(20, 60))
QUICK = Settings(rounds=3, turns_per_run=300, ops_per_round=100)
# No traced runs: they would double its time; tests/benchmarks test_child_processes
# counts a traced command's processes instead.
SMOKE = Settings(rounds=2, turns_per_run=6, ops_per_round=3, profile=False, count_turns=None)


@dataclass
class Round:
    """One round's medians, in milliseconds."""

    wall_ms: dict[str, float] = field(default_factory=dict)
    controller_cpu_ms_per_turn: float = 0.0
    children_cpu_ms_per_turn: float = 0.0
    window_turns: int = 0
    run_wall_s: float = 0.0  # the whole run process, start-up included (GNU time)
    max_rss_mib: float = 0.0
    steps_ms: dict[str, float] = field(default_factory=dict)  # see turn_log.steps_in
    before_cpu_ms_per_turn: float | None = None  # (r) on the --before code
    lines_cpu_ms_per_turn: float = 0.0  # (l)
    before_lines_cpu_ms_per_turn: float | None = None  # (l) on the --before code
    # (w), per turn of its steady window, and (h)'s CPU per spawn.
    working_cpu_ms_per_turn: float = 0.0
    working_children_cpu_ms_per_turn: float = 0.0
    working_window_turns: int = 0
    working_todos_done: int = 0
    working_steps_ms: dict[str, float] = field(default_factory=dict)
    working_host_cpu_ms: float = 0.0

    @property
    def working_cost_cpu_ms(self) -> float:
        """turnkeeper's CPU per working turn, git included: (w)'s own and children's,
        minus (h)'s (the host's own work)."""
        own = self.working_cpu_ms_per_turn + self.working_children_cpu_ms_per_turn
        return own - self.working_host_cpu_ms


@dataclass
class Results:
    machine: dict[str, Any]
    settings: dict[str, Any]
    rounds: list[Round] = field(default_factory=list)
    median_ms: dict[str, float] = field(default_factory=dict)
    controller_cpu_ms_per_turn: float = 0.0
    children_cpu_ms_per_turn: float = 0.0
    wall_overhead_ms: float = 0.0  # (r) - (s)
    steps_ms: dict[str, float] = field(default_factory=dict)  # medians over the rounds
    # Per round, then the median: (r) over (s), (t) over (c), (r) - (s) in ms.
    round_overhead_ms: list[float] = field(default_factory=list)
    in_process_vs_two_commits: list[float] = field(default_factory=list)
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    profile: dict[str, Any] | None = None
    working_profile: dict[str, Any] | None = None  # the same, of a working run
    # With --before: that code's controller CPU per turn (median of the rounds), and
    # this code's over it, per round and their median.
    before_controller_cpu_ms_per_turn: float | None = None
    cpu_ratio_to_before: list[float] = field(default_factory=list)
    cpu_ratio_to_before_median: float | None = None
    lines_controller_cpu_ms_per_turn: float = 0.0  # (l), the median of the rounds
    before_lines_controller_cpu_ms_per_turn: float | None = None
    # (w) and (h): medians of the rounds; the cost and the wall overhead per round too.
    working_controller_cpu_ms_per_turn: float = 0.0
    working_children_cpu_ms_per_turn: float = 0.0
    working_host_cpu_ms: float = 0.0
    working_cost_cpu_ms_per_turn: float = 0.0  # own + children - host
    working_cost_per_round: list[float] = field(default_factory=list)
    working_wall_overhead_ms: float = 0.0  # (w) - (h)
    working_round_overhead_ms: list[float] = field(default_factory=list)
    working_steps_ms: dict[str, float] = field(default_factory=dict)
    child_processes: ExecCount | None = None


class RealTurns:
    """The real turn's project; each :meth:`measure` is one ``turnkeeper run``."""

    def __init__(self, work: Path, say: Say, code: Path | None = None) -> None:
        self.work = work
        self.code = code  # the turnkeeper package's directory that runs (None: installed)
        self.project: Project = make_project(work, 1, ["true"], say)
        self.runs = 0
        self.profiles: dict[str, Path] = {}  # the last run's py-spy output, by phase

    def measure(self, turns: int, into: Round, profile: bool = False, lines: bool = False) -> float:
        """One run of ``turns`` turns; its figures into ``into``; its wall ms per turn.
        ``lines``: without ``--json``, so the run writes progress lines (to a file)."""
        self.runs += 1
        output = [] if lines else ["--json"]
        args = [*output, "--max-turns", str(turns), "--idle-turns", "1000000"]
        logs = self.work / f"run-{self.runs}"
        run = started_run(
            self.project,
            args,
            logs,
            profile=profile,
            sessions=1,
            timeout_s=60 + turns,
            code=self.code,
        )
        outcome = run.wait(timeout_s=60 + turns)
        self.profiles = outcome.profiles
        log = read_turns(self.project.database)
        # This run's turns only: the session's earlier runs are in the same stream.
        mine = {s: [t for t in ts if t.accepted >= outcome.started_at] for s, ts in log.items()}
        if lines:  # no summary line to read: its turns are counted in the journal
            ran = {"turns": sum(len(ts) for ts in mine.values())}
            finished(replace(outcome, summary=ran), run, turns)
        else:
            finished(outcome, run, turns)
        window = steady_window(mine)
        own, children, _ = cpu_between(outcome.samples, window.start, window.end)
        into.controller_cpu_ms_per_turn = own * 1000 / window.turns
        into.children_cpu_ms_per_turn = children * 1000 / window.turns
        into.window_turns = window.turns
        into.run_wall_s = outcome.wall_s
        into.max_rss_mib = outcome.max_rss_kib / 1024
        into.steps_ms = steps_in(mine, window)
        return window.seconds * 1000 / window.turns


def _measure_before(earlier: RealTurns, turns: int, into: Round) -> float:
    """(r) on the --before code: its wall ms per turn; its CPU per turn into ``into``
    beside this code's (the rest of the round's figures are this code's)."""
    mine = Round()
    wall = earlier.measure(turns, mine)
    into.before_cpu_ms_per_turn = mine.controller_cpu_ms_per_turn
    return wall


def _measure_lines(real: RealTurns, turns: int, into: Round, before: bool = False) -> float:
    """(l), on this code or the --before code: its CPU per turn into ``into`` beside
    (r)'s (the round's other figures are (r)'s); its wall ms per turn."""
    mine = Round()
    wall = real.measure(turns, mine, lines=True)
    if before:
        into.before_lines_cpu_ms_per_turn = mine.controller_cpu_ms_per_turn
    else:
        into.lines_cpu_ms_per_turn = mine.controller_cpu_ms_per_turn
    return wall


def _measure_working(working: WorkingTurns, turns: int, into: Round) -> float:
    """(w): its figures into ``into``; its wall ms per turn."""
    run = working.measure(turns)
    into.working_cpu_ms_per_turn = run.controller_cpu_ms
    into.working_children_cpu_ms_per_turn = run.children_cpu_ms
    into.working_window_turns = run.window_turns
    into.working_todos_done = run.todos_done
    into.working_steps_ms = run.steps_ms
    return run.wall_ms


def _measure_host(host: BareHost, n: int, into: Round) -> float:
    """(h): its CPU per spawn into ``into``; its median wall ms."""
    wall_ms, into.working_host_cpu_ms = host.samples(n)
    return wall_ms


def _spawn_true() -> None:
    subprocess.run(["true"], check=True)


def _pairs(samples: list[float]) -> list[float]:
    return [a + b for a, b in zip(samples[::2], samples[1::2], strict=False)]


def run(settings: Settings, say: Say, directory: Path | None = None) -> Results:
    def body(work: Path) -> Results:
        info = announce_machine(work, say)
        res = Results(machine=info, settings=asdict(settings))
        before = code_of(settings.before, work) if settings.before else None
        # Beside another code, this one runs through PYTHONPATH as well.
        real = RealTurns(work / "real", say, this_code() if before else None)
        (work / "inproc").mkdir()
        in_process = TurnPeer(work / "inproc", TURN, git=True)
        bare = BareCommit(work)
        # One goal for every run: todos for the longest run, or both traced runs.
        todos = max(settings.turns_per_run, sum(settings.count_turns or (0,))) + 1
        working = WorkingTurns(work / "working", say, todos, this_code() if before else None)
        host = BareHost(work / "bare-host", working_host())
        n = settings.ops_per_round
        in_process.samples(max(n // 10, 1))  # warm-up: its first turn is a start
        measures: dict[str, Callable[[Round], float]] = {
            REAL: lambda r: real.measure(settings.turns_per_run, r),
            LINES: lambda r: _measure_lines(real, settings.turns_per_run, r),
            SPAWN: lambda _: statistics.median(timed(_spawn_true, n)) / 1000,
            IN_PROCESS: lambda _: statistics.median(in_process.samples(n)) / 1000,
            TWO_COMMITS: lambda _: statistics.median(_pairs(bare.samples(2 * n))) / 1000,
            WORKING: lambda r: _measure_working(working, settings.turns_per_run, r),
            WORKING_HOST: lambda r: _measure_host(host, n, r),
        }
        if before is not None:
            say(f"--before: {before}")
            earlier = RealTurns(work / "before", say, before)
            measures[BEFORE] = lambda r: _measure_before(earlier, settings.turns_per_run, r)
            measures[BEFORE_LINES] = lambda r: _measure_lines(
                earlier, settings.turns_per_run, r, before=True
            )
        names = list(measures)
        try:
            for i in range(settings.rounds):
                order = names[i % len(names) :] + names[: i % len(names)]
                now = Round()
                for name in order:
                    now.wall_ms[name] = measures[name](now)
                res.rounds.append(now)
                res.round_overhead_ms.append(now.wall_ms[REAL] - now.wall_ms[SPAWN])
                res.in_process_vs_two_commits.append(
                    now.wall_ms[IN_PROCESS] / now.wall_ms[TWO_COMMITS]
                )
                res.working_cost_per_round.append(now.working_cost_cpu_ms)
                res.working_round_overhead_ms.append(
                    now.wall_ms[WORKING] - now.wall_ms[WORKING_HOST]
                )
                if now.before_cpu_ms_per_turn:
                    res.cpu_ratio_to_before.append(
                        now.controller_cpu_ms_per_turn / now.before_cpu_ms_per_turn
                    )
                say(
                    f"round {i + 1}/{settings.rounds} (load {load_average()[0]}): "
                    + ", ".join(f"{k} {v:.2f} ms" for k, v in now.wall_ms.items())
                    + f"; controller {now.controller_cpu_ms_per_turn:.2f} ms CPU/turn"
                    + f"; working turn {now.working_cost_cpu_ms:.2f} ms CPU/turn with children"
                )
            if settings.profile and profiler_available(say):
                _profile(real, working, settings, res, say)
            if settings.count_turns is not None:
                short, long = settings.count_turns
                say(f"counting a working turn's processes: runs of {short} and {long} turns")
                project = working.pristine.restore()
                counts = count_execs(project, short, long, work / "count", say)
                res.child_processes = counts
        finally:
            in_process.close()
            bare.close()
        _summarise(res, names)
        return res

    return run_in_directory(directory, "real-turn-bench-", body)


def _profile(
    real: RealTurns, working: WorkingTurns, settings: Settings, res: Results, say: Say
) -> None:
    """One more run of (r) and one of (w) under py-spy: their steady turns' profiles."""
    say("one more run under py-spy ...")
    profiled = Round()
    # Longer than a measured run: enough samples of the steady turns.
    turns = settings.turns_per_run * PROFILE_RUN_FACTOR
    profiled.wall_ms[REAL] = real.measure(turns, profiled, profile=True)
    if "steady" in real.profiles:
        res.profile = {
            "run": asdict(profiled),
            **summarise(real.profiles["steady"], PROFILE_RATE_HZ).as_json(),
        }
    say("one more working run under py-spy ...")
    # As long as a measured run: the goal holds no more todos than that.
    working.measure(settings.turns_per_run, profile=True)
    if "steady" in working.profiles:
        res.working_profile = summarise(working.profiles["steady"], PROFILE_RATE_HZ).as_json()


def _summarise(res: Results, names: list[str]) -> None:
    """The medians of the rounds, and the targets judged on them, into ``res``."""
    for name in names:
        res.median_ms[name] = statistics.median(r.wall_ms[name] for r in res.rounds)
    res.controller_cpu_ms_per_turn = statistics.median(
        r.controller_cpu_ms_per_turn for r in res.rounds
    )
    res.children_cpu_ms_per_turn = statistics.median(r.children_cpu_ms_per_turn for r in res.rounds)
    res.wall_overhead_ms = statistics.median(res.round_overhead_ms)
    res.lines_controller_cpu_ms_per_turn = statistics.median(
        r.lines_cpu_ms_per_turn for r in res.rounds
    )
    if any(r.before_lines_cpu_ms_per_turn for r in res.rounds):
        res.before_lines_controller_cpu_ms_per_turn = statistics.median(
            r.before_lines_cpu_ms_per_turn or 0.0 for r in res.rounds
        )
    if res.cpu_ratio_to_before:
        res.before_controller_cpu_ms_per_turn = statistics.median(
            r.before_cpu_ms_per_turn or 0.0 for r in res.rounds
        )
        res.cpu_ratio_to_before_median = statistics.median(res.cpu_ratio_to_before)
    for step in res.rounds[0].steps_ms:
        res.steps_ms[step] = statistics.median(r.steps_ms.get(step, 0.0) for r in res.rounds)
    _summarise_working(res)
    res.machine["loadavg_end"] = load_average()
    res.targets = {
        "controller_cpu_ms_per_turn": judged(res.controller_cpu_ms_per_turn, at_most=TARGET_CPU_MS),
        "wall_overhead_ms_per_turn": judged(res.wall_overhead_ms, at_most=TARGET_OVERHEAD_MS),
        "working_turn_cpu_ms_with_children": judged(
            res.working_cost_cpu_ms_per_turn, at_most=TARGET_WORKING_CPU_MS
        ),
    }


def _summarise_working(res: Results) -> None:
    """(w) and (h): the medians of the rounds into ``res``."""
    rounds = res.rounds
    res.working_controller_cpu_ms_per_turn = statistics.median(
        r.working_cpu_ms_per_turn for r in rounds
    )
    res.working_children_cpu_ms_per_turn = statistics.median(
        r.working_children_cpu_ms_per_turn for r in rounds
    )
    res.working_host_cpu_ms = statistics.median(r.working_host_cpu_ms for r in rounds)
    res.working_cost_cpu_ms_per_turn = statistics.median(res.working_cost_per_round)
    res.working_wall_overhead_ms = statistics.median(res.working_round_overhead_ms)
    for step in rounds[0].working_steps_ms:
        res.working_steps_ms[step] = statistics.median(
            r.working_steps_ms.get(step, 0.0) for r in rounds
        )


def render(res: Results, console: Console) -> None:
    table = Table(title=f"one real turn vs its parts (medians of {len(res.rounds)} rounds)")
    add_columns(table, "measurement", "wall ms")
    for name, label in LABELS.items():
        if name in res.median_ms:  # (r) on the --before code only with --before
            table.add_row(label, f"{res.median_ms[name]:.3f}")
    table.add_row(
        "wall overhead per turn: (r) - (s), per-round median", f"{res.wall_overhead_ms:.2f}"
    )
    ratio = statistics.median(res.in_process_vs_two_commits)
    table.add_row("(t) / (c), per-round median", f"{ratio:.2f}x")
    table.add_row(
        "controller CPU per turn (its own threads)", f"{res.controller_cpu_ms_per_turn:.2f}"
    )
    table.add_row(
        "its reaped children's CPU per turn (host, git)", f"{res.children_cpu_ms_per_turn:.2f}"
    )
    table.add_row(
        "controller CPU per turn, (l): progress lines to a file",
        f"{res.lines_controller_cpu_ms_per_turn:.2f}",
    )
    if res.before_lines_controller_cpu_ms_per_turn is not None:
        table.add_row(
            "controller CPU per turn, (l) on the --before code",
            f"{res.before_lines_controller_cpu_ms_per_turn:.2f}",
        )
    if res.cpu_ratio_to_before_median is not None:
        table.add_row(
            "the --before code's controller CPU per turn",
            f"{res.before_controller_cpu_ms_per_turn:.2f}",
        )
        per_round = ", ".join(f"{r:.2f}" for r in res.cpu_ratio_to_before)
        table.add_row(
            f"controller CPU, this code / --before (per round: {per_round})",
            f"{res.cpu_ratio_to_before_median:.2f}x",
        )
    for label, ms in (
        ("(w) controller CPU per turn (own threads)", res.working_controller_cpu_ms_per_turn),
        ("(w) reaped children's CPU per turn (host, git)", res.working_children_cpu_ms_per_turn),
        ("(h) the working host's own CPU per spawn", res.working_host_cpu_ms),
        ("(w) CPU with children - (h) CPU, per-round median", res.working_cost_cpu_ms_per_turn),
        ("(w) - (h) wall, per-round median", res.working_wall_overhead_ms),
    ):
        table.add_row(label, f"{ms:.2f}")
    console.print(table)
    steps = Table(title="where a real turn's wall time goes (its events' own timestamps)")
    add_columns(steps, "from one event to the next", "(r) median ms", "(w) median ms")
    for step in {**res.steps_ms, **res.working_steps_ms}:
        cells = (res.steps_ms.get(step), res.working_steps_ms.get(step))
        steps.add_row(step, *("-" if ms is None else f"{ms:.2f}" for ms in cells))
    console.print(steps)
    if res.child_processes is not None:
        render_counts(res.child_processes, console)
    render_targets(res.targets, console)
    render_machine(res.machine, console)
    if res.profile:
        console.print("(r) the no-op turn's steady window, under py-spy")
        render_pyspy(res.profile, console)
    if res.working_profile:
        console.print("(w) the working turn's steady window, under py-spy")
        render_pyspy(res.working_profile, console)


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_arguments(__doc__, "fewer rounds (a minute)")
    parser.add_argument("--no-profile", action="store_true", help="skip the py-spy run")
    parser.add_argument(
        "--before", help="also run the real turn on this commit's code (or a directory's)"
    )
    args = parser.parse_args(argv)
    settings = chosen_settings(args, FULL, QUICK, SMOKE)
    if args.no_profile:
        settings = replace(settings, profile=False)
    if args.before:
        settings = replace(settings, before=args.before)
    return run_and_print(args, settings, run, render)


if __name__ == "__main__":
    raise SystemExit(main())
