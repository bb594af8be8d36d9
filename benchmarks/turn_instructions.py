"""Instructions per real turn: the controller of ``turnkeeper run`` counted by callgrind.

Run ``python -m benchmarks.turn_instructions`` (``--quick``, ``--smoke`` for the tests,
``--json``; ``--before COMMIT`` to count that commit's code beside this one). Needs
valgrind (``apt-get install valgrind``).

CPU time per turn (``real_turn_bench``) moves with the machine's load and its phase: on
one machine it has measured anywhere from 2 to 9 ms for the same code. The number of
instructions the controller executes per turn does not: it is the figure to compare
two codes by, on any machine. What runs is what ``real_turn_bench`` runs — a project
made by ``turnkeeper init`` in a git repository, one session in a git workspace, host
``{"command": ["true"]}`` — and ``turnkeeper run --json --max-turns N --idle-turns
1000000`` — the installed ``turnkeeper`` script — runs under ``valgrind
--tool=callgrind`` (the controller only: its hosts and git are started without
valgrind). Two runs per code, of ``short`` and ``long`` turns, side by side; their
difference over ``long - short`` is the instructions of one steady turn, start-up and
the first turn (the first snapshot) cancelling out.
"""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
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
    load_average,
    render_machine,
    run_and_print,
    run_in_directory,
)
from benchmarks.commands_bench import code_of, this_code
from benchmarks.real_run import RunProcess, finished, make_project

VALGRIND = "valgrind"
# Under callgrind Python runs ~50 times slower: a run's start-up alone takes ~20 s.
RUN_TIMEOUT_S = 900.0


@dataclass
class Settings:
    short: int  # turns of the shorter run
    long: int  # turns of the longer run
    before: str | None = None  # a commit, or a directory holding a turnkeeper/ package


FULL = Settings(short=50, long=250)
QUICK = Settings(short=20, long=120)
SMOKE = Settings(short=2, long=4)


@dataclass
class Count:
    """One code's counts: the controller's instructions in each run, and per turn."""

    code: str
    runs: dict[str, int] = field(default_factory=dict)  # turns (as text) -> instructions
    per_turn: float = 0.0


@dataclass
class Results:
    machine: dict[str, Any]
    settings: dict[str, Any]
    this: Count | None = None
    before: Count | None = None
    ratio_to_before: float | None = None


class CallgrindError(RuntimeError):
    """A run under callgrind left no count."""


def totals(output: Path) -> int:
    """The total instruction count callgrind wrote at the end of ``output``."""
    for line in output.read_text(errors="replace").splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise CallgrindError(f"{output} holds no totals line")


def count_run(code: Path, work: Path, turns: int, say: Say) -> int:
    """The controller's instructions in one ``turnkeeper run --max-turns turns``."""
    project = make_project(work, 1, ["true"], say)
    out = work / "callgrind"
    out.mkdir()
    callgrind = [VALGRIND, "--tool=callgrind", f"--callgrind-out-file={out}/callgrind.%p"]
    args = ["--json", "--max-turns", str(turns), "--idle-turns", "1000000"]
    run = RunProcess(project.root, args, work / "run", code=code, under=callgrind)
    finished(run.wait(timeout_s=RUN_TIMEOUT_S), run, turns)
    # valgrind runs the program as the process it was started as: the file named by
    # that pid is the controller's (a forked child's, before its exec, is another).
    return totals(out / f"callgrind.{run.pid}")


def count_code(name: str, code: Path, work: Path, settings: Settings, say: Say) -> Count:
    """Both runs of one code, side by side (callgrind runs a process on one core)."""
    say(f"{name}: runs of {settings.short} and {settings.long} turns under callgrind ...")
    turns = (settings.short, settings.long)
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = list(pool.map(lambda n: count_run(code, work / f"{name}-{n}", n, say), turns))
    per_turn = (counts[1] - counts[0]) / (settings.long - settings.short)
    say(f"{name}: {per_turn:,.0f} instructions per turn (load {load_average()[0]})")
    return Count(
        code=str(code), runs=dict(zip(map(str, turns), counts, strict=True)), per_turn=per_turn
    )


def run(settings: Settings, say: Say, directory: Path | None = None) -> Results:
    if shutil.which(VALGRIND) is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")

    def body(work: Path) -> Results:
        res = Results(machine=announce_machine(work, say), settings=asdict(settings))
        if settings.before is not None:
            res.before = count_code("before", code_of(settings.before, work), work, settings, say)
        res.this = count_code("this", this_code(), work, settings, say)
        if res.before is not None and res.before.per_turn > 0:
            res.ratio_to_before = res.this.per_turn / res.before.per_turn
        res.machine["loadavg_end"] = load_average()
        return res

    return run_in_directory(directory, "turn-instructions-", body)


def render(res: Results, console: Console) -> None:
    table = Table(title="the controller's instructions per steady turn (callgrind)")
    add_columns(table, "code", "runs (turns: instructions)", "per turn")
    for name, count in (("this code", res.this), ("--before", res.before)):
        if count is not None:
            runs = ", ".join(f"{turns}: {n:,}" for turns, n in count.runs.items())
            table.add_row(f"{name} ({count.code})", runs, f"{count.per_turn:,.0f}")
    if res.ratio_to_before is not None:
        table.add_row("this code / --before", "", f"{res.ratio_to_before:.3f}x")
    console.print(table)
    render_machine(res.machine, console)


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_arguments(__doc__, "runs of 20 and 120 turns (a minute a code)")
    parser.add_argument("--before", help="also count this commit's code (or a directory's)")
    args = parser.parse_args(argv)
    settings = chosen_settings(args, FULL, QUICK, SMOKE)
    if args.before:
        settings = replace(settings, before=args.before)
    return run_and_print(args, settings, run, render)


if __name__ == "__main__":
    raise SystemExit(main())
