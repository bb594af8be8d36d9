"""Shared helpers for the crash-recovery suite (``tests/runtime/test_crash_*.py``).

The suite drives the REAL control plane: ``turnkeeper run --json`` as a subprocess,
with ``TURNKEEPER_DIR`` pointing at a throwaway project and, for the run that is
meant to die, ``TURNKEEPER_CRASH_AT=<point>[@<n>]`` in its environment (the process
SIGKILLs itself there, see :mod:`turnkeeper.runtime.crashpoints`). The agent is the
``scripted`` host, a real subprocess that appends one line per run to
``<host state>/runs.jsonl``: that file is the oracle for "how often did the host run".

The project every test starts from: a git repo, goal ``g`` with todo ``t1`` ("write
a", needs evidence ``a-exists``) and todo ``t2`` ("write b", depends on ``t1``, needs
``b-exists``), and one scripted session on the repo. Tests choose the script.

Only processes a test started are ever signalled: the control planes by pid (through
``subprocess``), hosts and their detached children by pid after reading their
``TURNKEEPER_TURN_ID`` marker from ``/proc/<pid>/environ`` — the marker names a turn
of this test's own session.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from turnkeeper.kernel import GoalState
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import SessionState
from turnkeeper.runtime.driver import EVENT_BATCH
from turnkeeper.runtime.folder import kernel_folder
from turnkeeper.runtime.goals import GoalService, goal_stream
from turnkeeper.runtime.project import init_project
from turnkeeper.runtime.sessions import SessionService, session_stream
from turnkeeper.store import EventStore, open_store

MARKER_ENV = "TURNKEEPER_TURN_ID"
CLI_TIMEOUT = 90.0  # seconds any one CLI process may take before the test gives up
SETTLE_TIMEOUT = 20.0  # seconds an orphaned host may take to notice its parent died
# Scenarios run in threads (see ``scenario_pool``), but this process opens stores one
# at a time: opening a fresh store runs Alembic, whose ``alembic.context`` is process
# global, so two first opens in two threads can run one migration on the other's
# connection (seen as a segfault in sqlite3). The control planes are separate processes.
_STORE_LOCK = threading.Lock()

GOAL_ID = "g"
TODO_A, TITLE_A, FILE_A, EVIDENCE_A = "t1", "write a", "a.txt", "a-exists"
TODO_B, TITLE_B, FILE_B, EVIDENCE_B = "t2", "write b", "b.txt", "b-exists"
CONTENT_A, CONTENT_B = "A\n", "B\n"
PAUSE_NAME = "mid-turn"

TERMINAL_TYPES = frozenset({"turn.completed", "turn.failed", "turn.lost", "turn.abandoned"})

# The paused turn emits exactly as many events as make its second batch of host events
# (the driver journals EVENT_BATCH at a time) end with the very event that pauses it:
# seq 1 session.bound (batch 1), then file.changed, command, the filler, checkpoint =
# seq 2 .. EVENT_BATCH + 1 (batch 2). A kill at that batch therefore finds the host
# paused with its detached shell child running, whatever the scheduling.
FILLER_EVENTS = EVENT_BATCH - 3
PAUSED_LAST_SEQ = EVENT_BATCH + 1
# ``host.events`` hits of one control plane before the batch that pauses the turn on
# ``t2``: turn 1 journals two batches (session.bound; file.changed + result), the
# paused turn's session.bound is the third.
HOST_EVENTS_PAUSED_BATCH_ON_T2 = 4


# --- scripts ----------------------------------------------------------------------------


def _match(title: str, attempt: int | None, kind: str | None) -> dict[str, Any]:
    match: dict[str, Any] = {"todo": title}
    if attempt is not None:
        match["attempt"] = attempt
    if kind is not None:
        match["kind"] = kind
    return match


def write_turn(
    title: str,
    path: str,
    content: str,
    evidence_key: str,
    *,
    attempt: int | None = None,
    kind: str | None = None,
) -> dict[str, Any]:
    """A turn that writes one file and reports the todo done with evidence for it."""
    return {
        "match": _match(title, attempt, kind),
        "steps": [{"op": "write", "path": path, "content": content}],
        "result": {
            "todo_done": True,
            "evidence": [{"key": evidence_key, "command": f"test -f {path}"}],
        },
    }


def paused_turn(title: str, path: str, *, attempt: int = 1) -> dict[str, Any]:
    """A turn that writes half its work, detaches ``sleep 600`` (a ``setsid`` shell
    child, like an agent CLI's shell tool) and pauses forever: it only ever ends by
    being killed. Its result would claim the todo done if it ever got that far."""
    filler = [{"op": "emit", "kind": "progress", "data": {"n": n}} for n in range(FILLER_EVENTS)]
    return {
        "match": _match(title, attempt, None),
        "steps": [
            {"op": "write", "path": path, "content": "partial\n"},
            {"op": "shell", "command": "sleep 600", "detach": True},
            *filler,
            {"op": "checkpoint", "name": PAUSE_NAME, "pause": True},
        ],
        "result": {"todo_done": True},
    }


def fault_turn(title: str, path: str, fault: dict[str, Any], *, attempt: int = 1) -> dict[str, Any]:
    """A turn that writes half its work and then fails its host with ``fault``."""
    return {
        "match": _match(title, attempt, None),
        "steps": [{"op": "write", "path": path, "content": "partial\n"}, fault],
        "result": {"todo_done": True},
    }


def standard_script(first_b_turn: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """``t1`` succeeds; the first attempt on ``t2`` is ``first_b_turn`` (default: a
    success); every later attempt on ``t2`` succeeds. First match wins."""
    turns = [write_turn(TITLE_A, FILE_A, CONTENT_A, EVIDENCE_A)]
    if first_b_turn is not None:
        turns.append(first_b_turn)
    turns.append(write_turn(TITLE_B, FILE_B, CONTENT_B, EVIDENCE_B))
    return turns


# --- processes --------------------------------------------------------------------------


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def _proc_state(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return raw[raw.rindex(b")") + 2 :].split()[0].decode()


def live_marked_processes(turn_ids: Iterable[str]) -> dict[int, str]:
    """Live (not zombie) processes whose environment carries one of ``turn_ids`` as
    ``TURNKEEPER_TURN_ID``: pid -> turn id. Read straight from ``/proc``, independent
    of the product's own process tracking."""
    wanted = {f"{MARKER_ENV}={t}".encode(): t for t in turn_ids}
    found: dict[int, str] = {}
    if not wanted:
        return found
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue
        for entry in environ.split(b"\0"):
            turn = wanted.get(entry)
            if turn is not None:
                if _proc_state(int(name)) not in (None, "Z", "X", "x"):
                    found[int(name)] = turn
                break
    return found


def kill_marked_processes(turn_ids: Iterable[str]) -> list[int]:
    """SIGKILL, by pid, every live process carrying one of this test's turn markers."""
    killed = []
    for pid in live_marked_processes(turn_ids):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    return killed


# --- the CLI ----------------------------------------------------------------------------


def _cli_command() -> list[str]:
    script = Path(sys.executable).with_name("turnkeeper")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "turnkeeper.cli.main"]


