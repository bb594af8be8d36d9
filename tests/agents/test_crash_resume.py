"""Real CLIs killed and resumed for real, driven by ``turnkeeper run`` as a subprocess.

A goal with two todos in a git worktree; the fake model makes the CLI run real
shell commands that change files. Either the control plane is SIGKILLed while a
command of the CLI runs (restart: the turn is lost, its processes are ended, the
same CLI session is resumed), or the CLI itself is SIGKILLed mid-stream while the
control plane lives (a host recovery record, a continuation that resumes the CLI
session). Both end with the goal closed and the worktree as the todos require.
"""

from __future__ import annotations

import hashlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import (
    CLI_NAMES,
    CliKit,
    MakeKit,
    cmdline,
    kill_marked,
    marked,
    ppid,
    wait_for,
)
from tests.agents.fakes import Rule, Shell, Stall, Text
from tests.agents.project import AgentProject
from turnkeeper.runtime.workspaces.snapshots import artifact_path

pytestmark = pytest.mark.timeout(240)

SESSION_ENV, TURN_ENV = "TURNKEEPER_SESSION_ID", "TURNKEEPER_TURN_ID"
# A detached helper (like a dev server an agent starts) and then the slow work itself.
DETACHED = "setsid sleep 300 >/dev/null 2>&1 </dev/null &"
SLOW = f"{DETACHED} sleep 30; echo done > a.txt"


def rules(first_a: list[Any]) -> list[Rule]:
    """``first_a`` answers the first attempt at t-a; every later turn on t-a (the one
    that resumes the CLI session) and on t-b writes its file at once."""
    return [
        Rule("t-a: write A (attempt 1)", first_a),
        Rule("todo t-a", [Shell("echo done > a.txt"), Text("A is written.")]),
        Rule("todo t-b", [Shell("echo done > b.txt"), Text("B is written.")]),
    ]


@pytest.fixture
def project_for(tmp_path: Path) -> Iterator[Any]:
    made: list[AgentProject] = []

    def make(kit: CliKit, **host_config: Any) -> AgentProject:
        project = AgentProject(tmp_path / "project", kit, **host_config)
        made.append(project)
        return project

    yield make
    for project in made:  # only this test's own control planes and session's processes
        for plane in project.planes:
            plane.stop()
        kill_marked(SESSION_ENV, project.session_id)


def full_access(cli: str) -> dict[str, Any]:
    # Without Codex's bubblewrap sandbox its shell commands are plain ``setsid``
    # children that outlive the CLI: the hard case for the control plane.
    return {"sandbox": "danger-full-access"} if cli == "codex" else {}


def assert_goal_done(project: AgentProject) -> None:
    assert (project.repo / "a.txt").read_text() == "done\n"
    assert (project.repo / "b.txt").read_text() == "done\n"
    goal = project.goal()
    assert goal.is_closed
    assert all(todo.completion is not None for todo in goal.todos.values())
    assert_snapshot_binds_session_file(project)


def _live_artifact(project: AgentProject, handle: str) -> Path | None:
    """Where the session's CLI keeps ``handle``'s session file (the product's lookup)."""
    state = project.session()
    return artifact_path(state.host_kind, state.host_config, handle, Path(state.workspace))


def assert_snapshot_binds_session_file(project: AgentProject) -> None:
    """The last completed turn's snapshot carries the digest of the CLI's session file."""
    state = project.session()
    assert state.last_completed is not None and state.host_session_handle is not None
    path = _live_artifact(project, state.host_session_handle)
    assert path is not None and path.is_file()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert state.last_completed.snapshot.host_artifact_digest == digest


def _session_file(project: AgentProject, handle: str) -> Path | None:
    """The CLI's session file for ``handle`` once it exists with content, else None."""
    path = _live_artifact(project, handle)
    return path if path is not None and path.is_file() and path.stat().st_size > 0 else None


def resumed_requests(kit: CliKit) -> list[str]:
    """Bodies of model calls for the t-a continuation: they carry the CLI's history."""
    return [
        r.text()
        for r in kit.server.model_requests()
        if r.prompt is not None and "Continue todo t-a" in r.prompt
    ]


