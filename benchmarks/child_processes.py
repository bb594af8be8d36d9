"""How many processes one turn of the real ``turnkeeper run`` starts, by program.

The run is started under ``strace -f -ff -e trace=execve`` (one trace file per
process), and every process that ran a program is counted by the programs it ran
(a git process by its subcommand: ``git add``, ``git commit-tree`` ...; the host's
launcher, a shell that joins the turn's cgroup and then ``exec``-s the host, as
``sh > <host>``). Two runs of different lengths
on the same project: the difference of their counts over the difference of their
turns is what a steady turn starts — the controller's start-up and its first turn
are in both runs and cancel out. strace slows the run down; the counts do not
depend on its speed, which is why they come from their own runs and not from the
measured ones. Without strace installed there is nothing to count: the result says
so and the benchmark goes on.
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks._common import Say, add_columns
from benchmarks.real_run import Project, RunProcess, finished

STRACE = shutil.which("strace")
# An execve that succeeded: its program, then its argument vector (strings up to -s).
EXECVE = re.compile(r'^execve\("([^"]*)", \[(.*?)\](?:\.\.\.)?, .*\) = 0$')
STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
GIT_OPTIONS_WITH_VALUE = frozenset({"-c", "-C", "--git-dir", "--work-tree", "--namespace"})


@dataclass
class ExecCount:
    available: bool  # strace was installed
    turns: list[int] = field(default_factory=list)  # the two runs' lengths
    # Processes a steady turn starts, by the programs each ran ("git <subcommand>").
    per_turn: dict[str, float] = field(default_factory=dict)
    processes_per_turn: float = 0.0
    git_per_turn: float = 0.0


def _program(path: str, argv: list[str]) -> str:
    """``path``'s name; for git, ``git <subcommand>`` (its options skipped)."""
    name = Path(path).name
    if name != "git":
        return name
    rest = iter(argv[1:])
    for arg in rest:
        if arg in GIT_OPTIONS_WITH_VALUE:
            next(rest, None)
        elif not arg.startswith("-"):
            return f"git {arg}"
    return "git"


def count_traces(directory: Path) -> Counter[str]:
    """The processes in ``directory``'s trace files that ran a program, each named by
    the programs it ran in turn (``sh > sh``: a shell that ``exec``-ed another); a
    thread or a fork that ran nothing is no process of its own here."""
    found: Counter[str] = Counter()
    for trace in directory.glob("trace.*"):
        programs = []
        for line in trace.read_text(errors="replace").splitlines():
            match = EXECVE.match(line)
            if match:
                programs.append(_program(match.group(1), STRING.findall(match.group(2))))
        if programs:
            found[" > ".join(programs)] += 1
    return found


def _traced_run(root: Path, turns: int, into: Path) -> Counter[str]:
    into.mkdir(parents=True)
    strace = [str(STRACE), "-f", "-ff", "--seccomp-bpf", "-s", "256", "-e", "trace=execve"]
    args = ["--json", "--max-turns", str(turns), "--idle-turns", "1000000"]
    run = RunProcess(
        root,
        args,
        into / "run",
        timed=False,
        under=[*strace, "-o", str(into / "trace")],
    )
    finished(run.wait(timeout_s=120 + 10 * turns), run, turns)
    return count_traces(into)


def count_execs(project: Project, short: int, long: int, work: Path, say: Say) -> ExecCount:
    """The processes a steady turn of ``project``'s session starts (see the module's
    docstring); its goal must have a todo for every turn of both runs, and more. The
    traces go under ``work``."""
    if STRACE is None:
        say("strace is not installed: the processes a turn starts are not counted")
        return ExecCount(available=False)
    few = _traced_run(project.root, short, work / "trace-short")
    many = _traced_run(project.root, long, work / "trace-long")
    extra = long - short
    per_turn = {k: (many[k] - few[k]) / extra for k in sorted(many.keys() | few.keys())}
    per_turn = {k: v for k, v in per_turn.items() if v != 0}
    return ExecCount(
        available=True,
        turns=[short, long],
        per_turn=per_turn,
        processes_per_turn=sum(per_turn.values()),
        git_per_turn=sum(v for k, v in per_turn.items() if k.split()[0] == "git"),
    )


def render_counts(counts: ExecCount, console: Console) -> None:
    """The processes a turn starts, by program."""
    if not counts.available:
        console.print("processes per turn: not counted (strace is not installed)")
        return
    short, long = counts.turns
    title = f"processes a working turn starts (traced runs of {short} and {long} turns)"
    table = Table(title=title)
    add_columns(table, "program(s) the process ran", "per turn")
    for program, n in counts.per_turn.items():
        table.add_row(program, f"{n:.2f}")
    table.add_row("every process", f"{counts.processes_per_turn:.2f}")
    table.add_row("of which git", f"{counts.git_per_turn:.2f}")
    console.print(table)
