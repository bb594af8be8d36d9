"""``turnkeeper demo``: a goal worked by the scripted agent, with two real SIGKILLs.

Everything is real: the control plane is ``turnkeeper run`` in its own process,
the agent is a subprocess that edits files in a git repository, the kills are
SIGKILLs of those processes, and the state is a SQLite file in WAL mode.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import typer

from turnkeeper.cli.context import handles_errors
from turnkeeper.cli.demo_scenario import (
    CONTROL_PLANE_KILL_POINT,
    HOST_KILL_POINT,
    agent_script,
    make_repository,
)
from turnkeeper.cli.output import console

# The runtime, the store and the hosts are imported where the demo uses them, so that
# the command line of every other command is built without them.

GOAL = "calc"
PAUSE_TIMEOUT_SECONDS = 120


def _step(text: str) -> None:
    console.rule(f"[bold cyan]{text}")


def _set_up(repo: Path, database_url: str | None, runner: bool) -> str:
    from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
    from turnkeeper.runtime.services.goals import GoalService
    from turnkeeper.runtime.services.project import init_project
    from turnkeeper.runtime.services.sessions import SessionService
    from turnkeeper.store import open_store

    project, _ = init_project(repo, database_url)
    store = open_store(project.database_url)
    try:
        goals = GoalService(store)
        goals.create(CreateGoal(goal_id=GOAL, title="A tiny calculator with docs"))
        todos = [
            TodoSpec(todo_id="t-add", title="write add()", required_evidence=["add-works"]),
            TodoSpec(
                todo_id="t-sub",
                title="write sub()",
                depends_on=["t-add"],
                required_evidence=["sub-works"],
            ),
            TodoSpec(
                todo_id="t-docs",
                title="write the docs",
                depends_on=["t-sub"],
                required_evidence=["docs-mention-sub"],
            ),
        ]
        for todo in todos:
            goals.submit(GOAL, AddTodo(todo=todo))
        config = agent_script(project.state_dir / "agent", runner=runner)
        session = SessionService(store).create(GOAL, repo, "scripted", config)
        return session.session_id
    finally:
        store.close()


def _start_control_plane(
    repo: Path, label: str, seen: list[str] | None = None
) -> subprocess.Popen[str]:
    env = {**os.environ, "TURNKEEPER_DIR": str(repo), "COLUMNS": "100"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "turnkeeper.cli.main", "run"],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    console.print(f"[green]started[/] control plane {label}: pid {proc.pid}")

    def relay() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if seen is not None:
                seen.append(line)
            console.print(f"  [dim]{label} |[/] {line.rstrip()}", highlight=False)

    threading.Thread(target=relay, daemon=True).start()
    return proc


def _wait_for_pause(repo: Path, name: str, proc: subprocess.Popen[str]) -> int:
    """The pid of the agent paused at ``name`` (it wrote its pid into the pause file)."""
    marker = repo / ".turnkeeper-pause" / name
    deadline = time.monotonic() + PAUSE_TIMEOUT_SECONDS
    with console.status(f"waiting for the agent to reach {name!r}", spinner="dots"):
        while time.monotonic() < deadline:
            text = marker.read_text() if marker.exists() else ""
            if text.isdigit():
                return int(text)
            if proc.poll() is not None:
                raise RuntimeError(f"the control plane exited early ({proc.returncode})")
            time.sleep(0.05)
    raise RuntimeError(f"the agent never reached {name!r}")


def _marked_survivors(repo: Path) -> list[int]:
    from turnkeeper.hosts import process_tree

    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and process_tree.read_marker(int(entry.name)):
            cwd = Path(f"/proc/{entry.name}/cwd")
            try:
                if cwd.resolve().is_relative_to(repo):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return sorted(pids)


def _alive(pid: int) -> bool:
    from turnkeeper.hosts import process_tree

    stat = process_tree.read_stat(pid)
    return stat is not None and not stat.dead  # a zombie is dead, only not yet reaped


def _tk(repo: Path, *args: str) -> str:
    """``turnkeeper ARGS`` in the demo's project (the runner's commands)."""
    env = {**os.environ, "TURNKEEPER_DIR": str(repo)}
    done = subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli.main", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=PAUSE_TIMEOUT_SECONDS,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"turnkeeper {' '.join(args)} failed: {done.stdout}{done.stderr}")
    return done.stdout.strip()


def _run_scenario(repo: Path, session_id: str, runner: bool) -> None:
    if runner:
        _step("0. start the project's runner: it, not the control plane, owns the agents")
        console.print(_tk(repo, "runner", "start"))
    _step("1. the control plane drives the agent through the goal")
    first = _start_control_plane(repo, "control plane #1")
    agent_pid = _wait_for_pause(repo, HOST_KILL_POINT, first)
    _step("2. SIGKILL the agent (host) mid-turn; the control plane stays up")
    os.kill(agent_pid, signal.SIGKILL)
    (repo / ".turnkeeper-pause" / HOST_KILL_POINT).unlink()
    console.print(f"[red]SIGKILL[/] agent pid {agent_pid} while it was writing sub.py")
    agent_pid = _wait_for_pause(repo, CONTROL_PLANE_KILL_POINT, first)
    _step("3. SIGKILL the control plane mid-turn")
    survivors = _marked_survivors(repo)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    if runner:
        console.print(
            f"[red]SIGKILL[/] control plane pid {first.pid}; the agent (pid {agent_pid}) "
            "belongs to the runner and keeps running"
        )
        _step("4. restart: the new control plane reattaches to the running turn")
        seen: list[str] = []
        second = _start_control_plane(repo, "control plane #2", seen)
        _wait_until(lambda: any("reattached" in line for line in seen), second)
        (repo / ".turnkeeper-pause" / CONTROL_PLANE_KILL_POINT).unlink()
        console.print("the agent is let go on: the same turn finishes the docs")
        second.wait(timeout=PAUSE_TIMEOUT_SECONDS)
        console.print(_tk(repo, "runner", "stop", "--force"))
        survivors = [pid for pid in survivors if pid != agent_pid]  # ended with its turn
    else:
        console.print(
            f"[red]SIGKILL[/] control plane pid {first.pid}; the agent (pid {agent_pid}) and "
            f"its detached shell child keep running as orphans: pids {survivors}"
        )
        _step("4. restart: recover every in-flight turn, then carry on")
        second = _start_control_plane(repo, "control plane #2")
        second.wait(timeout=PAUSE_TIMEOUT_SECONDS)
    time.sleep(0.2)  # let the relay thread print the last lines
    left = [pid for pid in survivors if _alive(pid)]
    console.print(f"orphans of the killed turn still alive: {left or 'none'}")


def _wait_until(ready: Callable[[], bool], proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + PAUSE_TIMEOUT_SECONDS
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the restarted control plane did not reattach")
        time.sleep(0.05)


def _show_outcome(repo: Path, session_id: str) -> bool:
    from turnkeeper.cli.render import render_audit, render_verify
    from turnkeeper.cli.render_sessions import render_session
    from turnkeeper.runtime.services.folder import kernel_folder
    from turnkeeper.runtime.services.goals import GoalService
    from turnkeeper.runtime.services.project import init_project
    from turnkeeper.runtime.services.sessions import SessionService
    from turnkeeper.store import open_store

    project, _ = init_project(repo)
    store = open_store(project.database_url)
    try:
        sessions = SessionService(store)
        goals = GoalService(store)
        _step("what was recovered, and how")
        state = sessions.load(session_id)
        render_session(state)  # includes the latest recovery report
        _step("the goal's terminal audit")
        goal = goals.load(GOAL)
        console.print(f"goal {GOAL}: {goal.goal.status.value}")
        render_audit(goals.audit(GOAL))
        files = sorted(p.name for p in repo.glob("*.py"))
        console.print(f"workspace files: {files}")
        _step("verify: checksums, contiguous sequences, projections equal their folds")
        report = store.verify(kernel_folder())
        render_verify(report)
        lost = state.counters.turns_lost
        console.print(f"turns lost to the crashes: {lost}")
        return goal.is_closed and report.ok
    finally:
        store.close()


def _no_turn_lost(repo: Path, session_id: str) -> bool:
    from turnkeeper.runtime.services.project import Project
    from turnkeeper.runtime.services.sessions import SessionService
    from turnkeeper.store import open_store

    store = open_store(Project(repo).database_url)
    try:
        return SessionService(store).load(session_id).counters.turns_lost == 0
    finally:
        store.close()


@handles_errors
def demo(
    keep: bool = typer.Option(False, help="Keep the throwaway directory (and database)."),
    database_url: str | None = typer.Option(
        None,
        "--database-url",
        help="Run on this PostgreSQL server instead of SQLite: the demo creates a "
        "database of its own there (postgresql://USER@HOST/ANY) and drops it at the end.",
    ),
    runner: bool = typer.Option(
        False,
        "--runner",
        help="Run the agents in the project's runner: the control plane's SIGKILL then "
        "loses no turn (the restarted one reattaches).",
    ),
) -> None:
    """Watch a goal survive crashes: its agent and the control plane SIGKILLed mid-turn.

    Runs in a throwaway git repository (removed afterwards unless --keep), with the
    scripted agent, and ends in a terminal audit and a verify.

    Example: turnkeeper demo --keep
    """
    from rich.panel import Panel

    from turnkeeper.store.pg_admin import create_scratch_database, drop_database
    from turnkeeper.store.sql import display_url

    scratch = create_scratch_database(database_url) if database_url else None
    root = Path(tempfile.mkdtemp(prefix="turnkeeper-demo-"))
    repo = make_repository(root)
    ok = False
    where = (
        f"{display_url(scratch)} (PostgreSQL)"
        if scratch
        else f"{repo}/.turnkeeper/turnkeeper.db (SQLite, WAL)"
    )
    try:
        session_id = _set_up(repo, scratch, runner)
        console.print(
            Panel(
                f"throwaway repository: {repo}\n"
                f"store: {where}\n"
                f"goal {GOAL!r}: 3 todos; session {session_id} with the scripted agent",
                title="turnkeeper demo",
            )
        )
        _run_scenario(repo, session_id, runner)
        ok = _show_outcome(repo, session_id)
        if runner:
            ok = ok and _no_turn_lost(repo, session_id)
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
            if scratch:
                drop_database(scratch)
    verdict = "[bold green]goal completed through both crashes[/]" if ok else "[bold red]FAILED[/]"
    if ok and runner:
        verdict += "\n[green]the control plane's SIGKILL lost no turn: it was reattached[/]"
    console.print(Panel(f"{verdict}\n[dim]directory {root}{' kept' if keep else ' removed'}[/]"))
    if not ok:
        raise typer.Exit(1)
