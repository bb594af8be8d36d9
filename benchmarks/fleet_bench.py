"""Fleet benchmark: the real ``turnkeeper run`` driving 1, 16, 64 and 256 sessions at once.

Run ``python -m benchmarks.fleet_bench`` (``--quick``: one run per size, fewer
turns; ``--smoke``: tiny, for the tests; ``--json``; ``--profile``: one more run at
the largest size under ``py-spy``, summarised by turnkeeper function). Everything
runs on the project's own disk (a temp dir under ``.cache/``).

* A project made by ``turnkeeper init`` (:func:`benchmarks.real_run.make_project`):
  N sessions, **each on a goal of its own with one todo**, each in its own git
  repository. One goal per session keeps the sessions independent, as separate
  pieces of work are: every turn writes back to its own goal stream, so what is
  measured is the control loop's cost per turn, not N sessions contending for one
  goal's stream.
* The host is ``{"command": ["sleep", "1"]}`` on the ``subprocess`` host: a turn
  takes one second of host time and never completes its todo, so every turn is a
  continuation. ``--idle-turns 1000000`` keeps the progress guard from stopping the
  session (without it a session of turns that change nothing is suspended after a
  few turns, by design).
* Working turns, beside those (``--no-working`` leaves them out): the same fleet on
  the host ``sh -c 'sleep 1; echo "{turn_id}" >> work.log'``
  (:func:`benchmarks.real_run.working_host`): a turn still takes one second of host
  time, and it changes its workspace (a line of its own appended to a file) and
  completes its todo, each goal having more todos than its session's turns. Every
  turn then takes a new snapshot of its workspace and retention prunes the oldest:
  the git work a turn that does something costs, which a turn that changes nothing
  skips.
* One ``turnkeeper run --json --concurrency N --max-turns N*rounds --idle-turns
  1000000`` per size, kind of turn and repeat, interleaved, the order rotating per
  repeat.

Reported per size (medians over the repeats, with their spread):

* turns per second in the steady window (:func:`benchmarks.turn_log.steady_window`:
  from every session's second ``turn.accepted`` to the run's last, timestamps from
  the session streams), against the ideal N turns/s (N sessions x 1 s hosts);
* the controller's own CPU per turn in that window and its reaped children's (hosts
  and git), from ``/proc/<pid>/stat`` sampled while it runs, and their sum; beside it
  the CPU one bare ``sleep`` costs (spawned from Python, as a host's share is
  reckoned) and, for the working turns, one bare working host (``sleep 0`` and the
  append): a working turn's CPU with its children, that host's left out, is what
  turnkeeper's own work costs, git included;
* the whole run from GNU time: wall, user+sys (hosts and git included), peak RSS
  (the controller's own); and the first round: how long until every session's first
  turn ended (each workspace's first snapshot is taken there).
"""

from __future__ import annotations

import resource
import statistics
import subprocess
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
from benchmarks.pyspy_summary import render_pyspy, summarise
from benchmarks.real_run import (
    PROFILE_RATE_HZ,
    cpu_between,
    finished,
    make_project,
    profiler_available,
    started_run,
    working_host,
)
from benchmarks.turn_log import cycles_in, gaps_in, median, read_turns, steady_window, steps_in
from benchmarks.working_turn import BareHost, todos_done

TARGET_RATIO = {64: 0.90, 256: 0.80}  # of the ideal N turns/s
TARGET_RSS_MIB = 200.0  # at the largest size measured, if it is 256
# A working turn's CPU with every process it starts, its host's own left out.
TARGET_WORKING_CPU_MS = 5.0
# A working session's todos beyond its turns: the budget is the fleet's, not each
# session's, so a session may run a turn or two more than its share.
SPARE_TODOS = 3
IDLE, WORKING = "idle", "working"


@dataclass
class Settings:
    sizes: tuple[int, ...]
    rounds: int  # turns per session: --max-turns is sizes x rounds
    repeats: int
    host_seconds: float = 1.0
    profile: bool = False
    working: bool = True  # working turns beside the turns that change nothing
    idle: bool = True  # the turns that change nothing


