"""Real CLIs through the runner: the control plane SIGKILLed during a 30 s tool call.

A project made as a user makes one (a git repo with its ``.gitignore``, ``turnkeeper
init``, a goal with one todo, a session of the CLI's host kind) and the project's
runner (``turnkeeper runner start``). The fake model asks the CLI for one shell
command that ticks for 30 s; while it ticks the ``turnkeeper run`` driving the turn
is SIGKILLed. The host belongs to the runner, so it ticks on; the next ``run``
reattaches (the recovery report says so), and the SAME turn completes: not lost, no
continuation, the CLI started once, its command ran once, and the session journal
holds each host event once, in order, numbered 1..n.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from tests.agents.conftest import (
    CLI_NAMES,
    CliKit,
    MakeKit,
    cmdline,
    git,
    kill_marked,
    marked,
    wait_for,
)
from tests.agents.fakes import Rule, Shell, Text
from tests.agents.project import turnkeeper_command

pytestmark = pytest.mark.timeout(240)

SESSION_ENV, TURN_ENV = "TURNKEEPER_SESSION_ID", "TURNKEEPER_TURN_ID"
TICKS = 30
# The tool call: one line in tool-runs.log per execution (with the HOME it sees: the
# host config's, not the shell's of whoever started the runner), then a line a second
# (to its output and to tool-ticks.log, which the test watches) for 30 s, then the
# todo's evidence. Both logs are ignored by the user's own ``.gitignore``.
COMMAND = (
    'echo "run HOME=$HOME" >> tool-runs.log; '
    f'for i in $(seq 1 {TICKS}); do echo "tick $i"; echo "$i" >> tool-ticks.log; sleep 1; done; '
    "echo done > a.txt"
)
FINAL = "A is written."
START_PROMPT = "write A"
CLI_TIMEOUT = 120.0
# How each CLI's model requests carry a tool's result and the CLI session's id.
TOOL_RESULT = {"codex": '"function_call_output"', "claude": '"tool_result"'}
SESSION_HEADER = {"codex": "session-id", "claude": "x-claude-code-session-id"}


@dataclass
class UserProject:
    """A git repository set up for turnkeeper through its CLI, as a user does it."""

    repo: Path
    kit: CliKit
    session_id: str = ""
    planes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _files: list[IO[bytes]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        # TURNKEEPER_DIR is also the marker of every process this project starts
        # (the runner included): teardown ends what carries it, by pid.
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
        env["TURNKEEPER_DIR"] = str(self.repo)
        return env

    def cli(self, *args: str) -> str:
        proc = subprocess.run(
            [*turnkeeper_command(), *args],
            cwd=self.repo,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT,
            check=False,
        )
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        return proc.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "--json"))

    def start_run(self) -> subprocess.Popen[bytes]:
        n = len(self.planes) + 1
        out = self.repo.parent / f"run-{n}.out"
        fo, fe = out.open("wb"), (self.repo.parent / f"run-{n}.err").open("wb")
        self._files += [fo, fe]
        proc = subprocess.Popen(
            [*turnkeeper_command(), "run", "--json", "--lease", "30", "--runner", "require"],
            cwd=self.repo,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=fo,
            stderr=fe,
        )
        self.planes.append(proc)
        return proc

    def output(self, n: int) -> str:
        base = self.repo.parent
        out = (base / f"run-{n}.out").read_text()[-6000:]
        err = (base / f"run-{n}.err").read_text()[-6000:]
        return f"--- stdout\n{out}\n--- stderr\n{err}"

    def summary(self, n: int) -> dict[str, Any]:
        text = (self.repo.parent / f"run-{n}.out").read_text()
        lines = [ln for ln in text.splitlines() if not ln.startswith('{"progress"')]
        data = json.loads("\n".join(lines))
        assert isinstance(data, dict)
        return data

    def journaled_events(self, turn_id: str) -> list[dict[str, Any]]:
        shown = self.json("turn", "show", turn_id, "--events", "1000000")
        events = shown["events"]
        assert isinstance(events, list) and len(events) == shown["host_events"], shown
        return events

    def close(self) -> None:
        for proc in self.planes:  # our own control planes, by their Popen
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for f in self._files:
            f.close()


def make_user_project(root: Path, kit: CliKit) -> UserProject:
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("a test repository\n")
    (repo / ".gitignore").write_text("*.log\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    project = UserProject(repo=repo, kit=kit)
    project.cli("init")
    git(repo, "commit", "-q", "-am", "keep turnkeeper's state out of git")
    project.cli("goal", "add", "Write A", "--id", "g")
    project.cli("todo", "add", "g", START_PROMPT, "--id", "t-a", "--requires-evidence", "a-done")
    config = root / "host-config.json"  # outside the worktree, as a user's would be
    evidence = {"t-a": [{"key": "a-done", "command": "grep -qx done a.txt"}]}
    config.write_text(json.dumps(kit.host_config(evidence=evidence)))
    created = project.json(
        "session", "create", "g", "--host", kit.kind,
        "--host-config", f"@{config}", "--workspace", str(repo),
    )  # fmt: skip
    project.session_id = str(created["session_id"])
    return project


@pytest.fixture
def user_project(tmp_path: Path) -> Iterator[Any]:
    made: list[UserProject] = []

    def make(kit: CliKit) -> UserProject:
        project = make_user_project(tmp_path / "project", kit)
        made.append(project)
        return project

    yield make
    for project in made:
        project.close()
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            project.cli("runner", "stop", "--force")
        # Whatever is left of this test's own session, turn or runner, by pid.
        kill_marked(SESSION_ENV, project.session_id)
        kill_marked("TURNKEEPER_DIR", str(project.repo))


def events_of(project: UserProject, turn_id: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in project.journaled_events(turn_id) if e["kind"] == kind]


def ticks(project: UserProject) -> list[str]:
    path = project.repo / "tool-ticks.log"
    return path.read_text().splitlines() if path.exists() else []


def turn_in_runner(status: dict[str, Any], turn_id: str) -> dict[str, Any]:
    found = [t for t in status["turns"] if t["turn_id"] == turn_id]
    assert len(found) == 1, status
    turn = found[0]
    assert isinstance(turn, dict)
    return turn


@pytest.mark.parametrize("cli", CLI_NAMES)
def test_control_plane_sigkilled_during_a_tool_call_reattaches_and_the_turn_completes(
    cli: str, make_kit: MakeKit, user_project: Any
) -> None:
    kit = make_kit(cli, [Rule(START_PROMPT, [Shell(COMMAND, wait=True), Text(FINAL)])])
    project: UserProject = user_project(kit)
    runner_pid = int(project.json("runner", "start")["pid"])

    turn_id, before = kill_run_during_the_tool_call(project, runner_pid)

    second = project.start_run()
    assert second.wait(CLI_TIMEOUT) == 0, project.output(2)
    assert project.summary(2)["stops"] == {project.session_id: "goal_terminal"}, project.output(2)
    counters = assert_reattached_and_completed(project, turn_id, len(before))
    assert_host_ran_once(project, cli, turn_id)

    # Every host event once, in order, numbered 1..n; the part journaled before the
    # kill unchanged.
    events = project.journaled_events(turn_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), events
    # ...and journaled in that order (a record of the session's log holds a batch).
    positions = [e["stream_seq"] for e in events]
    assert positions == sorted(positions), positions
    assert events[: len(before)] == before
    assert len(events) > len(before)
    assert_agent_events(events)
    assert counters["host_events"] == len(events)

    # The runner forgot the finished turn; stopping it leaves no process behind.
    assert all(t["turn_id"] != turn_id for t in project.json("runner", "status")["turns"])
    project.cli("runner", "stop")
    wait_for(lambda: not _alive(runner_pid), 30, "the runner to exit")
    assert marked(SESSION_ENV, project.session_id) == {}
    assert marked("TURNKEEPER_DIR", str(project.repo)) == {}


def kill_run_during_the_tool_call(
    project: UserProject, runner_pid: int
) -> tuple[str, list[dict[str, Any]]]:
    """``turnkeeper run`` SIGKILLed while the CLI's command ticks: the turn's id and
    its events journaled by then."""
    first = project.start_run()
    # The tool call runs: it has ticked twice (and the CLI's events so far, the
    # command's start among them, are journaled before the command's output exists).
    wait_for(lambda: len(ticks(project)) >= 2, 90, "the CLI's command to tick")
    host_procs = marked(SESSION_ENV, project.session_id)
    assert host_procs, "the CLI runs no process with the session's marker"
    turn_id = next(iter(host_procs.values()))[TURN_ENV]
    # Every process of the turn is the runner's, none the control plane's (a `sleep 1`
    # that ended meanwhile has no ancestors left to read).
    chains = {pid: chain for pid in host_procs if (chain := _ancestors(pid))}
    assert chains, host_procs
    for pid, chain in chains.items():
        assert runner_pid in chain and first.pid not in chain, (pid, chain, cmdline(pid))

    first.send_signal(signal.SIGKILL)  # the control plane, our own child, by its pid
    assert first.wait(30) == -signal.SIGKILL
    before = project.journaled_events(turn_id)
    kept = len(before)
    assert [e["seq"] for e in before] == list(range(1, kept + 1))
    assert any(e["kind"] == "command.started" for e in before), before
    # The host ticks on without a control plane; the runner acknowledged exactly what
    # the dead control plane had committed.
    ticked = len(ticks(project))
    wait_for(lambda: len(ticks(project)) >= ticked + 2, 10, "the command to tick on")
    in_runner = turn_in_runner(project.json("runner", "status"), turn_id)
    assert in_runner["acked_seq"] == kept, (in_runner, kept)
    assert in_runner["end_reason"] is None, in_runner
    assert len(ticks(project)) < TICKS, "the kill came too late: the command had finished"
    return turn_id, before


def assert_reattached_and_completed(
    project: UserProject, turn_id: str, kept: int
) -> dict[str, Any]:
    """The recovery reattached the turn after what was journaled, and that same turn
    completed: the only turn, not lost, no continuation. The session's counters."""
    shown = project.json("session", "show", project.session_id)
    report = shown["latest_recovery_report"]
    actions = [a for a in report["actions"] if a["kind"] == "reattached"]
    assert len(actions) == 1, report
    assert actions[0]["turn_id"] == turn_id
    assert actions[0]["detail"] == f"reattached at seq {kept}"

    turns = project.json("turn", "list", project.session_id)["turns"]
    assert [t["turn_id"] for t in turns] == [turn_id], turns
    assert turns[0]["outcome"] == "completed", turns
    assert turns[0]["kind"] == "start", turns
    counters = shown["counters"]
    assert (counters["turns_accepted"], counters["turns_completed"]) == (1, 1), counters
    assert (counters["turns_lost"], counters["turns_recovered"]) == (0, 0), counters
    assert project.json("audit", "g")["audit"]["terminal"] is True
    assert isinstance(counters, dict)
    return counters


