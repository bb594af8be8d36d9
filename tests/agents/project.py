"""A throwaway turnkeeper project driven by a real agent CLI through ``turnkeeper run``.

The project: a git repo, goal ``g`` with todo ``t-a`` ("write A", needs evidence
``a-done``: ``a.txt`` holds ``done``) and todo ``t-b`` ("write B", after ``t-a``,
needs ``b-done``), and one session of the CLI's host kind on the repo, created with
``turnkeeper session create --host <cli> --host-config @FILE`` as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tests.agents.conftest import CliKit, make_repo
from turnkeeper.kernel import GoalState
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import SessionState
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.project import Project, init_project
from turnkeeper.runtime.services.sessions import SessionService, session_stream
from turnkeeper.store import open_store

GOAL = "g"
EVIDENCE = {
    "t-a": [{"key": "a-done", "command": "grep -qx done a.txt"}],
    "t-b": [{"key": "b-done", "command": "grep -qx done b.txt"}],
}
CLI_TIMEOUT = 120.0


def turnkeeper_command() -> list[str]:
    script = Path(sys.executable).with_name("turnkeeper")
    return [str(script)] if script.exists() else [sys.executable, "-m", "turnkeeper.cli.main"]


@dataclass(frozen=True)
class Record:
    seq: int
    type: str
    payload: dict[str, Any]


@dataclass
class ControlPlane:
    """A running ``turnkeeper run --json``, its output going to files (not pipes)."""

    proc: subprocess.Popen[bytes]
    out: Path
    err: Path
    _files: list[IO[bytes]] = field(default_factory=list)

    def wait(self, timeout: float = CLI_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        finally:
            for f in self._files:
                f.close()

    def stop(self) -> None:
        """SIGKILL this control plane (our own child, by its pid) if it still runs."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def output(self) -> str:
        out, err = self.out.read_text()[-6000:], self.err.read_text()[-6000:]
        return f"--- stdout\n{out}\n--- stderr\n{err}"

    def summary(self) -> dict[str, Any]:
        lines = [ln for ln in self.out.read_text().splitlines() if not ln.startswith('{"progress"')]
        data = json.loads("\n".join(lines))
        assert isinstance(data, dict)
        return data


class AgentProject:
    def __init__(self, root: Path, kit: CliKit, **host_config: Any):
        self.root = root
        self.kit = kit
        self.repo = make_repo(root / "repo")
        self.project: Project = init_project(root)[0]
        self.runs = 0
        self.planes: list[ControlPlane] = []
        store = open_store(self.project.database_url)
        try:
            goals = GoalService(store)
            goals.create(CreateGoal(goal_id=GOAL, title="Write A then B"))
            goals.submit(
                GOAL,
                AddTodo(
                    todo=TodoSpec(todo_id="t-a", title="write A", required_evidence=["a-done"])
                ),
            )
            spec = TodoSpec(
                todo_id="t-b", title="write B", depends_on=["t-a"], required_evidence=["b-done"]
            )
            goals.submit(GOAL, AddTodo(todo=spec))
        finally:
            store.close()
        config_file = root / "host-config.json"
        config_file.write_text(json.dumps(kit.host_config(evidence=EVIDENCE, **host_config)))
        created = self.cli(
            "session", "create", GOAL, "--host", kit.kind,
            "--host-config", f"@{config_file}", "--workspace", str(self.repo), "--json",
        )  # fmt: skip
        self.session_id = str(json.loads(created)["session_id"])

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
        env["TURNKEEPER_DIR"] = str(self.root)
        return env

    def cli(self, *args: str) -> str:
        proc = subprocess.run(
            [*turnkeeper_command(), *args],
            cwd=self.root,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT,
            check=False,
        )
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        return proc.stdout

    def start_run(self, *args: str) -> ControlPlane:
        self.runs += 1
        out = self.root / f"run-{self.runs}.out"
        err = self.root / f"run-{self.runs}.err"
        fo, fe = out.open("wb"), err.open("wb")
        proc = subprocess.Popen(
            [*turnkeeper_command(), "run", "--json", "--lease", "30", *args],
            cwd=self.root,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=fo,
            stderr=fe,
        )
        plane = ControlPlane(proc, out, err, [fo, fe])
        self.planes.append(plane)
        return plane

    # --- reading state --------------------------------------------------------------

    def records(self) -> list[Record]:
        store = open_store(self.project.database_url)
        try:
            raw = store.read_stream(session_stream(self.session_id))
        finally:
            store.close()
        return [Record(r.seq, r.type, json.loads(r.payload)) for r in raw]

    def session(self) -> SessionState:
        store = open_store(self.project.database_url)
        try:
            return SessionService(store).load(self.session_id)
        finally:
            store.close()

    def goal(self) -> GoalState:
        store = open_store(self.project.database_url)
        try:
            return GoalService(store).load(GOAL)
        finally:
            store.close()

    def turns(self) -> list[dict[str, Any]]:
        """Each accepted turn: its envelope plus what the log says happened to it."""
        turns: dict[str, dict[str, Any]] = {}
        for r in self.records():
            p = r.payload
            if r.type == "turn.accepted":
                env = p["envelope"]
                turns[env["turn_id"]] = {"envelope": env, "events": [], "handles": []}
                continue
            turn = turns.get(str(p.get("turn_id")))
            if turn is None:
                continue
            turn["events"].append(r.type)
            if r.type == "turn.host_events":
                turn["handles"] += [
                    e["data"]["handle"] for e in p["events"] if e["kind"] == "session.bound"
                ]
            if r.type == "turn.receipt_recorded":
                turn["receipt"] = p["receipt"]
            if r.type == "turn.lost":
                turn["lost"] = p
        return list(turns.values())
