"""Revert with the real Codex CLI: the session comes back to its snapshot and the next
turn resumes the same Codex session from there.

Codex's first turn on ``t-a`` drafts ``a.txt`` (the todo's evidence still fails) and
completes: the snapshot holds the worktree and a copy of the Codex rollout file.
Then the crash: the agent's later work is committed on the branch, the worktree
changes again, and the rollout is torn mid-line. The next ``turnkeeper run`` finds
the rollout no longer what the snapshot recorded and marks the session crashed
without starting Codex. ``session revert`` brings the tree hash, the branch and the
rollout back byte for byte; after a resume, ``turnkeeper run`` continues ``t-a`` by
resuming the SAME Codex thread (the fake model sees the drafted history, not the
torn tail) and completes the goal.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import MakeKit, git, kill_marked
from tests.agents.fakes import Rule, Shell, Text
from tests.agents.project import AgentProject
from turnkeeper.kernel.session import SetStatus
from turnkeeper.runtime.control.controller import Controller
from turnkeeper.runtime.workspaces.snapshots import workspace_tree
from turnkeeper.store import open_store

pytestmark = pytest.mark.timeout(240)

TORN = b'{"timestamp":"2030-01-01T00:00:00Z","type":"response_item","payload":{"POISON'

RULES = [
    Rule("t-a: write A (attempt 1)", [Shell("echo draft > a.txt"), Text("Drafted A.")]),
    Rule("todo t-a", [Shell("echo done > a.txt"), Text("A is written.")]),
    Rule("todo t-b", [Shell("echo done > b.txt"), Text("B is written.")]),
]


@pytest.fixture
def project(tmp_path: Path, make_kit: MakeKit) -> Iterator[AgentProject]:
    made = AgentProject(tmp_path / "project", make_kit("codex", RULES))
    try:
        yield made
    finally:  # only this test's own control planes and session's processes
        for plane in made.planes:
            plane.stop()
        kill_marked("TURNKEEPER_SESSION_ID", made.session_id)


def run(project: AgentProject, *args: str, expect: int = 0) -> dict[str, Any]:
    """``run`` to its end; ``expect``: its exit code (11: a session ended crashed)."""
    plane = project.start_run(*args)
    assert plane.wait() == expect, plane.output()
    summary: dict[str, Any] = plane.summary()
    assert summary["exit_code"] == expect, summary
    return summary


def resume(project: AgentProject) -> None:
    store = open_store(project.project.database_url)
    try:
        controller = Controller(store)
        token = controller.acquire(project.session_id)
        controller.sessions.execute(project.session_id, SetStatus(lease=token, action="resume"))
        controller.release(project.session_id)
    finally:
        store.close()


def crash_after_the_snapshot(project: AgentProject, rollout: Path, copy: bytes) -> str:
    """Later work committed and left in the worktree, the rollout torn; ``run`` then
    marks the session crashed without starting Codex. The agent's commit."""
    kit, repo, sid = project.kit, project.repo, project.session_id
    (repo / "a.txt").write_text("half-way\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "agent work after the snapshot")
    later = git(repo, "rev-parse", "HEAD").strip()
    (repo / "junk.txt").write_text("partial\n")
    rollout.write_bytes(copy[: len(copy) // 2] + TORN)
    calls = len(kit.server.model_requests())
    crashed = run(project, expect=11)
    assert crashed["stops"] == {sid: "crashed"}
    assert crashed["outcomes"] == {sid: "crashed"}
    assert project.session().status == "crashed"
    assert len(kit.server.model_requests()) == calls  # Codex never ran on the torn file
    return later


def test_revert_restores_tree_and_rollout_and_codex_resumes_its_session(
    project: AgentProject,
) -> None:
    kit, repo, sid = project.kit, project.repo, project.session_id
    assert run(project, "--max-turns", "1")["stops"] == {sid: "budget"}
    state = project.session()
    last, handle = state.last_completed, state.host_session_handle
    assert last is not None and handle is not None
    snap = last.snapshot
    assert snap.workspace_tree is not None and snap.workspace_commit is not None
    assert snap.host_artifact_path is not None and snap.host_artifact_copy is not None
    rollout, copy = Path(snap.host_artifact_path), Path(snap.host_artifact_copy).read_bytes()
    assert rollout.read_bytes() == copy
    assert handle in rollout.name  # Codex's own rollout of this thread
    assert (repo / "a.txt").read_text() == "draft\n"
    parent = git(repo, "rev-parse", f"{snap.workspace_commit}^").strip()

    later = crash_after_the_snapshot(project, rollout, copy)

    reverted = json.loads(project.cli("session", "revert", sid, "--request-id", "r1", "--json"))
    assert (reverted["result"], reverted["session"]["status"]) == ("reverted", "suspended")
    assert workspace_tree(repo) == snap.workspace_tree
    assert rollout.read_bytes() == copy
    assert git(repo, "rev-parse", "HEAD").strip() == parent
    assert git(repo, "rev-parse", f"refs/turnkeeper/reverted/{sid}/r1").strip() == later
    assert (repo / "a.txt").read_text() == "draft\n"
    assert not (repo / "junk.txt").exists()

    resume(project)
    summary = run(project)
    assert summary["stops"] == {sid: "goal_terminal"}, summary
    first, resumed, on_b = project.turns()  # the crash-detecting run started no turn
    assert first["handles"] == [handle]
    assert on_b["envelope"]["todo_id"] == "t-b"
    assert on_b["handles"] and on_b["handles"] != [handle]  # new work: a new thread
    assert resumed["envelope"]["kind"] == "continuation"
    assert resumed["envelope"]["todo_id"] == "t-a"
    assert resumed["envelope"]["resume_host_session"] is True
    assert resumed["handles"] == [handle]  # the same Codex thread, resumed
    assert "turn.completed" in resumed["events"]
    bodies = [
        r.text()
        for r in kit.server.model_requests()
        if r.prompt is not None and "continue todo t-a" in r.prompt.lower()
    ]
    # The model saw the history the snapshot kept, and nothing of the torn tail.
    assert bodies
    assert all("Start todo t-a: write A (attempt 1)" in b for b in bodies)
    assert all("echo draft > a.txt" in b for b in bodies)
    assert not any("POISON" in b for b in bodies)
    assert (repo / "a.txt").read_text() == "done\n"
    assert (repo / "b.txt").read_text() == "done\n"
    assert project.goal().is_closed