def assert_host_ran_once(project: UserProject, cli: str, turn_id: str) -> None:
    """One CLI session, started once, asked the model for the command, waited for it
    and answered once; the command ran once (with the host config's HOME) and ticked
    1..30 once each."""
    kit = project.kit
    calls = kit.server.model_requests()
    assert calls and all(START_PROMPT in (r.prompt or "") for r in calls)
    starts = [r for r in calls if TOOL_RESULT[cli] not in r.text()]
    assert len(starts) == 1, [r.text()[-300:] for r in calls]
    assert [r.step for r in calls].count(1) == 1, [r.step for r in calls]
    handle = events_of(project, turn_id, "session.bound")[0]["data"]["handle"]
    assert {r.headers.get(SESSION_HEADER[cli]) for r in calls} == {handle}
    home = kit.host_config()["env"]["HOME"]
    assert (project.repo / "tool-runs.log").read_text() == f"run HOME={home}\n"
    assert ticks(project) == [str(i) for i in range(1, TICKS + 1)]
    assert (project.repo / "a.txt").read_text() == "done\n"


def assert_agent_events(events: list[dict[str, Any]]) -> None:
    """What the agent did, as events: bound once, one command started and completed
    with its whole output, one final message, the result last; nothing twice."""
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "session.bound", kinds
    assert kinds[-1] == "result", kinds
    for kind in ("session.bound", "command.started", "command.completed", "result"):
        assert kinds.count(kind) == 1, kinds
    started = kinds.index("command.started")
    completed = kinds.index("command.completed")
    messages = [i for i, e in enumerate(events) if e["kind"] == "message"]
    assert started < completed < messages[-1] < len(kinds) - 1, kinds
    assert [events[i]["data"]["text"] for i in messages].count(FINAL) == 1, events
    done = events[completed]["data"]
    assert "tool-ticks.log" in done["command"]
    assert done["exit_code"] == 0, done
    output = [ln for ln in str(done["output"]).splitlines() if ln.startswith("tick ")]
    assert output == [f"tick {i}" for i in range(1, TICKS + 1)], done["output"]
    bodies = [json.dumps([e["kind"], e["data"]], sort_keys=True) for e in events]
    assert len(set(bodies)) == len(bodies), events


def _alive(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return raw[raw.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X", b"x")


def _ancestors(pid: int) -> list[int]:
    chain: list[int] = []
    current: int | None = pid
    while current:
        try:
            raw = Path(f"/proc/{current}/stat").read_bytes()
        except OSError:
            break
        current = int(raw[raw.rindex(b")") + 2 :].split()[1])
        if current:
            chain.append(current)
    return chain
