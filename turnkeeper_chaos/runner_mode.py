"""Runner mode: the control plane and the runner SIGKILLed, in every combination, while
agents' turns run in the runner; the turns reattach, or are lost and continued.

One project made as a user makes it (a git repo, ``turnkeeper init``; SQLite), one goal
per session, each session in a git workspace of its own. The agent is a plain shell
script: it writes down its run (turn, attempt, pid) outside the workspace, leaves a
detached grandchild (like an agent's shell tool), then prints a tick every
``tick_seconds`` — each line written to its own record before it is printed — and
returns the todo done with evidence and one ``http`` effect against the counting
service. The harness owns, by pid, one ``turnkeeper runner serve`` and one
``turnkeeper run --runner auto`` at a time, and works through a seeded plan:

* ``cp_mid_turn`` — the control plane SIGKILLed while agents run;
* ``cp_wave`` — that, and the restarted control plane SIGKILLed again ~1-2 s later,
  while the turns it reattached run;
* ``cp_and_runner`` — the control plane, then the runner, back to back;
* ``runner_alone`` — the runner SIGKILLed under a live control plane;
* ``ack_lost`` — a control plane started with ``TURNKEEPER_CRASH_AT=host.events@k``
  dies after journaling a batch, before acknowledging it;
* ``result_lost`` — a runner started with ``runner.host_started`` (or
  ``runner.command_pending``) armed dies after starting a host, before answering.

After each kill the harness restarts what died (the runner first). While kills remain
it keeps each goal a few todos ahead, so no goal closes early; then it lets every goal
close, stops the runner, and checks (:mod:`.runner_checks`).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from turnkeeper.errors import InvalidArgument, TurnkeeperError
from turnkeeper.json_types import JsonDict
from turnkeeper.kernel.model import UNFINISHED_TODO_STATUSES
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import TurnAccepted
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.project import DB_FILE_NAME, STATE_DIR_NAME
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.store import EventStore, open_store
from turnkeeper_chaos.checks import LEFTOVER, Violation
from turnkeeper_chaos.procs import end_marked_processes, live_marked_processes, wait_until
from turnkeeper_chaos.project import cli_command, make_git_repo
from turnkeeper_chaos.runner_checks import RunnerReport, RunnerSessionChecker, read_runner_runs
from turnkeeper_chaos.runner_procs import Processes
from turnkeeper_chaos.service import CountingService
from turnkeeper_chaos.worker_checks import SessionView

KINDS = ("cp_mid_turn", "cp_wave", "cp_and_runner", "runner_alone", "ack_lost", "result_lost")
# Kills per episode and how often each is drawn: control-plane kills (which reattach)
# outweigh runner kills (which lose the turns in flight).
_RUNNER_KINDS = ("cp_and_runner", "runner_alone", "result_lost")
_KILLS = {k: 2 if k in ("cp_wave", "cp_and_runner") else 1 for k in KINDS}
_WEIGHTS = (4.0, 3.0, 1.0, 1.0, 2.0, 1.0)
CP_CRASH = "control plane crashed"
STRANDED = "stranded session"
AHEAD = 4  # open todos each goal is kept at while kills remain
EVIDENCE = "written"
_OPEN_LOCK = threading.Lock()
TICK_RECORD = '"record": "message"'  # a line ``run --json`` prints per agent message
AGENT = r"""#!/bin/sh
# A runner-chaos agent: RUNS_DIR TICKS SECONDS. Each line is recorded, then printed.
set -eu
runs="$1"; ticks="$2"; pause="$3"
turn="$TURNKEEPER_TURN_ID"; todo="$TURNKEEPER_TODO_ID"; rec="$runs/$turn.$$"
printf '{"turn_id": "%s", "session_id": "%s", "attempt": %s, "todo_id": "%s", "pid": %s}\n' \
  "$turn" "$TURNKEEPER_SESSION_ID" "$TURNKEEPER_ATTEMPT" "$todo" "$$" > "$rec.tmp"
