"""The working turn: the real ``turnkeeper run`` on turns that change their workspace.

A turn that changes nothing reuses its workspace's last snapshot; a turn that does
work takes a new one (the session index's ``add -A``, its tree, a commit and its
ref, through libgit2 in the controller, or git's own processes where libgit2 would
differ) and retention prunes the oldest: what a git process costs is in the
controller's reaped children, not its own CPU, so both are read. Here every turn's host
(:func:`benchmarks.real_run.working_host`) appends a line of its own to a file of the
workspace and exits 0, which completes the turn's todo: the goal has a todo for every
turn of the run (and one more, so it does not close before the run's budget is
spent). The project is built once and put back as it was built before every run
(:class:`PristineProject`), so every run starts from the same goal and workspace.

* :class:`WorkingTurns` — one run, measured as the real-turn benchmark measures
  its no-op turns: wall per turn in the steady window, the controller's own CPU and
  its reaped children's (the hosts, their launchers and git), from
  ``/proc/<pid>/stat``;
* :class:`BareHost` — the same host command spawned from Python: its wall and the
  CPU it costs (from this process's children's rusage), which is subtracted from
  the children's CPU so what is left is turnkeeper's own cost of a turn, git included.
"""

from __future__ import annotations

import resource
import shutil
import sqlite3
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks._common import Say
from benchmarks.real_run import (
    Project,
    cpu_between,
    finished,
    make_project,
    started_run,
    working_host,
)
from benchmarks.turn_log import read_turns, steady_window, steps_in

TODO_COMPLETED = "todo_completed"


@dataclass
class WorkingRun:
    """One run's steady window, per turn."""

    wall_ms: float
    controller_cpu_ms: float  # the controller's own threads
    children_cpu_ms: float  # its reaped children: host, launcher, git
    window_turns: int
    todos_done: int  # in the whole run: one per turn when every turn did its work
    steps_ms: dict[str, float] = field(default_factory=dict)  # see turn_log.steps_in


def todos_done(database: Path) -> int:
    """The todos completed in a store's SQLite file, read with plain ``sqlite3``."""
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30)
    try:
        query = "SELECT COUNT(*) FROM events WHERE type = ?"
        (n,) = conn.execute(query, (TODO_COMPLETED,)).fetchone()
        return int(n)
    finally:
        conn.close()


class PristineProject:
    """A project of one session on the working host, with ``todos`` todos, built once
    under ``work``; :meth:`restore` puts its directory and its workspace back as they
    were built (the workspace's paths are in the store, so they stay where they are)."""

    def __init__(self, work: Path, say: Say, todos: int) -> None:
        self.todos = todos
        self.project = make_project(work / "live", 1, working_host(), say, todos=todos)
        self._parts = [self.project.root, work / "live" / "workspaces"]
        self._copies = work / "pristine"
        for part in self._parts:
            shutil.copytree(part, self._copies / part.name, symlinks=True)

    def restore(self) -> Project:
        for part in self._parts:
            shutil.rmtree(part)
            shutil.copytree(self._copies / part.name, part, symlinks=True)
        return self.project


class WorkingTurns:
    """Runs of working turns under ``work``, each on the same project as it was built,
    whose goal has ``todos`` todos: more than any run's turns."""

    def __init__(self, work: Path, say: Say, todos: int, code: Path | None = None) -> None:
        self.work = work
        self.pristine = PristineProject(work, say, todos)
        self.code = code  # the turnkeeper package's directory that runs (None: installed)
        self.runs = 0
        self.profiles: dict[str, Path] = {}  # the last run's py-spy output, by phase

    def measure(self, turns: int, profile: bool = False) -> WorkingRun:
        """One ``turnkeeper run --max-turns turns`` on the project as it was built;
        ``profile``: under py-spy, its steady turns' samples in ``self.profiles``."""
        if turns >= self.pristine.todos:
            raise ValueError(f"{turns} turns need more than the goal's {self.pristine.todos} todos")
        self.runs += 1
        project = self.pristine.restore()
        args = ["--json", "--max-turns", str(turns), "--idle-turns", "1000000"]
        logs = self.work / f"run-{self.runs}"
        run = started_run(
            project, args, logs, profile=profile, sessions=1, timeout_s=60 + turns, code=self.code
        )
        outcome = finished(run.wait(timeout_s=60 + turns), run, turns)
        self.profiles = outcome.profiles
        log = read_turns(project.database)
        window = steady_window(log)
        own, children, _ = cpu_between(outcome.samples, window.start, window.end)
        return WorkingRun(
            wall_ms=window.seconds * 1000 / window.turns,
            controller_cpu_ms=own * 1000 / window.turns,
            children_cpu_ms=children * 1000 / window.turns,
            window_turns=window.turns,
            todos_done=todos_done(project.database),
            steps_ms=steps_in(log, window),
        )


def children_cpu_s() -> float:
    """The CPU this process's reaped children have used so far (user + sys)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class BareHost:
    """A host command spawned from Python with ``subprocess.run``, in a directory of
    its own, ``{turn_id}`` replaced by a different id every time, as a turn gets it."""

    def __init__(self, work: Path, command: list[str]) -> None:
        self.directory = work
        self.directory.mkdir(parents=True, exist_ok=True)
        self.command = command
        self.spawns = 0

    def _spawn(self) -> None:
        self.spawns += 1
        turn_id = f"turn-{self.spawns:016x}"
        argv = [arg.replace("{turn_id}", turn_id) for arg in self.command]
        subprocess.run(argv, cwd=self.directory, check=True)

    def samples(self, n: int) -> tuple[float, float]:
        """``n`` spawns: the median wall ms of one and the mean CPU ms one costs (its
        exec, its work and its exit, from our children's rusage)."""
        walls = []
        before = children_cpu_s()
        for _ in range(n):
            t0 = time.perf_counter()
            self._spawn()
            walls.append((time.perf_counter() - t0) * 1000)
        used = children_cpu_s() - before
        return statistics.median(walls), used * 1000 / n
