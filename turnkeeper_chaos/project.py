"""One scenario's throwaway project: a git repo, ``.turnkeeper/``, goal ``g``, one session.

The control plane always runs for real — ``turnkeeper run --json`` in its own
process, with ``TURNKEEPER_DIR`` pointing here — and dies by a real SIGKILL: its
own at a named crash point (``TURNKEEPER_CRASH_AT``), or the harness's, by pid,
after a timer or when the agent pauses mid-turn. Output goes to files under
``logs/``, not pipes: a process that inherited a pipe could hold it open forever.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from turnkeeper.errors import TurnkeeperError
from turnkeeper.json_types import JsonDict, json_object
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import SessionEvent, TurnAccepted
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.project import DB_FILE_NAME, STATE_DIR_NAME, init_project
from turnkeeper.runtime.services.sessions import SESSION_CODEC, SessionService, session_stream
from turnkeeper.store import EventStore, open_store
from turnkeeper_chaos.service import CountingService
from turnkeeper_chaos.workload import GOAL_ID, PAUSE_NAME, Workload

RUN_TIMEOUT = 180.0  # seconds one control plane may take before the harness ends it
CRASH_MARK = "[crash point "
# Opening a fresh store runs Alembic, whose context is process global: two first
# opens in two threads could run one migration on the other's connection. The
# control planes are other processes; only this process's opens take turns.
_STORE_LOCK = threading.Lock()


def cli_command() -> list[str]:
    script = Path(sys.executable).with_name("turnkeeper")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "turnkeeper.cli.main"]


@dataclass(frozen=True)
class KillPlan:
    """When the harness SIGKILLs a control plane itself (not through a crash point)."""

    after_seconds: float | None = None  # a timer from its spawn
    # A timer armed when it first writes to the session (it took the lease: its
    # recovery begins), so a kill can land inside a recovery a few ms long.
    after_lease_seconds: float | None = None
    on_pause: bool = False  # as soon as the agent pauses mid-turn


class _SessionHead:
    """The session stream's head, read straight from SQLite (read-only, WAL: a reader
    never blocks the control plane's writes)."""

    def __init__(self, db_path: Path, session_id: str) -> None:
        self._conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=1.0)
        self._stream = session_stream(session_id)

    def __call__(self) -> int:
        try:
            row = self._conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM events WHERE stream_id = ?", (self._stream,)
            ).fetchone()
        except sqlite3.Error:
            return -1
        return int(row[0])

    def close(self) -> None:
        self._conn.close()


@dataclass(frozen=True)
class RunRecord:
    """What one control-plane process did."""

    args: tuple[str, ...]
    crash_at: str | None
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    killed_by_harness: bool = False
    timed_out: bool = False
    spawned_at: float = 0.0  # wall-clock time.time() when it was started

    @property
    def sigkilled(self) -> bool:
        return self.returncode == -signal.SIGKILL

    @property
    def crash_point_hit(self) -> str | None:
        """``<point>#<n>`` of the crash point that killed it, if one did."""
        at = self.stderr.find(CRASH_MARK)
        if at < 0:
            return None
        return self.stderr[at + len(CRASH_MARK) :].split(":", 1)[0]

    def summary(self) -> JsonDict | None:
        """The final JSON document of ``run --json`` (None if it never printed one)."""
        rest = [ln for ln in self.stdout.splitlines() if not ln.startswith('{"progress"')]
        try:
            return json_object("\n".join(rest))
        except ValueError:
            return None

    def describe(self) -> str:
        return (
            f"$ turnkeeper {' '.join(self.args)} (crash_at={self.crash_at}) -> "
            f"{self.returncode}\n--- stdout\n{self.stdout[-1500:]}\n--- stderr\n"
            f"{self.stderr[-1500:]}"
        )


