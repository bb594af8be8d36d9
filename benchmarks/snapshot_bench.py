"""Snapshot benchmark: what one working turn's snapshot costs, every process included.

A working turn (a line appended to a file of its workspace) takes a new snapshot and
retention prunes the oldest (runtime/workspaces/snapshots.py ``capture``, retain 20).
Two ways side by side, interleaved in rounds, on workspaces of the same shape (a
fresh ``git init`` with one commit, as the real-turn benchmark's sessions have):

* **in process** — the tree, commit, ref and pruning written through libgit2
  (runtime/workspaces/libgit.py), as a turn does them;
* **git's processes** — the same snapshot with libgit2 set aside (``GIT_CONFIG_COUNT=0``
  in the environment, configuration libgit2 does not read, sends it to git): ``add``,
  ``ls-files``, ``write-tree``, ``commit-tree``, ``update-ref``, ``for-each-ref``,
  ``update-ref -d``.

Per snapshot: wall, and CPU = this process's (``time.process_time``: every thread)
plus its reaped children's (``RUSAGE_CHILDREN``: git), the medians of the rounds'
means. Target: at most 5 ms of CPU per working turn's snapshot, every process
included.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from dataclasses import dataclass, field
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
    git_workspace,
    judged,
    load_average,
    render_machine,
    render_targets,
    run_and_print,
    run_in_directory,
)
from turnkeeper.runtime.workspaces.snapshots import capture, forget

CPU_TARGET_MS = 5.0
SID = "00000000-0000-4000-8000-00000000be0c"
WAYS = ("in_process", "git_processes")


@dataclass(frozen=True)
class Settings:
    rounds: int
    per_round: int  # snapshots per way and round


@dataclass
class SnapshotResults:
    machine: dict[str, Any]
    settings: dict[str, int]
    wall_ms: dict[str, float] = field(default_factory=dict)
    cpu_ms: dict[str, float] = field(default_factory=dict)  # with children
    children_cpu_ms: dict[str, float] = field(default_factory=dict)
    cpu_ratio: float = 0.0  # git's processes over in process
    targets: dict[str, Any] = field(default_factory=dict)


def _children_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Workspace:
    """A workspace whose every turn appends a line and is snapshotted."""

    def __init__(self, path: Path, via_git: bool) -> None:
        self.path = git_workspace(path)
        self.via_git = via_git
        self.turns = 0
        self.take()  # the session index seeded: once per session, not per turn

    def take(self) -> None:
        self.turns += 1
        with (self.path / "work.log").open("a") as handle:
            handle.write(f"turn {self.turns}\n")
        # A fingerprint taken within git's racy window is not trusted, so each turn's
        # change is seen; forget() drops the last snapshot so none is ever reused.
        forget(self.path, SID)
        if self.via_git:
            os.environ["GIT_CONFIG_COUNT"] = "0"
        try:
            snap = capture(self.path, SID, f"turn-{self.turns}", self.turns, None, retain=20)
        finally:
            os.environ.pop("GIT_CONFIG_COUNT", None)
        assert snap is not None

    def measure(self, n: int) -> tuple[float, float, float]:
        """``n`` snapshots: mean wall ms, CPU ms (with children) and children's CPU ms."""
        wall0, cpu0, kids0 = time.perf_counter(), time.process_time(), _children_s()
        for _ in range(n):
            self.take()
        kids = _children_s() - kids0
        cpu = time.process_time() - cpu0 + kids
        return (
            (time.perf_counter() - wall0) * 1000 / n,
            cpu * 1000 / n,
            kids * 1000 / n,
        )


def run(settings: Settings, say: Say, directory: Path | None = None) -> SnapshotResults:
    return run_in_directory(directory, "snapshot-bench-", lambda w: _run(settings, say, w))


def _run(settings: Settings, say: Say, work: Path) -> SnapshotResults:
    info = announce_machine(work, say)
    os.environ.pop("GIT_CONFIG_COUNT", None)
    spaces = {way: Workspace(work / way, via_git=way == "git_processes") for way in WAYS}
    # Past retention first, so every measured snapshot also prunes one.
    for space in spaces.values():
        space.measure(21)
    rows: dict[str, list[tuple[float, float, float]]] = {way: [] for way in WAYS}
    for n in range(settings.rounds):
        order = WAYS if n % 2 == 0 else WAYS[::-1]
        for way in order:
            rows[way].append(spaces[way].measure(settings.per_round))
        inproc, via_git = rows["in_process"][-1], rows["git_processes"][-1]
        say(
            f"round {n + 1}/{settings.rounds}: in process {inproc[1]:.2f} ms CPU "
            f"({inproc[0]:.2f} ms wall), git's processes {via_git[1]:.2f} ms CPU "
            f"({via_git[0]:.2f} ms wall)"
        )
    info["loadavg_end"] = load_average()
    results = SnapshotResults(
        machine=info, settings={"rounds": settings.rounds, "per_round": settings.per_round}
    )
    for way in WAYS:
        results.wall_ms[way] = statistics.median(r[0] for r in rows[way])
        results.cpu_ms[way] = statistics.median(r[1] for r in rows[way])
        results.children_cpu_ms[way] = statistics.median(r[2] for r in rows[way])
    results.cpu_ratio = statistics.median(
        g[1] / i[1] for g, i in zip(rows["git_processes"], rows["in_process"], strict=True)
    )
    results.targets = {
        "snapshot_cpu_ms_with_children": judged(results.cpu_ms["in_process"], at_most=CPU_TARGET_MS)
    }
    return results


def render(results: SnapshotResults, console: Console) -> None:
    table = Table(title="one working turn's snapshot and retention (medians of rounds)")
    add_columns(table, "way", "wall ms", "CPU ms with children", "children's CPU ms")
    for way in WAYS:
        table.add_row(
            way.replace("_", " "),
            f"{results.wall_ms[way]:.2f}",
            f"{results.cpu_ms[way]:.2f}",
            f"{results.children_cpu_ms[way]:.2f}",
        )
    console.print(table)
    console.print(f"CPU, git's processes / in process: {results.cpu_ratio:.1f}x")
    render_targets(results.targets, console)
    render_machine(results.machine, console)


FULL = Settings(rounds=7, per_round=40)
QUICK = Settings(rounds=5, per_round=20)
SMOKE = Settings(rounds=2, per_round=3)


def main() -> int:
    args = benchmark_arguments(__doc__, "fewer rounds (seconds)").parse_args()
    settings = chosen_settings(args, FULL, QUICK, SMOKE)
    return run_and_print(args, settings, run, render)


if __name__ == "__main__":
    raise SystemExit(main())