@dataclass(frozen=True)
class CliResult:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    @property
    def progress(self) -> list[str]:
        """``run --json`` progress lines (one JSON object per line before the summary)."""
        lines = []
        for line in self.stdout.splitlines():
            if line.startswith('{"progress"'):
                lines.append(str(json.loads(line)["progress"]))
        return lines

    def summary(self) -> dict[str, Any]:
        """The final JSON document of ``run --json``."""
        rest = [ln for ln in self.stdout.splitlines() if not ln.startswith('{"progress"')]
        data = json.loads("\n".join(rest))
        assert isinstance(data, dict)
        return data

    def describe(self) -> str:
        return (
            f"$ turnkeeper {' '.join(self.args)} -> {self.returncode}\n"
            f"--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-4000:]}"
        )


# --- reading the log --------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    seq: int
    type: str
    payload: dict[str, Any]


@dataclass
class TurnHistory:
    """What the session stream says about one turn."""

    turn_id: str
    envelope: dict[str, Any]
    terminals: list[str] = field(default_factory=list)
    lost_proof: dict[str, Any] | None = None
    receipt: dict[str, Any] | None = None

    @property
    def attempt(self) -> int:
        return int(self.envelope["attempt"])

    @property
    def todo_id(self) -> str | None:
        value = self.envelope.get("todo_id")
        return None if value is None else str(value)

    @property
    def terminal(self) -> str | None:
        return self.terminals[0] if len(self.terminals) == 1 else None


def turn_histories(records: list[Record]) -> dict[str, TurnHistory]:
    """Every accepted turn in order of acceptance, with its terminal events."""
    turns: dict[str, TurnHistory] = {}
    for record in records:
        payload = record.payload
        if record.type == "turn.accepted":
            envelope = payload["envelope"]
            turn_id = str(envelope["turn_id"])
            assert turn_id not in turns, f"turn {turn_id} accepted twice"
            turns[turn_id] = TurnHistory(turn_id=turn_id, envelope=envelope)
        elif record.type in TERMINAL_TYPES or record.type == "turn.receipt_recorded":
            turn_id = str(payload["turn_id"])
            assert turn_id in turns, f"{record.type} for turn {turn_id} never accepted"
            if record.type == "turn.receipt_recorded":
                assert turns[turn_id].receipt is None, f"turn {turn_id} has two receipts"
                turns[turn_id].receipt = payload["receipt"]
                continue
            turns[turn_id].terminals.append(record.type)
            if record.type == "turn.lost":
                turns[turn_id].lost_proof = payload["proof"]
    return turns