FULL = Settings(sizes=(1, 16, 64, 256), rounds=12, repeats=3)
QUICK = Settings(sizes=(1, 16, 64, 256), rounds=8, repeats=1)
SMOKE = Settings(sizes=(1, 2), rounds=4, repeats=1, host_seconds=0.2)


@dataclass
class FleetRun:
    """One ``turnkeeper run`` of one size."""

    sessions: int
    turns: int
    window_s: float
    window_turns: int
    turns_per_s: float
    ratio_to_ideal: float
    cycle_s: float  # median seconds from a turn's acceptance to the session's next
    gap_ms: float  # median ms from a turn's end to the session's next acceptance
    first_round_s: float  # from the run's start until every session's first turn ended
    controller_cpu_ms_per_turn: float
    children_cpu_ms_per_turn: float
    wall_s: float
    user_sys_s: float  # GNU time: the controller, the hosts and git
    max_rss_mib: float
    peak_threads: int
    steps_ms: dict[str, float] = field(default_factory=dict)  # see turn_log.steps_in
    todos_done: int = 0  # working turns: one per turn

    @property
    def cpu_with_children_ms_per_turn(self) -> float:
        return self.controller_cpu_ms_per_turn + self.children_cpu_ms_per_turn


@dataclass
class Size:
    sessions: int
    ideal_turns_per_s: float
    runs: list[FleetRun] = field(default_factory=list)
    median: dict[str, float] = field(default_factory=dict)
    spread: dict[str, list[float]] = field(default_factory=dict)  # [min, max]


@dataclass
class Results:
    machine: dict[str, Any]
    settings: dict[str, Any]
    sizes: dict[str, Size] = field(default_factory=dict)
    bare_host_cpu_ms: float = 0.0  # one `sleep` spawned bare: its own CPU
    # The same fleet on working turns; what one bare working host costs.
    working_sizes: dict[str, Size] = field(default_factory=dict)
    bare_working_host_cpu_ms: float = 0.0
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    profile: dict[str, Any] | None = None