class ChaosProject:
    def __init__(self, root: Path, name: str, workload: Workload | None = None) -> None:
        self.root = root
        self.name = name
        self.workload = workload or Workload()
        self.session_id = ""
        self._calls = 0

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    @property
    def host_state(self) -> Path:
        return self.root / "host-state"

    @property
    def db_path(self) -> Path:
        return self.root / STATE_DIR_NAME / DB_FILE_NAME

    @property
    def pause_file(self) -> Path:
        return self.repo / ".turnkeeper-pause" / PAUSE_NAME

    # --- setting up -----------------------------------------------------------------

    @classmethod
    def create(
        cls, root: Path, name: str, workload: Workload, service: CountingService
    ) -> ChaosProject:
        """Through the same services the CLI calls, in this process."""
        root.mkdir(parents=True, exist_ok=True)
        project = cls(root, name, workload)
        make_git_repo(project.repo)
        init_project(root)
        config = workload.host_config(project.host_state, service.provider_config(name))
        with project.store() as store:
            goals = GoalService(store)
            goals.create(CreateGoal(goal_id=GOAL_ID, title=f"chaos scenario {name}"))
            for todo in workload.todo_list:
                spec = TodoSpec(
                    todo_id=todo.todo_id,
                    title=todo.title,
                    depends_on=list(todo.depends_on),
                    required_evidence=[todo.evidence],
                )
                goals.submit(GOAL_ID, AddTodo(todo=spec))
            session = SessionService(store).create(GOAL_ID, project.repo, "scripted", config)
        project.session_id = session.session_id
        return project

    # --- running the CLI ------------------------------------------------------------

    def env(self, crash_at: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
        env["TURNKEEPER_DIR"] = str(self.root)
        env["TURNKEEPER_OWNER"] = "chaos-operator"
        env["no_proxy"] = env["NO_PROXY"] = "127.0.0.1,localhost"
        if crash_at is not None:
            env["TURNKEEPER_CRASH_AT"] = crash_at
        return env

    def cli(
        self, *args: str, crash_at: str | None = None, kill: KillPlan | None = None
    ) -> RunRecord:
        """Run ``turnkeeper ARGS`` to its end, or until the harness kills it."""
        self._calls += 1
        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        out_path, err_path = logs / f"{self._calls:03d}.out", logs / f"{self._calls:03d}.err"
        started, spawned_at = time.monotonic(), time.time()
        killed = timed_out = False
        head = None
        if kill is not None and kill.after_lease_seconds is not None:
            head = _SessionHead(self.db_path, self.session_id)
        head_before, leased_at = (head() if head else 0), None
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                [*cli_command(), *args],
                cwd=self.root,
                env=self.env(crash_at),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
            while proc.poll() is None:
                now = time.monotonic()
                elapsed = now - started
                if head is not None and leased_at is None and head() > head_before:
                    leased_at = now
                due = kill is not None and (
                    (kill.after_seconds is not None and elapsed >= kill.after_seconds)
                    or (kill.on_pause and self.pause_file.exists())
                    or (
                        leased_at is not None
                        and kill.after_lease_seconds is not None
                        and now - leased_at >= kill.after_lease_seconds
                    )
                )
                timed_out = elapsed > RUN_TIMEOUT
                if due or timed_out:
                    # Our own child, not yet reaped: its pid cannot have been reused.
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    killed = True
                    break
                time.sleep(0.002 if head is not None else 0.01)
        if head is not None:
            head.close()
        stdout = out_path.read_text(errors="replace")
        return RunRecord(
            args=args,
            crash_at=crash_at,
            returncode=proc.returncode,
            stdout=stdout,
            stderr=err_path.read_text(errors="replace"),
            seconds=time.monotonic() - started,
            killed_by_harness=killed and proc.returncode == -signal.SIGKILL,
            timed_out=timed_out,
            spawned_at=spawned_at,
        )

    def run(
        self, *extra: str, crash_at: str | None = None, kill: KillPlan | None = None
    ) -> RunRecord:
        return self.cli("run", "--json", *extra, crash_at=crash_at, kill=kill)

    # --- reading state ----------------------------------------------------------------

    @contextmanager
    def store(self) -> Iterator[EventStore]:
        with _STORE_LOCK:
            store = open_store(f"sqlite:///{self.db_path}")
        try:
            yield store
        finally:
            store.close()

    def session_events(self) -> list[SessionEvent]:
        with self.store() as store:
            records = store.read_stream(session_stream(self.session_id))
        return [SESSION_CODEC.decode_event(r) for r in records]

    def runs(self) -> list[JsonDict]:
        """One line per real host run (the agent writes it before any step)."""
        path = self.host_state / "runs.jsonl"
        if not path.exists():
            return []
        return [json_object(line) for line in path.read_text().splitlines() if line.strip()]

    def turn_ids(self) -> set[str]:
        """Every turn this scenario's session accepted or its host ran: the markers of
        the processes that are the scenario's own. Whatever of the two is readable."""
        ids: set[str] = set()
        with suppress(OSError, ValueError):
            ids.update(str(r.get("turn_id")) for r in self.runs())
        if self.db_path.exists() and self.session_id:
            with suppress(TurnkeeperError):
                events = self.session_events()
                ids.update(e.envelope.turn_id for e in events if isinstance(e, TurnAccepted))
        return ids


def make_git_repo(repo: Path) -> None:
    """A new git repository at ``repo`` with one commit (a scenario's workspace)."""
    repo.mkdir(parents=True)
    git = ["git", "-c", "user.email=chaos@example.com", "-c", "user.name=chaos"]
    (repo / "README").write_text("chaos scenario workspace\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "initial"]):
        subprocess.run([*git, *args], cwd=repo, check=True, capture_output=True, timeout=60)
