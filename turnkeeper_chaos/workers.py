"""Workers mode: many ``run --worker`` processes share one PostgreSQL database's sessions
while the harness SIGKILLs workers (and restarts them) and restarts the database.

One project on a fresh database of the server the caller names (created here, dropped
after a clean run), ``sessions`` goals of ``todos`` todos each, one session per goal
in a git workspace of its own. The agent is a plain shell script, as a user would
write: it writes down its own run (turn, attempt, pid and ancestry) in a file outside
the workspace before doing anything, writes the todo's page, works a moment, and
returns the todo done with evidence and one ``http`` effect against the harness's
counting service — the side effect whose applications are counted outside the code
under test.

``workers`` worker processes run throughout; at random moments one is SIGKILLed (by
its pid: the harness's own child) and a new one started in its place. When given a
shell command that restarts the database, the harness runs it at random moments too.
Each goal's last todo waits for the harness's release, written once the kills and
restarts are spent, so every one of them lands while goals are open. Then the workers
finish, every session is checked (:mod:`.worker_checks`), the whole store verified,
and no process of any turn may be left running.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from turnkeeper.errors import InvalidArgument, TurnkeeperError
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import TurnAccepted
from turnkeeper.runtime.services.folder import kernel_folder
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.project import init_project
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.store import MismatchKind, open_store
from turnkeeper_chaos.checks import INV4, INV5, LEFTOVER, Violation
from turnkeeper_chaos.procs import (
    end_marked_processes,
    live_marked_processes,
    wait_until,
)
from turnkeeper_chaos.project import cli_command
from turnkeeper_chaos.service import CountingService
from turnkeeper_chaos.worker_checks import (
    SessionChecker,
    SessionView,
    WorkersReport,
    read_runs,
)
from turnkeeper_chaos.worker_fleet import Fleet, runs_an_agent

WORKER_CRASH = "worker crashed"
UNAVAILABLE_EXIT = 9  # the CLI's exit code for UNAVAILABLE
EVIDENCE = "written"
AGENT = r"""#!/bin/sh
# A chaos agent: RUNS_DIR SECONDS [LAST_TODO RELEASE WAIT_LIMIT]. It writes down its
# run before any step.
set -eu
runs="$1"; work="$2"; last="${3:-}"; release="${4:-}"; limit="${5:-0}"
turn="$TURNKEEPER_TURN_ID"; todo="$TURNKEEPER_TODO_ID"
chain=""; p=$$
while [ "$p" -gt 1 ]; do
  chain="$chain${chain:+, }$p"
  set -- $(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null) || true
  p=${2:-1}
done
run='{"turn_id": "%s", "session_id": "%s", "attempt": %s, "todo_id": "%s", "ancestors": [%s]}'
printf "$run\n" "$turn" "$TURNKEEPER_SESSION_ID" "$TURNKEEPER_ATTEMPT" "$todo" "$chain" \
  > "$runs/$turn.$$.json"
page="$todo.md"
echo "# $todo" > "$page"
sleep "$work"
# Given LAST_TODO, the goal's last todo waits for the harness's RELEASE file (written
# once its kills and restarts are spent), so no goal closes while chaos remains;
# bounded by WAIT_LIMIT seconds.
if [ -n "$last" ] && [ "$todo" = "$last" ]; then
  waited=0
  while [ ! -e "$release" ] && [ "$waited" -lt "$limit" ]; do
    sleep 1; waited=$((waited + 1))
  done
fi
printf '{"kind": "message", "data": {"text": "wrote %s"}}\n' "$page"
evidence="{\"key\": \"written\", \"command\": \"test -s $page\"}"
body="{\"todo\": \"$todo\", \"turn\": \"$turn\"}"
effect="{\"provider\": \"http\", \"request\": {\"body\": $body}}"
printf '{"kind": "result", "data": {"todo_done": true, "evidence": [%s], "effects": [%s]}}\n' \
  "$evidence" "$effect"