def bare_host_cpu_ms(host_seconds: float, n: int = 20) -> float:
    """The CPU one bare ``sleep`` costs (its exec and exit), from our own children's
    rusage: what a host's share of a turn's children CPU is at least."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(n):
        subprocess.run(["sleep", "0"], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    del host_seconds  # the sleep's length costs no CPU
    return used * 1000 / n


def run_fleet(
    work: Path, sessions: int, settings: Settings, say: Say, profile: bool, working: bool = False
) -> Any:
    """One run of ``sessions`` sessions, on working turns or on turns that change
    nothing; a :class:`FleetRun` (or the profile's run)."""
    if working:
        host = working_host(settings.host_seconds)
        project = make_project(work, sessions, host, say, todos=settings.rounds + SPARE_TODOS)
    else:
        project = make_project(work, sessions, ["sleep", f"{settings.host_seconds:g}"], say)
    turns = sessions * settings.rounds
    args = ["--json", "--concurrency", str(sessions), "--max-turns", str(turns)]
    args += ["--idle-turns", "1000000"]
    timeout_s = 120 + settings.rounds * 60
    run = started_run(
        project, args, work / "run", profile=profile, sessions=sessions, timeout_s=timeout_s
    )
    outcome = finished(run.wait(timeout_s=timeout_s), run, turns)
    log = read_turns(project.database)
    window = steady_window(log)
    own, children, _ = cpu_between(outcome.samples, window.start, window.end)
    firsts = [ts[0].ended or ts[0].accepted for ts in log.values()]
    ideal = sessions / settings.host_seconds
    result = FleetRun(
        sessions=sessions,
        turns=sum(len(ts) for ts in log.values()),
        window_s=window.seconds,
        window_turns=window.turns,
        turns_per_s=window.turns_per_s,
        ratio_to_ideal=window.turns_per_s / ideal,
        cycle_s=median(cycles_in(log, window)),
        gap_ms=median(gaps_in(log, window)) * 1000,
        first_round_s=max(firsts) - outcome.started_at,
        controller_cpu_ms_per_turn=own * 1000 / max(window.turns, 1),
        children_cpu_ms_per_turn=children * 1000 / max(window.turns, 1),
        wall_s=outcome.wall_s,
        user_sys_s=outcome.user_s + outcome.sys_s,
        max_rss_mib=outcome.max_rss_kib / 1024,
        peak_threads=max((s.threads for s in outcome.samples), default=0),
        steps_ms=steps_in(log, window),
        todos_done=todos_done(project.database) if working else 0,
    )
    if profile:
        phases = {k: summarise(v, PROFILE_RATE_HZ).as_json() for k, v in outcome.profiles.items()}
        return result, phases
    return result


MEDIANS = (
    "turns_per_s",
    "ratio_to_ideal",
    "cycle_s",
    "gap_ms",
    "first_round_s",
    "controller_cpu_ms_per_turn",
    "children_cpu_ms_per_turn",
    "cpu_with_children_ms_per_turn",
    "user_sys_s",
    "max_rss_mib",
)


def _summarise(size: Size) -> None:
    for key in MEDIANS:
        values = [float(getattr(r, key)) for r in size.runs]
        size.median[key] = statistics.median(values)
        size.spread[key] = [min(values), max(values)]


def _targets(res: Results) -> dict[str, dict[str, Any]]:
    out = {}
    for n, wanted in TARGET_RATIO.items():
        if str(n) in res.sizes:
            value = res.sizes[str(n)].median["ratio_to_ideal"]
            out[f"ideal_ratio_at_{n}"] = judged(value, at_least=wanted)
        if str(n) in res.working_sizes:
            working = res.working_sizes[str(n)].median
            out[f"working_ideal_ratio_at_{n}"] = judged(working["ratio_to_ideal"], at_least=wanted)
            out[f"working_cpu_ms_with_children_at_{n}"] = judged(
                working["cost_cpu_ms_per_turn"], at_most=TARGET_WORKING_CPU_MS
            )
    if "256" in res.sizes:
        rss = res.sizes["256"].median["max_rss_mib"]
        out["peak_rss_mib_at_256"] = judged(rss, at_most=TARGET_RSS_MIB)
    return out


def run(settings: Settings, say: Say, directory: Path | None = None) -> Results:
    def body(work: Path) -> Results:
        info = announce_machine(work, say)
        res = Results(machine=info, settings=asdict(settings))
        res.bare_host_cpu_ms = bare_host_cpu_ms(settings.host_seconds)
        kinds = {IDLE: res.sizes} if settings.idle else {}
        if settings.working:
            kinds[WORKING] = res.working_sizes
            bare = BareHost(work / "bare-host", working_host(0))
            res.bare_working_host_cpu_ms = bare.samples(20)[1]
        for sizes in kinds.values():
            for n in settings.sizes:
                sizes[str(n)] = Size(sessions=n, ideal_turns_per_s=n / settings.host_seconds)
        runs = [(kind, n) for n in settings.sizes for kind in kinds]
        for r in range(settings.repeats):
            for kind, n in runs[r % len(runs) :] + runs[: r % len(runs)]:
                load = load_average()
                say(f"repeat {r + 1}/{settings.repeats}: {n} {kind} session(s), load {load}")
                point = run_fleet(
                    work / f"r{r}-n{n}-{kind}", n, settings, say, False, working=kind == WORKING
                )
                kinds[kind][str(n)].runs.append(point)
                say(
                    f"  {point.turns_per_s:,.1f} turns/s = {point.ratio_to_ideal:.0%} of ideal; "
                    f"cycle {point.cycle_s:.3f} s, gap {point.gap_ms:.1f} ms, controller "
                    f"{point.controller_cpu_ms_per_turn:.1f} ms CPU/turn, with children "
                    f"{point.cpu_with_children_ms_per_turn:.1f}, peak RSS "
                    f"{point.max_rss_mib:.0f} MiB, first round {point.first_round_s:.1f} s"
                )
        for size in res.sizes.values():
            _summarise(size)
        for size in res.working_sizes.values():
            _summarise(size)
            # turnkeeper's own cost of a working turn: its CPU with children, the host's left out.
            with_children = size.median["cpu_with_children_ms_per_turn"]
            size.median["cost_cpu_ms_per_turn"] = with_children - res.bare_working_host_cpu_ms
        if settings.profile and profiler_available(say):
            n = max(settings.sizes)
            say(f"profiling one more run of {n} sessions under py-spy ...")
            point, phases = run_fleet(work / f"profile-n{n}", n, settings, say, profile=True)
            res.profile = {"sessions": n, "run": asdict(point), "phases": phases}
        res.machine["loadavg_end"] = load_average()
        res.targets = _targets(res)
        return res

    return run_in_directory(directory, "fleet-bench-", body)


def _size_table(title: str, sizes: dict[str, Size], working: bool) -> Table:
    """One row per size; for working turns, also turnkeeper's own CPU per turn (its
    CPU with children, the bare working host's left out)."""
    table = Table(title=title)
    own = ("turnkeeper ms/turn",) if working else ()
    add_columns(
        table,
        "sessions",
        "turns/s",
        "of ideal",
        "cycle s",
        "gap ms",
        "ctl CPU ms/turn",
        "children ms/turn",
        *own,
        "first round s",
        "peak RSS MiB",
        "runs",
    )
    for key, size in sizes.items():
        m, lo_hi = size.median, size.spread["ratio_to_ideal"]
        table.add_row(
            key,
            f"{m['turns_per_s']:,.1f}",
            f"{m['ratio_to_ideal']:.1%} ({lo_hi[0]:.0%}-{lo_hi[1]:.0%})",
            f"{m['cycle_s']:.3f}",
            f"{m['gap_ms']:.1f}",
            f"{m['controller_cpu_ms_per_turn']:.2f}",
            f"{m['children_cpu_ms_per_turn']:.2f}",
            *((f"{m['cost_cpu_ms_per_turn']:.2f}",) if working else ()),
            f"{m['first_round_s']:.1f}",
            f"{m['max_rss_mib']:.0f}",
            str(len(size.runs)),
        )
    return table


def render(res: Results, console: Console) -> None:
    kinds = {IDLE: res.sizes, WORKING: res.working_sizes}
    title = "turnkeeper run, N sessions x `sleep 1` hosts (medians of repeats)"
    if res.sizes:
        console.print(_size_table(title, res.sizes, working=False))
    if res.working_sizes:
        title = "working turns: `sleep 1`, then a line appended and the todo done"
        console.print(_size_table(title, res.working_sizes, working=True))
    steps = Table(title="where a turn's wall time goes: median ms between its events")
    columns = {
        f"{key} {kind}": size for kind, sizes in kinds.items() for key, size in sizes.items()
    }
    add_columns(steps, "from one event to the next", *columns)
    names = {step: None for size in columns.values() for step in size.runs[0].steps_ms}
    for step in names:
        cells = [
            statistics.median(r.steps_ms.get(step, 0.0) for r in size.runs)
            for size in columns.values()
        ]
        steps.add_row(step, *(f"{ms:.1f}" for ms in cells))
    console.print(steps)
    console.print(f"one bare `sleep` costs {res.bare_host_cpu_ms:.2f} ms CPU (exec and exit)")
    if res.working_sizes:
        console.print(f"one bare working host costs {res.bare_working_host_cpu_ms:.2f} ms CPU")
    render_targets(res.targets, console)
    render_machine(res.machine, console)
    if res.profile:
        for phase, profile in res.profile["phases"].items():
            console.print(f"[bold]profile of {res.profile['sessions']} sessions: {phase}[/bold]")
            render_pyspy(profile, console)


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_arguments(__doc__, "one run per size (minutes)")
    parser.add_argument("--profile", action="store_true", help="py-spy one run of the largest")
    parser.add_argument("--sizes", help="comma-separated session counts (default 1,16,64,256)")
    parser.add_argument("--no-working", action="store_true", help="no working turns")
    parser.add_argument("--no-idle", action="store_true", help="working turns only")
    args = parser.parse_args(argv)
    settings = chosen_settings(args, FULL, QUICK, SMOKE)
    if args.no_idle and args.no_working:
        parser.error("--no-idle and --no-working leave nothing to run")
    settings = replace(
        settings, profile=args.profile, working=not args.no_working, idle=not args.no_idle
    )
    if args.sizes:
        settings = replace(settings, sizes=tuple(int(n) for n in args.sizes.split(",")))
    return run_and_print(args, settings, run, render)


if __name__ == "__main__":
    raise SystemExit(main())
