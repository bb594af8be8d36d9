"""A throwaway turnkeeper project for one crash scenario, and the factory that cleans up.

A project is a git repo, ``turnkeeper init``, the standard goal and todos (see
:mod:`.scripts`) and one ``scripted`` session on the repo, with the script the test
chooses. Its control planes run as ``turnkeeper`` CLI subprocesses with
``TURNKEEPER_DIR`` pointing at the project. Its store is the SQLite file, or on the
``postgresql`` backend a database of its own (see :mod:`.databases`) that the factory
drops at teardown.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.pg import PostgresDatabase
from tests.runtime.crash_support.databases import POSTGRESQL, SQLITE, fresh_database
from tests.runtime.crash_support.processes import (
    CliResult,
    cli_command,
    kill_marked_processes,
    live_marked_processes,
    wait_until,
)
from tests.runtime.crash_support.scripts import (
    EVIDENCE_A,
    EVIDENCE_B,
    GOAL_ID,
    PAUSE_NAME,
    TITLE_A,
    TITLE_B,
    TODO_A,
    TODO_B,
)
from tests.runtime.crash_support.turn_log import Record, TurnHistory, turn_histories
from turnkeeper.kernel import GoalState
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import SessionState
from turnkeeper.runtime.services.goals import GoalService, goal_stream
from turnkeeper.runtime.services.project import init_project
from turnkeeper.runtime.services.sessions import SessionService, session_stream
from turnkeeper.store import EventStore, open_store

CLI_TIMEOUT = 90.0  # seconds any one CLI process may take before the test gives up
SETTLE_TIMEOUT = 20.0  # seconds an orphaned host may take to notice its parent died
# Scenarios run in threads (see ``scenario_pool``), but this process opens stores one
# at a time: opening a fresh store runs Alembic, whose ``alembic.context`` is process
# global, so two first opens in two threads can run one migration on the other's
# connection (seen as a segfault in sqlite3). The control planes are separate processes.
_STORE_LOCK = threading.Lock()


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        timeout=60,
    )


@dataclass
class CrashProject:
    """A throwaway turnkeeper project: a git repo, one goal, one scripted session."""

    root: Path
    # The database ``init --database-url`` recorded; None: the SQLite file ``db_path``.
    database_url: str | None = None
    session_id: str = ""
    _calls: int = 0

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    @property
    def host_state(self) -> Path:
        return self.root / "host-state"

    @property
    def db_path(self) -> Path:
        return self.root / ".turnkeeper" / "turnkeeper.db"

    @property
    def store_url(self) -> str:
        """The store the project's control planes use (as ``.turnkeeper/`` records it)."""
        return self.database_url or f"sqlite:///{self.db_path}"

    @property
    def pause_file(self) -> Path:
        return self.repo / ".turnkeeper-pause" / PAUSE_NAME

    # --- running the CLI ------------------------------------------------------------

    def env(self, crash_at: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
        env["TURNKEEPER_DIR"] = str(self.root)
        if crash_at is not None:
            env["TURNKEEPER_CRASH_AT"] = crash_at
        return env

    def cli(self, *args: str, crash_at: str | None = None, expect: int = 0) -> CliResult:
        """Run ``turnkeeper ARGS`` to its end; ``expect`` is its exit code unless it is
        to crash at ``crash_at``. Output goes to files, not pipes: a process that
        inherited a pipe could otherwise keep the read open forever."""
        self._calls += 1
        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        out_path = logs / f"{self._calls:02d}.out"
        err_path = logs / f"{self._calls:02d}.err"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                [*cli_command(), *args],
                cwd=self.root,
                env=self.env(crash_at),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
            try:
                returncode = proc.wait(timeout=CLI_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()  # our own child, by pid
                proc.wait()
                raise
        result = CliResult(
            args=args,
            returncode=returncode,
            stdout=out_path.read_text(errors="replace"),
            stderr=err_path.read_text(errors="replace"),
        )
        if crash_at is None:
            assert result.returncode == expect, result.describe()
        return result

    def run_control_plane(
        self, *args: str, crash_at: str | None = None, expect: int = 0
    ) -> CliResult:
        """``turnkeeper run --json``; with ``crash_at`` it must die by its own SIGKILL,
        else exit ``expect`` (README, "Errors and exit codes"), as its summary says."""
        result = self.cli("run", "--json", *args, crash_at=crash_at, expect=expect)
        if crash_at is None:
            assert result.summary()["exit_code"] == expect, result.describe()
        else:
            assert result.returncode == -signal.SIGKILL, result.describe()
            assert "[crash point " in result.stderr, result.describe()
        return result

    # --- reading state ----------------------------------------------------------------

    @contextmanager
    def store(self) -> Iterator[EventStore]:
        with _STORE_LOCK:
            store = open_store(self.store_url)
            try:
                yield store
            finally:
                store.close()

    def session_records(self) -> list[Record]:
        with self.store() as store:
            raw = store.read_stream(session_stream(self.session_id))
        return [Record(r.seq, r.type, json.loads(r.payload)) for r in raw]

    def goal_records(self) -> list[Record]:
        with self.store() as store:
            raw = store.read_stream(goal_stream(GOAL_ID))
        return [Record(r.seq, r.type, json.loads(r.payload)) for r in raw]

    def turns(self) -> dict[str, TurnHistory]:
        return turn_histories(self.session_records())

    def last_turn(self) -> TurnHistory:
        return list(self.turns().values())[-1]

    def session(self) -> SessionState:
        with self.store() as store:
            return SessionService(store).load(self.session_id)

    def goal(self) -> GoalState:
        with self.store() as store:
            return GoalService(store).load(GOAL_ID)

    def runs(self) -> list[dict[str, Any]]:
        """One line per real host run (written by the agent before any step)."""
        path = self.host_state / "runs.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def run_counts(self) -> Counter[str]:
        return Counter(str(r["turn_id"]) for r in self.runs())

    def known_turn_ids(self) -> set[str]:
        ids = {str(r["turn_id"]) for r in self.runs()}
        if self.session_id and (self.database_url or self.db_path.exists()):
            ids.update(self.turns())
        return ids

    def live_processes(self, turn_ids: Iterable[str] | None = None) -> dict[int, str]:
        return live_marked_processes(self.known_turn_ids() if turn_ids is None else turn_ids)

    def wait_for_orphans(self, turn_id: str) -> None:
        """Wait until no live process carries ``turn_id``: a host whose control plane
        died hits a broken stdout pipe at its next event and exits by itself."""
        wait_until(
            lambda: not live_marked_processes([turn_id]),
            SETTLE_TIMEOUT,
            f"the orphaned host of {turn_id} to exit",
        )

    def cleanup(self) -> None:
        """End leftover processes of this project's own turns (a failed test's)."""
        deadline = time.monotonic() + 10
        while self.live_processes() and time.monotonic() < deadline:
            kill_marked_processes(self.known_turn_ids())
            time.sleep(0.05)


def make_project(
    root: Path,
    turns: list[dict[str, Any]],
    *,
    via_cli: bool = False,
    database_url: str | None = None,
) -> CrashProject:
    """A git repo plus ``turnkeeper init``, goal ``g``, todos ``t1``/``t2`` and a scripted
    session. ``via_cli`` does every step through the CLI (slower: ~0.5 s per call);
    otherwise through the same services the CLI calls, in this process. With
    ``database_url`` the project keeps its state there instead of its SQLite file."""
    root.mkdir(parents=True, exist_ok=True)
    project = CrashProject(root=root, database_url=database_url)
    project.repo.mkdir()
    _git(project.repo, "init", "-q")
    (project.repo / "README").write_text("crash-recovery test workspace\n")
    _git(project.repo, "add", "-A")
    _git(project.repo, "commit", "-qm", "initial")
    config = {"state_dir": str(project.host_state), "script": {"turns": turns}}
    if via_cli:
        config_file = root / "host-config.json"
        config_file.write_text(json.dumps(config))
        database = [] if database_url is None else ["--database-url", database_url]
        project.cli("init", str(root), *database, "--json")
        project.cli("goal", "add", "crash recovery", "--id", GOAL_ID, "--json")
        todo_a = ["--id", TODO_A, "--requires-evidence", EVIDENCE_A]
        project.cli("todo", "add", GOAL_ID, TITLE_A, *todo_a, "--json")
        todo_b = ["--id", TODO_B, "--depends-on", TODO_A, "--requires-evidence", EVIDENCE_B]
        project.cli("todo", "add", GOAL_ID, TITLE_B, *todo_b, "--json")
        host = ["--host", "scripted", "--host-config", f"@{config_file}"]
        workspace = ["--workspace", str(project.repo)]
        created = project.cli("session", "create", GOAL_ID, *host, *workspace, "--json")
        project.session_id = str(created.json()["session_id"])
        return project
    init_project(root, database_url)
    with project.store() as store:
        goals = GoalService(store)
        goals.create(CreateGoal(goal_id=GOAL_ID, title="crash recovery"))
        spec_a = TodoSpec(todo_id=TODO_A, title=TITLE_A, required_evidence=[EVIDENCE_A])
        goals.submit(GOAL_ID, AddTodo(todo=spec_a))
        spec_b = TodoSpec(
            todo_id=TODO_B, title=TITLE_B, depends_on=[TODO_A], required_evidence=[EVIDENCE_B]
        )
        goals.submit(GOAL_ID, AddTodo(todo=spec_b))
        session = SessionService(store).create(GOAL_ID, project.repo, "scripted", config)
    project.session_id = session.session_id
    return project


class ProjectFactory:
    """Makes projects on one backend (:mod:`.databases`) for one test and, at teardown,
    ends what their turns left running and drops their databases."""

    def __init__(self, backend: str = SQLITE) -> None:
        assert backend in (SQLITE, POSTGRESQL), backend
        self.backend = backend
        self.projects: list[CrashProject] = []
        self.databases: list[PostgresDatabase] = []

    def make(
        self, root: Path, turns: list[dict[str, Any]], *, via_cli: bool = False
    ) -> CrashProject:
        database_url = None
        if self.backend == POSTGRESQL:
            database = fresh_database()
            self.databases.append(database)
            database_url = database.url
        project = make_project(root, turns, via_cli=via_cli, database_url=database_url)
        self.projects.append(project)
        return project

    def cleanup(self) -> None:
        try:
            for project in self.projects:
                project.cleanup()
        finally:
            # Only once the processes are ended: DROP ... FORCE would merely cut a control
            # plane still running off its database, leaving the process behind.
            for database in self.databases:
                database.drop()


@contextmanager
def project_factory(backend: str = SQLITE) -> Iterator[ProjectFactory]:
    factory = ProjectFactory(backend)
    try:
        yield factory
    finally:
        factory.cleanup()
