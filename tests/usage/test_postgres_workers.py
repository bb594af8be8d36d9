"""Several ``turnkeeper run --worker`` processes sharing one PostgreSQL database, as a
user runs them: a project made by ``turnkeeper init --database-url`` in a git repo,
goals, todos and sessions made with the CLI, a shell agent of the user's, workers
started from the shell — and then one of them SIGKILLed mid-turn, or the database
restarted under them.

The database is a throwaway cluster of the test's own (tests/pg_cluster.py): the
shared server is never restarted. What happened is read back from the sessions'
streams (the checks of ``turnkeeper chaos --mode workers``: one writer per lease
epoch, every turn's host run once, under the worker that held its lease, each effect
applied once at the counting service), from ``turnkeeper verify`` and from the
workers' own ``--json`` output.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.pg_cluster import PgCluster, pg_cluster
from tests.usage.project import (
    GIT_IDENTITY,
    Background,
    Completed,
    turnkeeper_executable,
    wait_for,
)
from turnkeeper import Project
from turnkeeper.json_types import JsonDict
from turnkeeper.kernel.session import LeaseAcquired, TurnAccepted
from turnkeeper_chaos.procs import live_marked_processes
from turnkeeper_chaos.service import CountingService
from turnkeeper_chaos.worker_checks import SessionChecker, SessionView, owner_pid, read_runs
from turnkeeper_chaos.worker_fleet import runs_an_agent
from turnkeeper_chaos.workers import AGENT

__all__ = ["pg_cluster"]
pytestmark = pytest.mark.timeout(300)
COMMAND_TIMEOUT = 120.0


class WorkersProject:
    """A user's git repo with a turnkeeper project on a PostgreSQL database."""

    def __init__(self, base: Path, url: str, service: CountingService) -> None:
        self.base, self.url, self.service = base, url, service
        self.root = base / "repo"
        self.runs = base / "agent-runs"  # outside every work tree: the agent's own record
        self.runs.mkdir(parents=True)
        self.agent = base / "agent.sh"
        self.agent.write_text(AGENT)
        self.agent.chmod(0o755)
        self.sessions: dict[str, tuple[str, str, Path, list[str]]] = {}
        self._background: list[Background] = []
        self._git_repo(self.root)
        (self.root / ".gitignore").write_text(".env\n*.log\n")
        self.git(self.root, "add", "-A")
        self.git(self.root, "commit", "-qm", "ignore local files")
        self.tk("init", "--database-url", url)
        assert (self.root / ".turnkeeper" / "database-url").read_text().strip() == url
        assert ".turnkeeper/" in (self.root / ".gitignore").read_text().splitlines()

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
        env.update(GIT_IDENTITY)
        env["no_proxy"] = env["NO_PROXY"] = "127.0.0.1,localhost"
        return env

    def git(self, where: Path, *args: str) -> None:
        subprocess.run(
            ["git", *args], cwd=where, env=self.env(), check=True, capture_output=True, timeout=60
        )

    def _git_repo(self, path: Path) -> None:
        path.mkdir(parents=True)
        self.git(path, "init", "-q", "-b", "main")
        (path / "README.md").write_text("pages\n")
        self.git(path, "add", "-A")
        self.git(path, "commit", "-qm", "initial")

    def tk(self, *args: str) -> Completed:
        proc = subprocess.run(
            [*turnkeeper_executable(), *args],
            cwd=self.root,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
        assert proc.returncode == 0, f"turnkeeper {args}: {proc.stdout[-3000:]}{proc.stderr}"
        return Completed(args, proc.returncode, proc.stdout, proc.stderr)

    def add_sessions(self, n: int, todos: int, work_seconds: float, cli: int = 1) -> None:
        """``n`` goals of ``todos`` pages each, one session per goal in its own repo; the
        first ``cli`` made with the command line, the rest with ``turnkeeper.Project``
        (a user's setup script: one process instead of a few dozen commands)."""
        with Project.open(self.root) as api:
            for k in range(len(self.sessions), len(self.sessions) + n):
                label = f"pages{k}"
                workspace = self.base / label
                self._git_repo(workspace)
                config: JsonDict = {
                    "command": [str(self.agent), str(self.runs), str(work_seconds)],
                    "event_format": "jsonl",
                    "effects": {"providers": {"http": self.service.provider_config(label)}},
                }
                title = f"write the pages of book {k}"
                if k < cli:
                    sid, goal, todo_ids = self._add_by_cli(title, todos, workspace, config)
                else:
                    goal = api.goals.add(title).goal.id
                    todo_ids = [
                        api.todos.add(goal, f"page {j}", requires_evidence=["written"]).id
                        for j in range(todos)
                    ]
                    made = api.sessions.create(
                        goal, host="subprocess", host_config=config, workspace=workspace
                    )
                    sid = made.session_id
                self.sessions[sid] = (label, goal, workspace, todo_ids)

    def _add_by_cli(
        self, title: str, todos: int, workspace: Path, config: dict[str, Any]
    ) -> tuple[str, str, list[str]]:
        goal = self.tk("goal", "add", title, "-q").stdout.strip()
        todo_ids = [
            self.tk(
                "todo", "add", goal, f"page {j}", "--requires-evidence", "written", "-q"
            ).stdout.strip()
            for j in range(todos)
        ]
        config_file = workspace.with_suffix(".json")
        config_file.write_text(json.dumps(config))
        created = self.tk(
            "session", "create", goal, "--host", "subprocess",
            "--host-config", f"@{config_file}", "--workspace", str(workspace), "--json",
        ).stdout  # fmt: skip
        return json.loads(created)["session_id"], goal, todo_ids

    def worker(self, *extra: str, prefix: Sequence[str] = ()) -> Background:
        """``turnkeeper run --worker`` in the background, under ``prefix`` when given
        (``ip netns exec ... unshare ...``: as on another machine)."""
        n = len(self._background) + 1
        out, err = self.base / f"worker{n}.out", self.base / f"worker{n}.err"
        fo, fe = out.open("wb"), err.open("wb")
        args = ["run", "--worker", "--json", "--poll", "0.5", "--backoff", "0.5", *extra]
        proc = subprocess.Popen(
            [*prefix, *turnkeeper_executable(), *args],
            cwd=self.root,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=fo,
            stderr=fe,
        )
        bg = Background(proc, out, err, [fo, fe])
        self._background.append(bg)
        return bg

    def close(self) -> None:
        for bg in self._background:
            bg.kill()

    # --- what happened ---------------------------------------------------------------

    def view(self, sid: str) -> SessionView:
        label, goal, workspace, todos = self.sessions[sid]
        runs = [r for r in read_runs(self.runs) if r.get("session_id") == sid]
        return SessionView(self.base, label, workspace, self.url, sid, goal, todos, runs)

    def check_all(self, killed: frozenset[int] = frozenset()) -> dict[str, list[Any]]:
        """Every session's invariants; returns each session's lease owners in order."""
        owners: dict[str, list[Any]] = {}
        for sid in self.sessions:
            view = self.view(sid)
            result = SessionChecker(view, self.service, killed).check()
            assert result.violations == [], result.violations
            events = view.session_events()
            owners[sid] = [e.owner for e in events if isinstance(e, LeaseAcquired)]
            assert result.facts.completed >= len(view.todo_ids)
        verified = self.tk("verify", "--json").stdout
        assert json.loads(verified)["ok"] is True, verified
        turn_ids = {str(r["turn_id"]) for r in read_runs(self.runs)}
        wait_for(lambda: not live_marked_processes(turn_ids), 10, "agents to be gone")
        return owners

    def accepted_turns(self, sid: str) -> list[str]:
        return [
            e.envelope.turn_id
            for e in self.view(sid).session_events()
            if isinstance(e, TurnAccepted)
        ]


def records(worker: Background, event: str) -> list[dict[str, Any]]:
    return [line for line in worker.json_lines() if line.get("event") == event]


def agent_of(worker: Background, agent: Path) -> bool:
    """Whether one of the user's agents runs under ``worker`` now."""
    return runs_an_agent(worker.pid, str(agent))


@pytest.fixture
def project(pg_cluster: PgCluster, tmp_path: Path) -> Iterator[WorkersProject]:
    url = pg_cluster.create_database(f"tk_workers_{uuid.uuid4().hex[:8]}")
    with CountingService() as service:
        made = WorkersProject(tmp_path, url, service)
        try:
            yield made
        finally:
            made.close()


def test_two_workers_share_the_sessions_one_writer_each(project: WorkersProject) -> None:
    project.add_sessions(8, todos=2, work_seconds=0.3)
    # Five at a time each: neither can hold all eight, so both must work.
    workers = [project.worker("--max-sessions", "5", "--idle-exit", "4") for _ in range(2)]
    for worker in workers:
        assert worker.wait() == 0, worker.output()
    planned = [records(w, "turn_planned") for w in workers]
    assert all(planned), "both workers ran turns"
    owners = project.check_all()
    # Every session was led by these two workers only, and each turn by its lease holder
    # (checked per run above from the agents' own ancestry).
    pids = {owner_pid(o) for lst in owners.values() for o in lst}
    assert pids <= {w.pid for w in workers}, pids
    assert sum(w.summary()["turns"] for w in workers) == sum(
        len(project.accepted_turns(s)) for s in project.sessions
    )


def test_a_worker_killed_mid_turn_leaves_its_sessions_to_the_other(
    project: WorkersProject,
) -> None:
    project.add_sessions(4, todos=2, work_seconds=1.5)
    doomed = project.worker("--max-sessions", "2", "--lease", "30")
    wait_for(lambda: agent_of(doomed, project.agent), 60, "the first worker's agent to run")
    survivor = project.worker("--max-sessions", "2", "--lease", "30", "--idle-exit", "4")
    wait_for(lambda: agent_of(doomed, project.agent), 60, "the first worker mid-turn")
    doomed.proc.send_signal(signal.SIGKILL)  # our own child, by its pid
    doomed.wait()
    assert survivor.wait() == 0, survivor.output()
    owners = project.check_all(killed=frozenset({doomed.pid}))
    taken = [sid for sid, lst in owners.items() if owner_pid(lst[0]) == doomed.pid]
    assert taken, "the killed worker had sessions"
    for sid in taken:
        # Taken over at once (the dead worker is provably dead on this machine), not
        # after the 30 s lease: the survivor finished them.
        assert owner_pid(owners[sid][-1]) == survivor.pid
    assert records(survivor, "lease_taken_over") or any(
        owner_pid(o) == survivor.pid for sid in taken for o in owners[sid]
    )
    lost = [
        line
        for sid in taken
        for line in project.view(sid).session_events()
        if line.type == "turn.lost"
    ]
    assert lost, "the turn cut off by the kill was recorded lost, not rerun"


def test_the_database_restarts_under_running_workers(
    project: WorkersProject, pg_cluster: PgCluster
) -> None:
    project.add_sessions(6, todos=3, work_seconds=0.5)
    workers = [project.worker("--max-sessions", "3", "--idle-exit", "8") for _ in range(2)]
    # Both at work first, so the restarts land on running turns.
    wait_for(lambda: all(records(w, "turn_planned") for w in workers), 90, "both to work")
    before = len(read_runs(project.runs))
    pg_cluster.restart("fast", down_seconds=3)  # sessions ended cleanly
    wait_for(lambda: len(read_runs(project.runs)) >= before + 4, 90, "turns after it")
    pg_cluster.restart("immediate", down_seconds=3)  # a crash: recovery from the WAL
    for worker in workers:
        assert worker.wait(timeout=180) == 0, worker.output()
    assert any(records(w, "database_unavailable") for w in workers), "the outage was seen"
    project.check_all()