@pytest.mark.parametrize("cli", CLI_NAMES)
def test_control_plane_sigkilled_while_the_cli_runs_a_command(
    cli: str, make_kit: MakeKit, project_for: Any
) -> None:
    kit = make_kit(cli, rules([Shell(SLOW), Text("A is written.")]))
    project: AgentProject = project_for(kit, **full_access(cli))
    first = project.start_run()

    def running(command: str) -> tuple[int, str] | None:
        for pid, env in marked(SESSION_ENV, project.session_id).items():
            if cmdline(pid) == command:
                return pid, env[TURN_ENV]
        return None

    _, turn_id = wait_for(lambda: running("sleep 30"), 90, "the CLI to run `sleep 30`")
    detached, _ = wait_for(lambda: running("sleep 300"), 10, "the detached `sleep 300`")
    handle = project.session().host_session_handle
    assert handle is not None  # bound (journaled) before the command started

    first.proc.send_signal(signal.SIGKILL)  # the control plane, by its own pid
    assert first.wait() == -signal.SIGKILL
    # What the turn started outlives the control plane that started it. (The CLI
    # itself may notice: Codex 0.171 dies at its next write to the broken pipe and
    # ends its command's process group; Claude Code keeps running. The detached
    # helper survives either way.)
    assert detached in marked(TURN_ENV, turn_id)

    second = project.start_run()
    assert second.wait() == 0, second.output()
    assert second.summary()["stops"] == {project.session_id: "goal_terminal"}, second.output()

    # No process of the killed turn survives the restart.
    assert marked(TURN_ENV, turn_id) == {}
    turns = project.turns()
    lost, resumed, on_b = turns[0], turns[1], turns[-1]
    assert lost["envelope"]["turn_id"] == turn_id
    assert "turn.lost" in lost["events"]
    proof = lost["lost"]["proof"]
    assert proof["ended"] == "killed"
    assert detached in proof["killed_pids"]
    # The continuation resumed the SAME CLI session.
    assert resumed["envelope"]["kind"] == "continuation"
    assert resumed["envelope"]["resume_host_session"] is True
    assert resumed["envelope"]["recovers_turn_id"] == turn_id
    assert resumed["handles"] == [handle]
    assert "turn.completed" in resumed["events"]
    # ...and the model saw that session's history, the first prompt included.
    bodies = resumed_requests(kit)
    assert bodies and all("Start todo t-a: write A (attempt 1)" in b for b in bodies)
    if cli == "codex":  # Codex keeps the interrupted call (as aborted); Claude drops it
        assert "sleep 30" in bodies[0]
    # t-b is new work: a fresh CLI session.
    assert on_b["envelope"]["todo_id"] == "t-b"
    assert on_b["handles"] and on_b["handles"] != [handle]
    assert_goal_done(project)


@pytest.mark.parametrize("cli", CLI_NAMES)
def test_cli_sigkilled_mid_stream_is_recovered_by_resuming_its_session(
    cli: str, make_kit: MakeKit, project_for: Any
) -> None:
    kit = make_kit(cli, rules([Shell("echo partial > a.txt"), Stall()]))
    project: AgentProject = project_for(kit)
    run = project.start_run()
    assert kit.server.stalled.wait(90), "the model stream never stalled"
    assert (project.repo / "a.txt").read_text() == "partial\n"

    def the_cli() -> int | None:
        procs = marked(SESSION_ENV, project.session_id)
        return next((pid for pid in procs if ppid(pid) == run.proc.pid), None)

    cli_pid = wait_for(the_cli, 30, "the CLI process")
    handle = project.session().host_session_handle
    assert handle is not None
    # What this test is about: a CLI killed with a session file to resume from. Claude
    # Code writes its transcript from a queue it flushes now and then; killed before the
    # first flush it leaves nothing to resume, and each resume attempt then fails
    # `protocol` ("session file ... is missing") until the session is crashed.
    wait_for(lambda: _session_file(project, handle), 30, "the CLI's session file")
    os.kill(cli_pid, signal.SIGKILL)  # a CLI our control plane started for this test

    assert run.wait() == 0, run.output()
    assert run.summary()["stops"] == {project.session_id: "goal_terminal"}, run.output()
    turns = project.turns()
    failed, resumed = turns[0], turns[1]
    receipt = failed["receipt"]
    assert receipt["outcome"] == "failure"
    assert receipt["error_kind"] == "signal"
    assert receipt["signal"] == signal.SIGKILL
    record = receipt["host_recovery"]
    assert record["kind"] == "resume_session"
    assert record["failed_phase"] == "host_execute"
    assert record["binding"]["host_session_handle"] == handle
    assert record["binding"]["host_kind"] == cli
    assert "turn.failed" in failed["events"]
    assert resumed["envelope"]["kind"] == "continuation"
    assert resumed["envelope"]["recovers_turn_id"] == failed["envelope"]["turn_id"]
    assert resumed["envelope"]["attempt"] == 2
    assert resumed["handles"] == [handle]
    bodies = resumed_requests(kit)
    assert bodies and "Start todo t-a: write A (attempt 1)" in bodies[0]
    if cli == "codex":  # Claude Code may not have flushed the last tool call when killed
        assert "echo partial" in bodies[0]
    assert_goal_done(project)
