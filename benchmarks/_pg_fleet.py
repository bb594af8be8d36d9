"""Turns per second with K real ``turnkeeper run --worker`` processes on one database.

* :func:`make_project` — ``turnkeeper init --database-url`` in a git repository, then
  ``sessions`` sessions, each on a goal of its own with ``todos`` todos, each in a git
  workspace of its own, written through the services ``goal add``, ``todo add`` and
  ``session create`` use. The host is a two-line shell script that prints a
  ``result`` event with ``todo_done: true``: every turn completes one todo, so each
  session runs exactly ``todos`` turns, its goal closes and the workers, finding
  nothing more to claim, stop by themselves (``--idle-exit``).
* :func:`run_fleet` — K workers started together (the installed ``turnkeeper``, in
  child processes, each ``--max-sessions ceil(sessions / K)`` so the work spreads);
  their ``/proc`` sampled (their own CPU and their hosts'), and beside them the CPU of
  every server backend connected to the run's database (``pg_stat_activity`` for the
  pids, ``/proc/<pid>/stat`` for their CPU) and the machine's busy time
  (``/proc/stat``). Turns per second over the window in which every session is
  running: from the moment each has begun its second turn to the moment the first
  one begins its last. The database's transactions from ``pg_stat_database``.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from benchmarks._common import Say, git_workspace
from benchmarks._pg_peers import admin, libpq
from benchmarks.real_run import (
    COMMAND_TIMEOUT_S,
    RunProcess,
    cpu_between,
    turnkeeper_command,
    user_env,
)
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.store import open_store

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
AGENT = """#!/bin/sh
printf '{"kind": "result", "data": {"summary": "done", "todo_done": true}}\\n'
"""
IDLE_EXIT_S = 2.0
POLL_S = 0.5


@dataclass
class FleetPoint:
    workers: int
    sessions: int
    turns: int
    build_s: float
    wall_s: float  # the first worker's start to the last one's exit
    window: str  # "all sessions running", or "whole run" for a run too small for that
    window_s: float
    window_turns: int
    turns_per_s: float  # in the window
    whole_run_turns_per_s: float  # every turn, first acceptance to last end
    ratio_to_one: float = 0.0
    # CPU over the window, in cores (CPU seconds per second of wall time).
    workers_cores: float = 0.0  # the workers' own threads, all K together
    busiest_worker_cores: float = 0.0
    hosts_cores: float = 0.0  # the agent scripts the workers reaped
    database_cores: float = 0.0  # the backends serving the run's database
    machine_busy_cores: float = 0.0  # every process on the machine, ours or not
    workers_cpu_ms_per_turn: float = 0.0
    database_cpu_ms_per_turn: float = 0.0
    # pg_stat_database's xact_commit over the whole run: every transaction the server
    # committed, reads run outside an explicit transaction included (one each).
    database_xacts_per_turn: float = 0.0
    database_xacts_per_s: float = 0.0
    limit: str = ""
    why: str = ""


@dataclass(frozen=True)
class Project:
    root: Path
    session_ids: list[str]
    build_s: float


def make_project(work: Path, url: str, sessions: int, todos: int) -> Project:
    t0 = time.perf_counter()
    root = git_workspace(work / "project")
    subprocess.run(
        [*turnkeeper_command(), "init", "--database-url", url],
        cwd=root,
        env=user_env(),
        check=True,
        capture_output=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    agent = work / "agent.sh"
    agent.write_text(AGENT)
    host = {"command": ["/bin/sh", str(agent)], "event_format": "jsonl"}
    template = git_workspace(work / "workspace-template")
    store = open_store(url)
    ids = []
    try:
        goals, service = GoalService(store), SessionService(store)
        for i in range(sessions):
            workspace = work / "workspaces" / f"ws-{i:04d}"
            shutil.copytree(template, workspace, symlinks=True)
            goal_id = f"goal-{i:04d}"
            goals.create(CreateGoal(goal_id=goal_id, title=f"fleet goal {i}"))
            for t in range(todos):
                todo = TodoSpec(todo_id=f"todo-{i:04d}-{t:03d}", title=f"step {t}")
                goals.submit(goal_id, AddTodo(todo=todo))
            ids.append(service.create(goal_id, workspace, "subprocess", host).session_id)
    finally:
        store.close()
    return Project(root=root, session_ids=ids, build_s=time.perf_counter() - t0)


# -- the database's CPU ----------------------------------------------------------------


def _cpu_of(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def _machine_busy_s() -> float:
    """CPU seconds every core of the machine has spent busy since boot."""
    parts = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in parts[:8])
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


@dataclass
class DatabaseCpu:
    """Samples, every ``every_s``, the CPU of the server backends connected to
    ``database`` (a backend that exits keeps its last reading) and the machine's busy
    time: ``samples`` holds (time.time(), backends' CPU s, machine busy s)."""

    server: str
    database: str
    every_s: float = 0.1
    samples: list[tuple[float, float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._conn = admin(self.server)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        query = "SELECT pid FROM pg_stat_activity WHERE datname = %s"
        while not self._stop.is_set():
            for (pid,) in self._conn.execute(query, (self.database,)).fetchall():
                cpu = _cpu_of(int(pid))
                if cpu is not None:
                    self._seen[int(pid)] = cpu
            self.samples.append((time.time(), sum(self._seen.values()), _machine_busy_s()))
            self._stop.wait(self.every_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=COMMAND_TIMEOUT_S)
        self._conn.close()

    def between(self, t0: float, t1: float) -> tuple[float, float]:
        """(backends' CPU s, machine busy s) between the samples nearest ``t0``, ``t1``."""
        if len(self.samples) < 2:
            return 0.0, 0.0
        first = min(self.samples, key=lambda s: abs(s[0] - t0))
        last = min(self.samples, key=lambda s: abs(s[0] - t1))
        return last[1] - first[1], last[2] - first[2]


def commits(server: str, database: str) -> int:
    with admin(server) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (database,)
        ).fetchone()
    return int(row[0]) if row else 0


# -- the turns, from the session streams -------------------------------------------------


def turn_times(url: str) -> dict[str, list[tuple[float, float | None]]]:
    """Every session's turns in order: (accepted, ended) in seconds since the epoch,
    from the events' own timestamps (the controller's clock when it decided them)."""
    import json

    import psycopg

    with psycopg.connect(libpq(url)) as conn:
        rows = conn.execute(
            "SELECT stream_id, type, payload FROM events WHERE type IN "
            "('turn.accepted', 'turn.completed', 'turn.failed', 'turn.lost', 'turn.abandoned')"
            " ORDER BY stream_id, seq"
        ).fetchall()
    out: dict[str, list[tuple[float, float | None]]] = {}
    for stream, kind, payload in rows:
        at = datetime.fromisoformat(json.loads(payload)["at"].replace("Z", "+00:00")).timestamp()
        turns = out.setdefault(stream, [])
        if kind == "turn.accepted":
            turns.append((at, None))
        elif turns:
            turns[-1] = (turns[-1][0], at)
    return out


def _window(turns: dict[str, list[tuple[float, float | None]]]) -> tuple[float, float, int, str]:
    """(start, end, turns accepted in (start, end], which window): while every session
    is running — from the moment each has begun its second turn to the moment the first
    one begins its last; when that holds less than a turn per session (tiny runs), the
    whole run, from the first acceptance to the last end."""
    if not turns:
        raise RuntimeError("no turns were recorded")
    start = max(ts[1][0] if len(ts) > 1 else ts[0][0] for ts in turns.values())
    end = min(ts[-1][0] for ts in turns.values())
    inside = sum(1 for ts in turns.values() for at, _ in ts if start < at <= end)
    if end > start and inside >= len(turns):
        return start, end, inside, "all sessions running"
    first = min(ts[0][0] for ts in turns.values())
    last = max(t[1] or t[0] for ts in turns.values() for t in ts)
    return first, last, sum(len(ts) for ts in turns.values()), "whole run"


# -- one run ---------------------------------------------------------------------------


def run_fleet(
    work: Path,
    server: str,
    database: str,
    url: str,
    workers: int,
    sessions: int,
    todos: int,
    say: Say,
    under: Sequence[Sequence[str]] = (),
) -> FleetPoint:
    """``under``: per worker, a command it is started under (``ip netns exec NAME``:
    a machine of its own, see ``_pg_netns``); none: all on this one."""
    project = make_project(work, url, sessions, todos)
    say(f"   {sessions} sessions x {todos} todos built in {project.build_s:.1f} s")
    per_worker = math.ceil(sessions / workers)
    args = [
        "--worker", "--json", "--max-sessions", str(per_worker),
        "--idle-exit", str(IDLE_EXIT_S), "--poll", str(POLL_S),
    ]  # fmt: skip
    time.sleep(1.1)  # the build's statistics reach pg_stat_database (flushed each second)
    commits0 = commits(server, database)
    sampler = DatabaseCpu(server, database)
    t0 = time.perf_counter()
    runs = [
        RunProcess(
            project.root,
            args,
            work / f"worker-{i}",
            timed=False,
            under=under[i] if under else (),
        )
        for i in range(workers)
    ]
    outcomes = []
    try:
        outcomes = [r.wait(timeout_s=600.0) for r in runs]
    finally:
        for r in runs:
            r.kill()  # only if a wait above failed: our own child, by pid
        sampler.stop()
    wall = time.perf_counter() - t0
    ran = sum(int(o.summary.get("turns", 0)) for o in outcomes)
    expected = sessions * todos
    if any(o.returncode != 0 for o in outcomes) or ran != expected:
        logs = "\n".join(r.log() for r in runs)
        raise RuntimeError(f"{workers} worker(s) ran {ran} of {expected} turns\n{logs}")
    time.sleep(0.5)
    total_commits = commits(server, database) - commits0

    turns = turn_times(url)
    start, end, inside, window = _window(turns)
    span = max(end - start, 1e-6)
    first = min(ts[0][0] for ts in turns.values())
    last = max(t[1] or t[0] for ts in turns.values() for t in ts)
    own = [cpu_between(o.samples, start, end) for o in outcomes]
    db_cpu, busy = sampler.between(start, end)
    point = FleetPoint(
        workers=workers,
        sessions=sessions,
        turns=ran,
        build_s=project.build_s,
        wall_s=wall,
        window=window,
        window_s=span,
        window_turns=inside,
        turns_per_s=inside / span,
        whole_run_turns_per_s=ran / (last - first) if last > first else 0.0,
        workers_cores=sum(o[0] for o in own) / span,
        busiest_worker_cores=max(o[0] for o in own) / span,
        hosts_cores=sum(o[1] for o in own) / span,
        database_cores=db_cpu / span,
        machine_busy_cores=busy / span,
        workers_cpu_ms_per_turn=sum(o[0] for o in own) * 1000 / max(inside, 1),
        database_cpu_ms_per_turn=db_cpu * 1000 / max(inside, 1),
        database_xacts_per_turn=total_commits / ran,
        database_xacts_per_s=total_commits / wall,
    )
    point.limit, point.why = verdict(point)
    return point


def verdict(p: FleetPoint) -> tuple[str, str]:
    """Which side the CPU went to (``database`` or ``workers``), and why it stops there."""
    ours = p.workers_cores + p.hosts_cores
    side = "database" if p.database_cores > ours else "workers"
    nproc = len(os.sched_getaffinity(0))
    if p.machine_busy_cores >= 0.9 * nproc:
        why = (
            f"machine CPU-bound ({p.machine_busy_cores:.2f} of {nproc} cores busy): "
            f"workers {p.workers_cores:.2f} + hosts {p.hosts_cores:.2f}, "
            f"database {p.database_cores:.2f}"
        )
    elif p.busiest_worker_cores >= 0.85:
        why = f"a worker's interpreter is saturated ({p.busiest_worker_cores:.2f} cores: the GIL)"
    else:
        why = (
            f"no CPU saturated ({p.machine_busy_cores:.2f} of {nproc} cores busy): "
            "waiting on round trips and commits"
        )
    return side, why