"""


@dataclass(frozen=True)
class WorkersConfig:
    database_url: str  # a server; the run makes a database of its own there
    workers: int = 4
    sessions: int = 32
    # Each goal's last todo is held until the kills and restarts are spent (see AGENT),
    # so a fast machine cannot close every goal one kill short.
    todos: int = 8
    kills: int = 20  # worker SIGKILLs
    restarts: int = 0  # database restarts, through restart_command
    restart_command: str | None = None
    seed: int = 0
    lease_seconds: float = 6.0
    poll_seconds: float = 0.5
    turn_seconds: float = 1.0  # how long the agent works each turn
    max_sessions: int = 0  # per worker (0: half again its even share)
    time_limit: float = 600.0  # seconds before the run gives up on open goals
    keep: bool = False
    base_dir: Path | None = None

    def validate(self) -> None:
        if self.workers < 2:
            raise InvalidArgument("workers mode needs at least 2 workers", reason="invalid_workers")
        if self.sessions < 1 or self.todos < 1:
            raise InvalidArgument("sessions and todos must be positive", reason="invalid_sessions")
        if self.kills < 0 or self.restarts < 0:
            raise InvalidArgument("kills and restarts must not be negative", reason="invalid_kills")
        if self.restarts and not self.restart_command:
            raise InvalidArgument(
                "database restarts need --restart-database-command", reason="no_restart_command"
            )
        if not self.database_url.startswith("postgresql"):
            raise InvalidArgument("workers mode needs a postgresql:// URL", reason="bad_url")

    @property
    def per_worker(self) -> int:
        return self.max_sessions or max(1, -(-self.sessions * 3 // (2 * self.workers)))


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))


def _libpq(url: str) -> str:
    _scheme, rest = url.split("://", 1)
    return "postgresql://" + rest


class WorkersRun:
    def __init__(self, config: WorkersConfig) -> None:
        config.validate()
        self.config = config
        self.rng = random.Random(config.seed)
        self._own_base = config.base_dir is None
        self.base = config.base_dir or Path(tempfile.mkdtemp(prefix="turnkeeper-chaos-workers-"))
        self.base.mkdir(parents=True, exist_ok=True)
        self.project = self.base / "project"
        self.runs_dir = self.base / "runs"
        self.release = self.base / "release"  # written when the chaos is spent
        self.dbname = f"tk_chaos_{uuid.uuid4().hex[:10]}"
        self.url = with_database(config.database_url, self.dbname)
        self.sessions: dict[str, tuple[str, str, list[str]]] = {}  # sid -> label, goal, todos
        self.facts: dict[str, int] = {"kills": 0, "kills_mid_turn": 0, "database_restarts": 0}
        self.violations: list[Violation] = []
        self.fleet = Fleet(
            self._worker_command(), cwd=self.project, env=self.env, logs=self.base / "logs"
        )

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
        env["TURNKEEPER_DIR"] = str(self.project)
        env["TURNKEEPER_OWNER"] = "chaos-operator"
        env["no_proxy"] = env["NO_PROXY"] = "127.0.0.1,localhost"
        return env

    def _worker_command(self) -> list[str]:
        cfg = self.config
        return [
            *cli_command(),
            "run",
            "--worker",
            "--json",
            *("--lease", str(cfg.lease_seconds), "--poll", str(cfg.poll_seconds)),
            *("--max-sessions", str(cfg.per_worker), "--idle-exit", "4"),
            *("--backoff", "0.5"),
            # The last todo's turn is held until every kill and restart is spent, and a
            # kill goes to a worker with a turn in flight, so that one turn can be lost
            # once per kill and restart: the bound on lost turns in a row sits above
            # them all, or a run whose kills happen to fall on one session suspends it.
            *("--max-lost", str(cfg.kills + cfg.restarts + 8)),
        ]

    # --- setting up -----------------------------------------------------------------

    def setup(self, service: CountingService) -> None:
        with psycopg.connect(_libpq(self.config.database_url), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.dbname)))
        _git_repo(self.project)
        init_project(self.project, self.url)
        self.runs_dir.mkdir()
        agent = self.base / "agent.sh"
        agent.write_text(AGENT)
        agent.chmod(0o755)
        store = open_store(self.url)
        try:
            goals, sessions = GoalService(store), SessionService(store)
            for n in range(self.config.sessions):
                label, goal_id = f"s{n:03d}", f"g{n:03d}"
                todo_ids = [f"{goal_id}-t{k + 1}" for k in range(self.config.todos)]
                goals.create(CreateGoal(goal_id=goal_id, title=f"workers chaos {label}"))
                for todo_id in todo_ids:
                    spec = TodoSpec(
                        todo_id=todo_id, title=f"page {todo_id}", required_evidence=[EVIDENCE]
                    )
                    goals.submit(goal_id, AddTodo(todo=spec))
                workspace = self.base / "ws" / label
                _git_repo(workspace)
                command = [str(agent), str(self.runs_dir), str(self.config.turn_seconds)]
                command += [todo_ids[-1], str(self.release), str(int(self.config.time_limit))]
                config = {
                    "command": command,
                    "event_format": "jsonl",
                    "effects": {"providers": {"http": service.provider_config(label)}},
                }
                session = sessions.create(goal_id, workspace, "subprocess", config)
                self.sessions[session.session_id] = (label, goal_id, todo_ids)
        finally:
            store.close()

    # --- the run --------------------------------------------------------------------

    def open_goals(self) -> int | None:
        """Goals not yet closed (None: the database does not answer now)."""
        try:
            store = open_store(self.url)
        except TurnkeeperError:
            return None
        try:
            goals = GoalService(store)
            return sum(1 for _, g, _ in self.sessions.values() if not goals.load(g).is_closed)
        except TurnkeeperError:
            return None
        finally:
            store.close()

    def drive(self) -> None:
        cfg = self.config
        for slot in range(cfg.workers):
            self.fleet.start(slot)
        # Restarts fall between kills, spread over the run.
        events = ["kill"] * cfg.kills + ["restart"] * cfg.restarts
        self.rng.shuffle(events)
        deadline = time.monotonic() + cfg.time_limit
        for what in events:
            if time.monotonic() > deadline or self.open_goals() == 0:
                break
            time.sleep(self.rng.uniform(0.2, 1.2))
            self._respawn()
            if what == "kill":
                self._kill_one()
            else:
                self._restart_database()
        self.release.touch()
        while time.monotonic() < deadline:
            self._respawn()
            if self.open_goals() == 0:
                break
            time.sleep(0.5)
        self.fleet.stop_all(timeout=20)

    def _respawn(self) -> None:
        """A worker that ended (killed, or idle while the others were) is replaced
        while any goal is open."""
        self.fleet.reap()
        if self.open_goals() == 0:
            return
        for slot in range(self.config.workers):
            if slot not in self.fleet.live:
                self.fleet.start(slot)

    def _kill_one(self) -> None:
        # A worker with a turn in flight, when one has: kills land mid-turn.
        live = list(self.fleet.live.values())
        if not live:
            return
        agent = str(self.base / "agent.sh")
        busy = [p for p in live if runs_an_agent(p.proc.pid, agent)]
        target = self.rng.choice(busy or live)
        self.fleet.kill(target.slot)
        self.facts["kills"] += 1
        self.facts["kills_mid_turn"] += bool(busy)
        self.fleet.reap()
        time.sleep(self.rng.uniform(0.0, 0.5))
        self.fleet.start(target.slot)

    def _restart_database(self) -> None:
        assert self.config.restart_command is not None
        done = subprocess.run(
            self.config.restart_command,
            check=False,
            shell=True,
            capture_output=True,
            text=True,
            timeout=180,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the database restart command failed: {done.stderr[-2000:]}")
        self.facts["database_restarts"] += 1

    # --- checking -------------------------------------------------------------------

    def check(self, service: CountingService) -> None:
        runs = read_runs(self.runs_dir)
        turn_ids = {str(r.get("turn_id")) for r in runs}
        totals: dict[str, int] = {"turns": 0, "completed": 0, "lost": 0, "failed": 0}
        totals |= {"host_runs": len(runs), "recoveries": 0, "effects_applied": 0}
        for sid, (label, goal_id, todos) in self.sessions.items():
            view = SessionView(
                self.base,
                label,
                self.base / "ws" / label,
                self.url,
                sid,
                goal_id,
                todos,
                [r for r in runs if r.get("session_id") == sid],
            )
            result = SessionChecker(view, service, self.fleet.killed_pids()).check()
            self.violations += result.violations
            f = result.facts
            for key in ("turns", "completed", "lost", "failed", "recoveries", "effects_applied"):
                totals[key] += getattr(f, key)
            turn_ids |= {
                e.envelope.turn_id for e in view.session_events() if isinstance(e, TurnAccepted)
            }
        self.facts.update(totals)
        self._check_verify()
        self._check_workers()
        wait_until(lambda: not live_marked_processes(turn_ids), 10.0)
        survivors = live_marked_processes(turn_ids)
        if survivors:
            self.violations.append(Violation("workers", LEFTOVER, f"left running: {survivors}"))
            end_marked_processes(turn_ids)
        self.facts["orphans"] = len(survivors)

    def _check_verify(self) -> None:
        try:
            store = open_store(self.url)
            try:
                report = store.verify(kernel_folder())
            finally:
                store.close()
        except TurnkeeperError as error:
            self.violations.append(Violation("workers", INV4, f"verify failed: {error.message}"))
            return
        for m in report.mismatches:
            invariant = INV4 if m.kind is MismatchKind.SOURCE_WRITE else INV5
            detail = f"verify: {m.kind.value} {m.stream_id}@{m.seq}: {m.detail}"
            self.violations.append(Violation("workers", invariant, detail))

    def _check_workers(self) -> None:
        """Every worker either died by the harness's SIGKILL or exited 0, no traceback."""
        unavailable = turns = refused = 0
        for p in self.fleet.ended:
            err = p.err.read_text(errors="replace")
            out = p.out.read_text(errors="replace")
            unavailable += out.count('"event": "database_unavailable"')
            turns += out.count('"event": "turn_planned"')
            if p.killed:
                continue
            if p.proc.returncode == UNAVAILABLE_EXIT and '"operation": "open"' in out:
                # Started as the database went down: it could not open the store.
                refused += 1
                continue
            if p.proc.returncode != 0 or "Traceback" in err:
                detail = f"{p.out.name} exited {p.proc.returncode}: {err[-1500:]}"
                self.violations.append(Violation("workers", WORKER_CRASH, detail))
        self.facts["worker_processes"] = len(self.fleet.ended)
        self.facts["unavailable_reports"] = unavailable
        self.facts["workers_refused_at_start"] = refused
        self.facts["turns_planned_by_workers"] = turns

    def drop_database(self) -> None:
        with psycopg.connect(_libpq(self.config.database_url), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(self.dbname)
                )
            )

    def execute(self) -> WorkersReport:
        started = time.monotonic()
        with CountingService() as service:
            try:
                self.setup(service)
                self.drive()
                self.check(service)
            finally:
                for p in list(self.fleet.live.values()):
                    self.fleet.kill(p.slot)
                self.fleet.reap()
                end_marked_processes({str(r.get("turn_id")) for r in read_runs(self.runs_dir)})
        report = WorkersReport(
            seed=self.config.seed,
            violations=self.violations,
            facts=self.facts,
            elapsed=time.monotonic() - started,
            base_dir=self.base,
        )
        if report.ok and not self.config.keep:
            self.drop_database()
            if self._own_base:
                shutil.rmtree(self.base, ignore_errors=True)
        return report


def _git_repo(path: Path) -> None:
    path.mkdir(parents=True)
    git = ["git", "-c", "user.email=chaos@example.com", "-c", "user.name=chaos"]
    (path / "README").write_text("workers chaos workspace\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "initial"]):
        subprocess.run([*git, *args], cwd=path, check=True, capture_output=True, timeout=60)


def run_workers_chaos(config: WorkersConfig) -> WorkersReport:
    """Run the workers chaos ``config`` asks for; the report says what was violated."""
    return WorkersRun(config).execute()