# --- the project ------------------------------------------------------------------------


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
    def pause_file(self) -> Path:
        return self.repo / ".turnkeeper-pause" / PAUSE_NAME

    # --- running the CLI ------------------------------------------------------------

    def env(self, crash_at: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
        env["TURNKEEPER_DIR"] = str(self.root)
        if crash_at is not None:
            env["TURNKEEPER_CRASH_AT"] = crash_at
        return env

    def cli(self, *args: str, crash_at: str | None = None) -> CliResult:
        """Run ``turnkeeper ARGS`` to its end. Output goes to files, not pipes: a
        process that inherited a pipe could otherwise keep the read open forever."""
        self._calls += 1
        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        out_path = logs / f"{self._calls:02d}.out"
        err_path = logs / f"{self._calls:02d}.err"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                [*_cli_command(), *args],
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
            assert result.returncode == 0, result.describe()
        return result

    def run_control_plane(self, *args: str, crash_at: str | None = None) -> CliResult:
        """``turnkeeper run --json``; with ``crash_at`` it must die by its own SIGKILL."""
        result = self.cli("run", "--json", *args, crash_at=crash_at)
        if crash_at is not None:
            assert result.returncode == -signal.SIGKILL, result.describe()
            assert "[crash point " in result.stderr, result.describe()
        return result

    # --- reading state ----------------------------------------------------------------

    @contextmanager
    def store(self) -> Iterator[EventStore]:
        with _STORE_LOCK:
            store = open_store(self.db_path)
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
        if self.db_path.exists() and self.session_id:
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


def make_project(root: Path, turns: list[dict[str, Any]], *, via_cli: bool = False) -> CrashProject:
    """A git repo plus ``turnkeeper init``, goal ``g``, todos ``t1``/``t2`` and a scripted
    session. ``via_cli`` does every step through the CLI (slower: ~0.5 s per call);
    otherwise through the same services the CLI calls, in this process."""
    root.mkdir(parents=True, exist_ok=True)
    project = CrashProject(root=root)
    project.repo.mkdir()
    _git(project.repo, "init", "-q")
    (project.repo / "README").write_text("crash-recovery test workspace\n")
    _git(project.repo, "add", "-A")
    _git(project.repo, "commit", "-qm", "initial")
    config = {"state_dir": str(project.host_state), "script": {"turns": turns}}
    if via_cli:
        config_file = root / "host-config.json"
        config_file.write_text(json.dumps(config))
        project.cli("init", str(root), "--json")
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
    init_project(root)
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


# --- the invariants ---------------------------------------------------------------------


def assert_goal_completed(project: CrashProject) -> None:
    """The goal closed through its terminal audit, with the files the work promised."""
    with project.store() as store:
        goals = GoalService(store)
        state = goals.load(GOAL_ID)
        audit = goals.audit(GOAL_ID)
    assert state.is_closed, f"goal still {state.goal.status}"
    assert audit.terminal, audit.blockers
    assert (project.repo / FILE_A).read_text() == CONTENT_A
    assert (project.repo / FILE_B).read_text() == CONTENT_B
    closed = [r for r in project.goal_records() if r.type == "goal_closed"]
    assert len(closed) == 1


def assert_every_turn_terminal(project: CrashProject) -> dict[str, TurnHistory]:
    """Invariant 1: every accepted turn ends in exactly one terminal event; none in flight."""
    turns = project.turns()
    for turn in turns.values():
        assert len(turn.terminals) == 1, f"turn {turn.turn_id} terminals: {turn.terminals}"
    session = project.session()
    assert session.in_flight is None
    assert session.recovery is None
    counters = session.counters
    assert counters.turns_accepted == len(turns)
    ended = Counter(t.terminal for t in turns.values())
    assert counters.turns_completed == ended["turn.completed"]
    assert counters.turns_failed == ended["turn.failed"]
    assert counters.turns_lost == ended["turn.lost"]
    return turns


@dataclass(frozen=True)
class RunSnapshot:
    """The host runs and the accepted turns at one moment (e.g. right after a crash)."""

    runs: list[dict[str, Any]]
    accepted: frozenset[str]


def snapshot(project: CrashProject) -> RunSnapshot:
    return RunSnapshot(project.runs(), frozenset(project.turns()))


def assert_host_never_rerun(project: CrashProject, snapshots: Iterable[RunSnapshot] = ()) -> None:
    """Invariant 2: a host step whose failure or loss was recorded never runs again.

    From ``runs.jsonl``: each turn's host ran at most once, only for a turn the session
    accepted, in the order turns were accepted. With ``snapshots`` taken after crashes:
    the run log only grew, and no turn already accepted at a snapshot that ended lost
    or failed ran after it — a restart never (re)runs the turn it recovers."""
    runs = project.runs()
    counts = Counter(str(r["turn_id"]) for r in runs)
    assert all(n == 1 for n in counts.values()), f"a turn's host ran twice: {counts}"
    turns = project.turns()
    assert set(counts) <= set(turns), "a host ran a turn the session never accepted"
    order = list(turns)
    for run in runs:
        turn = turns[str(run["turn_id"])]
        assert (run["attempt"], run["kind"]) == (turn.attempt, turn.envelope["kind"])
    positions = [order.index(str(r["turn_id"])) for r in runs]
    assert positions == sorted(positions), "hosts ran out of the order turns were accepted"
    ended_badly = {t for t, h in turns.items() if h.terminal in ("turn.lost", "turn.failed")}
    for snap in snapshots:
        assert runs[: len(snap.runs)] == snap.runs, "the run log lost lines"
        for run in runs[len(snap.runs) :]:
            turn_id = str(run["turn_id"])
            assert not (turn_id in snap.accepted and turn_id in ended_badly), (
                f"turn {turn_id}, accepted before a crash and recorded lost/failed, ran "
                f"after it: {run}"
            )


def assert_store_consistent(project: CrashProject) -> None:
    """Invariants 4 and 5: checksums, contiguous seqs, every projection equals its fold."""
    with project.store() as store:
        report = store.verify(kernel_folder())
        assert report.ok, report.mismatches
        assert report.streams_checked >= 2
        for stream in (session_stream(project.session_id), goal_stream(GOAL_ID)):
            seqs = [r.seq for r in store.read_stream(stream)]
            assert seqs == list(range(1, len(seqs) + 1)), f"{stream}: {seqs}"
            assert store.head(stream) == len(seqs)
            projection = store.read_projection(stream)
            assert projection is not None
            assert projection.head_seq == len(seqs)


def assert_written_back_once(project: CrashProject, turn_id: str, todo_id: str) -> None:
    """The turn's write-back reached the goal exactly once: one evidence record per
    ``ev-<turn>-<n>`` and one completion of the todo, naming that evidence."""
    records = project.goal_records()
    evidence = Counter(
        str(r.payload["evidence_id"]) for r in records if r.type == "evidence_recorded"
    )
    mine = {eid: n for eid, n in evidence.items() if eid.startswith(f"ev-{turn_id}-")}
    assert mine == {f"ev-{turn_id}-0": 1}, evidence
    completions = [
        r.payload for r in records if r.type == "todo_completed" and r.payload["todo_id"] == todo_id
    ]
    assert len(completions) == 1, completions
    assert completions[0]["evidence_ids"] == [f"ev-{turn_id}-0"]
    written = [
        r
        for r in project.session_records()
        if r.type == "turn.written_back" and r.payload["turn_id"] == turn_id
    ]
    assert len(written) == 1


class ProjectFactory:
    """Makes projects for one test and, at teardown, ends what their turns left running."""

    def __init__(self) -> None:
        self.projects: list[CrashProject] = []

    def make(
        self, root: Path, turns: list[dict[str, Any]], *, via_cli: bool = False
    ) -> CrashProject:
        project = make_project(root, turns, via_cli=via_cli)
        self.projects.append(project)
        return project

    def cleanup(self) -> None:
        for project in self.projects:
            project.cleanup()


@contextmanager
def project_factory() -> Iterator[ProjectFactory]:
    factory = ProjectFactory()
    try:
        yield factory
    finally:
        factory.cleanup()


# --- running scenarios side by side -----------------------------------------------------

# Scenarios are independent projects whose work runs in subprocesses (control planes,
# hosts, git): a few threads overlap the ~0.9 s interpreter start of each control plane
# and the backoff/timeout waits, which keeps the suite inside its time budget.
SCENARIO_WORKERS = 4


def selected_params(request: pytest.FixtureRequest, name: str) -> list[str]:
    """Values of the parametrized argument ``name`` in the selected tests of the
    requesting module, in collection order (so ``-k`` runs only what it selects)."""
    values: list[str] = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or getattr(item, "module", None) is not request.module:
            continue
        value = callspec.params.get(name)
        if value is not None and str(value) not in values:
            values.append(str(value))
    return values


@contextmanager
def scenario_pool(workers: int = SCENARIO_WORKERS) -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(workers, thread_name_prefix="crash-scenario") as pool:
        yield pool