mv "$rec.tmp" "$rec.json"
setsid sh -c 'exec sleep 600' </dev/null >/dev/null 2>&1 &
echo "# $todo" > "$todo.md"
i=1
while [ "$i" -le "$ticks" ]; do
  line=$(printf '{"kind": "message", "data": {"text": "tick %d of %s", "tick": %d, "pid": %s}}' \
    "$i" "$todo" "$i" "$$")
  echo "$line" >> "$rec.events"
  echo "$line"
  sleep "$pause"
  i=$((i+1))
done
evidence="{\"key\": \"written\", \"command\": \"test -s $todo.md\"}"
effect="{\"provider\": \"http\", \"request\": {\"body\": {\"todo\": \"$todo\"}}}"
printf '{"kind": "result", "data": {"todo_done": true, "evidence": [%s], "effects": [%s]}}\n' \
  "$evidence" "$effect"
"""


@dataclass(frozen=True)
class RunnerChaosConfig:
    kills: int = 100
    seed: int = 0
    sessions: int = 4
    todos: int = 3  # each goal's first todos (more are added while kills remain)
    ticks: int = 10
    tick_seconds: float = 0.25
    time_limit: float = 600.0  # seconds before the run gives up on open goals
    keep: bool = False
    base_dir: Path | None = None

    def validate(self) -> None:
        if self.kills < 0:
            raise InvalidArgument("--kills must not be negative", reason="invalid_kills")
        if self.sessions < 1 or self.todos < 1 or self.ticks < 1:
            raise InvalidArgument("sessions, todos, ticks must be positive", reason="invalid")


def kill_plan(kills: int, seed: int) -> list[str]:
    """Episodes worth ``kills`` kills: each kind once (as far as they fit), then drawn
    by weight; in a seeded order."""
    rng = random.Random(seed)
    plan: list[str] = []
    spent = 0
    for kind in KINDS:
        if spent + _KILLS[kind] <= kills:
            plan.append(kind)
            spent += _KILLS[kind]
    while spent < kills:
        kind = rng.choices(KINDS, _WEIGHTS)[0]
        if spent + _KILLS[kind] > kills:
            kind = "cp_mid_turn"
        plan.append(kind)
        spent += _KILLS[kind]
    rng.shuffle(plan)
    return plan


class RunnerModeRun:
    def __init__(self, config: RunnerChaosConfig) -> None:
        config.validate()
        self.config = config
        self.rng = random.Random(f"{config.seed}:delays")
        self._own_base = config.base_dir is None
        self.base = config.base_dir or Path(tempfile.mkdtemp(prefix="turnkeeper-chaos-runner-"))
        self.base.mkdir(parents=True, exist_ok=True)
        self.project = self.base / "project"
        self.runs_dir = self.base / "runs"
        self.agent = self.base / "agent.sh"
        self.url = f"sqlite:///{self.project / STATE_DIR_NAME / DB_FILE_NAME}"
        self.sessions: dict[str, tuple[str, str, list[str]]] = {}  # sid -> label, goal, todos
        self.episodes: Counter[str] = Counter()
        self.violations: list[Violation] = []
        self._runner_crashes_seen = 0
        self._later: list[str] = []  # the plan's episodes still to come
        self.procs = Processes(self.project, self.base / "logs", self.env)

    def _open(self) -> EventStore:
        # Opening a store runs Alembic, whose context is process global: the harness's
        # threads take turns.
        with _OPEN_LOCK:
            return open_store(self.url)

    def env(self, crash_at: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
        env["TURNKEEPER_DIR"] = str(self.project)
        env["TURNKEEPER_OWNER"] = "chaos-operator"
        env["no_proxy"] = env["NO_PROXY"] = "127.0.0.1,localhost"
        if crash_at:
            env["TURNKEEPER_CRASH_AT"] = crash_at
        return env

    def ensure_cp(self, crash_at: str | None = None) -> None:
        """A control plane running, while any goal is open."""
        self.procs.reap_cp()
        if self.procs.cp is None and self.open_goals() != 0 and not self.procs.start_cp(crash_at):
            raise RuntimeError("no runner answered within 30s")

    def _wait_mid_turn(self, timeout: float = 20.0) -> None:
        """Until the control plane relays a tick of a running turn, then a moment more."""
        cp = self.procs.cp
        if cp is not None:
            wait_until(lambda: TICK_RECORD in cp.text() or cp.proc.poll() is not None, timeout)
        time.sleep(self.rng.uniform(0.0, 1.0))

    # --- setting up -----------------------------------------------------------------

    def setup(self, service: CountingService) -> None:
        make_git_repo(self.project)
        init = subprocess.run(
            [*cli_command(), "init", str(self.project)],
            check=False,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if init.returncode != 0:
            raise RuntimeError(f"turnkeeper init failed: {init.stderr[-2000:]}")
        self.runs_dir.mkdir()
        self.agent.write_text(AGENT)
        self.agent.chmod(0o755)
        cfg = self.config
        store = self._open()
        try:
            goals, sessions = GoalService(store), SessionService(store)
            for n in range(cfg.sessions):
                label, goal_id = f"s{n:02d}", f"g{n:02d}"
                goals.create(CreateGoal(goal_id=goal_id, title=f"runner chaos {label}"))
                workspace = self.base / "ws" / label
                make_git_repo(workspace)
                command = [str(self.agent), str(self.runs_dir), str(cfg.ticks)]
                host = {
                    "command": [*command, str(cfg.tick_seconds)],
                    "event_format": "jsonl",
                    "effects": {"providers": {"http": service.provider_config(label)}},
                }
                session = sessions.create(goal_id, workspace, "subprocess", host)
                self.sessions[session.session_id] = (label, goal_id, [])
                self._add_todos(goals, session.session_id, cfg.todos)
        finally:
            store.close()

    def _add_todos(self, goals: GoalService, sid: str, n: int) -> None:
        _, goal_id, todos = self.sessions[sid]
        for _ in range(n):
            todo_id = f"{goal_id}-t{len(todos) + 1:03d}"
            spec = TodoSpec(todo_id=todo_id, title=f"page {todo_id}", required_evidence=[EVIDENCE])
            goals.submit(goal_id, AddTodo(todo=spec))
            todos.append(todo_id)

    def _topping_up(self, stop: threading.Event) -> None:
        """Keep every goal ``AHEAD`` open todos ahead until ``stop``, as a user adds work
        to a running goal: no goal closes while kills remain."""
        while not stop.wait(0.5):
            store = self._open()
            try:
                goals = GoalService(store)
                for sid, (_, goal_id, _) in self.sessions.items():
                    state = goals.load(goal_id)
                    todos = state.todos.values()
                    open_ = sum(1 for t in todos if t.status in UNFINISHED_TODO_STATUSES)
                    if not state.is_closed and open_ < AHEAD:
                        self._add_todos(goals, sid, AHEAD - open_)
            except TurnkeeperError:
                continue  # the database busy under the control plane: next time
            finally:
                store.close()

    def open_goals(self) -> int:
        store = self._open()
        try:
            goals = GoalService(store)
            return sum(1 for _, g, _ in self.sessions.values() if not goals.load(g).is_closed)
        finally:
            store.close()

    # --- the episodes ---------------------------------------------------------------

    def drive(self) -> None:
        plan = kill_plan(self.config.kills, self.config.seed)
        deadline = time.monotonic() + self.config.time_limit
        self.procs.runner_arm = self._runner_crash(plan[0]) if plan else None
        self.procs.supervise()
        stop = threading.Event()
        feeder = threading.Thread(target=self._topping_up, args=(stop,), daemon=True)
        feeder.start()
        try:
            for index, kind in enumerate(plan):
                if time.monotonic() > deadline:
                    break
                self._later = plan[index + 1 :]
                self.ensure_cp(self._cp_crash(kind))
                getattr(self, f"_{kind}")()
                self.episodes[kind] += 1
        finally:
            stop.set()
            feeder.join()
        exits = 0  # control planes in a row that stopped by themselves, goals still open
        while time.monotonic() < deadline and self.open_goals():
            ended = self.procs.reap_cp()
            if ended is not None and not ended.killed:
                exits += 1
                if exits >= 3:
                    tail = ended.text().strip().splitlines()[-1:]
                    why = f"{self.open_goals()} goal(s) open, run stops at once: {tail}"
                    self.violations.append(Violation("runner", STRANDED, why[:1500]))
                    break
            self.ensure_cp()
            time.sleep(0.5)
        cp = self.procs.cp
        if cp is not None and self.procs.wait_for_exit(cp, 60.0):
            self.procs.reap_cp()

    def _cp_crash(self, kind: str | None) -> str | None:
        return f"host.events@{self.rng.randint(1, 8)}" if kind == "ack_lost" else None

    def _runner_crash(self, kind: str | None) -> str | None:
        if kind != "result_lost":
            return None
        point = self.rng.choice(["runner.host_started"] * 3 + ["runner.command_pending"])
        return f"{point}@{self.rng.randint(1, 4)}"

    def _cp_mid_turn(self) -> None:
        self._wait_mid_turn()
        self.procs.kill("cp")

    def _cp_wave(self) -> None:
        self._cp_mid_turn()
        self.ensure_cp()
        # The second kill while the turns the restart reattached run on.
        cp = self.procs.cp
        if cp is not None:
            wait_until(lambda: '"reattached"' in cp.text() or cp.proc.poll() is not None, 15.0)
            time.sleep(self.rng.uniform(0.2, 1.5))
            self.procs.kill("cp")
        self.ensure_cp()

    def _cp_and_runner(self) -> None:
        self._wait_mid_turn()
        self._arm_next_runner()
        with self.procs.lock:  # back to back: the supervisor restarts the runner after
            self.procs.kill("cp")
            self.procs.kill("runner")
        self.ensure_cp()

    def _runner_alone(self) -> None:
        self._wait_mid_turn()
        self._arm_next_runner()
        self.procs.kill("runner")

    def _arm_next_runner(self) -> None:
        """A runner killed now restarts armed if the plan's next runner kill is a lost
        result: it dies by itself at its crash point, with no kill spent to arm it."""
        runner_kinds = [k for k in self._later if k in _RUNNER_KINDS]
        if runner_kinds and runner_kinds[0] == "result_lost":
            self.procs.runner_arm = self._runner_crash("result_lost")

    def _ack_lost(self) -> None:
        cp = self.procs.cp
        if cp is None or not cp.crash_at:  # started unarmed: killed, restarted armed
            self._wait_mid_turn()
            self.procs.kill("cp")
            self.episodes["kills_to_arm_cp"] += 1
            self.ensure_cp(self._cp_crash("ack_lost"))
            cp = self.procs.cp
        if cp is not None and not self.procs.wait_for_exit(cp, 30.0):
            self.procs.kill("cp")  # never reached its point: a plain kill
            self.episodes["crash_point_missed"] += 1
        self.ensure_cp()

    def _result_lost(self) -> None:
        crashes = self.procs.point_crashes
        if crashes["runner"] > self._runner_crashes_seen:  # armed earlier: it fired already
            self._runner_crashes_seen = crashes["runner"]
            return
        with self.procs.lock:
            runner = self.procs.runner
            armed = runner is not None and bool(runner.crash_at)
            if not armed and self.procs.runner_arm is None:
                self.procs.runner_arm = self._runner_crash("result_lost")
        if not armed:  # killed, and restarted armed by the supervisor
            self._wait_mid_turn()
            self.procs.kill("runner")
            self.episodes["kills_to_arm_runner"] += 1
            wait_until(lambda: self.procs.runner is not None, 5.0)
            runner = self.procs.runner
        if runner is not None and not self.procs.wait_for_exit(runner, 30.0):
            self.procs.kill("runner")
            self.episodes["crash_point_missed"] += 1
        time.sleep(0.1)  # the supervisor reaps it
        self._runner_crashes_seen = crashes["runner"]

    # --- checking -------------------------------------------------------------------

    def check(self, service: CountingService) -> JsonDict:
        runs = read_runner_runs(self.runs_dir)
        turn_ids = {str(r.get("turn_id")) for r in runs}
        totals: Counter[str] = Counter()
        reattached_turns = 0
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
            checker = RunnerSessionChecker(view, service)
            result = checker.check()
            self.violations += result.violations
            f, t = result.facts, checker.tally
            for key in ("turns", "completed", "lost", "failed", "recoveries", "effects_applied"):
                totals[key] += getattr(f, key)
            totals["reattach_actions"] += t.reattach_actions
            totals["reattached_completed"] += t.reattached_completed
            totals["reattached_turn_ticks"] += t.reattached_events
            reattached_turns += len(t.reattached)
            turn_ids |= {
                e.envelope.turn_id for e in view.session_events() if isinstance(e, TurnAccepted)
            }
        self._check_processes()
        wait_until(lambda: not live_marked_processes(turn_ids), 10.0)
        survivors = live_marked_processes(turn_ids)
        if survivors:
            self.violations.append(Violation("runner", LEFTOVER, f"left running: {survivors}"))
            end_marked_processes(turn_ids)
        victims = self.procs.victims
        return {
            "kills": sum(victims.values()),
            "kills_control_plane": victims["cp"],
            "kills_runner": victims["runner"],
            "episodes": dict(sorted(self.episodes.items())),
            "sessions": len(self.sessions),
            "todos": sum(len(t) for _, _, t in self.sessions.values()),
            **dict(totals),
            "host_runs": len(runs),
            "reattached_turns": reattached_turns,
            "lost_turns": totals["lost"],
            "orphans": len(survivors),
            "control_planes": sum(1 for p in self.procs.ended if p.role == "cp"),
            "runners": sum(1 for p in self.procs.ended if p.role == "runner"),
        }

    def _check_processes(self) -> None:
        """Every control plane and runner died by the harness's kill (or its own armed
        crash point) or exited 0, without a traceback."""
        for p in self.procs.ended:
            err = p.err.read_text(errors="replace")
            if p.killed or p.crashed_at_point:
                continue
            if p.proc.returncode != 0 or "Traceback" in err:
                detail = f"{p.out.name} exited {p.proc.returncode}: {err[-1500:]}"
                self.violations.append(Violation("runner", CP_CRASH, detail))

    def execute(self) -> RunnerReport:
        started = time.monotonic()
        facts: JsonDict = {}
        with CountingService() as service:
            try:
                self.setup(service)
                self.drive()
                self.procs.kill("cp")  # still running at the time limit
                self.procs.stop_runner()
                facts = self.check(service)
            except TurnkeeperError as error:
                self.violations.append(Violation("runner", "harness", error.message))
            finally:
                self.procs.end_all()
                end_marked_processes(
                    {str(r.get("turn_id")) for r in read_runner_runs(self.runs_dir)}
                )
        report = RunnerReport(
            seed=self.config.seed,
            violations=self.violations,
            facts=facts,
            elapsed=time.monotonic() - started,
            base_dir=self.base,
        )
        if report.ok and not self.config.keep and self._own_base:
            shutil.rmtree(self.base, ignore_errors=True)
        return report


def run_runner_chaos(config: RunnerChaosConfig) -> RunnerReport:
    """Run the runner-mode chaos ``config`` asks for; the report says what was violated."""
    return RunnerModeRun(config).execute()
