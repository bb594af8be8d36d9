"""A session's workspace must be a git repository, unless the user turns snapshots off.

``session create`` on a plain directory is refused (``FAILED_PRECONDITION``,
``workspace_not_git``) and writes nothing: otherwise every turn would complete
without a snapshot and nothing would say so. With ``--no-snapshots`` the session is
created, its turns complete, ``session show`` says snapshots are off and ``session
revert`` is refused (``snapshots_disabled``).
"""

from __future__ import annotations

from pathlib import Path

from tests.usage.project import UserProject
from tests.usage.refusals import refused

GOAL = "g1"


def _plain_directory(project: UserProject) -> Path:
    """A directory a user keeps work in without git (outside any repository)."""
    path = project.root.parent / "plain-work"
    path.mkdir()
    (path / "notes.txt").write_text("my notes\n")
    return path


def test_a_plain_directory_is_refused_unless_snapshots_are_off(user_project: UserProject) -> None:
    project = user_project
    project.tk("goal", "add", "Write the notes", "--id", GOAL)
    project.tk("todo", "add", GOAL, "Write more notes", "--id", "t1")
    plain = _plain_directory(project)
    write = {"op": "append", "path": "notes.txt", "content": "more notes\n"}
    script = {"turns": [{"steps": [write], "result": {"todo_done": True}}]}
    state_dir = str(project.root.parent / "host-state")
    config = project.host_config("scripted", {"state_dir": state_dir, "script": script})
    create = ("session", "create", GOAL, "--host-config", config, "--workspace", str(plain))

    error = refused(project, *create, code="FAILED_PRECONDITION", reason="workspace_not_git")
    assert "--no-snapshots" in error["message"] and "git init" in error["message"]
    # A folder inside the repository is no repository's top either: snapshots need one.
    inside = project.root / "sub"
    inside.mkdir()
    sub = ("session", "create", GOAL, "--workspace", str(inside))
    refused(project, *sub, code="FAILED_PRECONDITION", reason="workspace_not_git")

    created = project.tk_json(*create, "--no-snapshots")
    sid = created["session_id"]
    assert created["snapshots"] is False
    run = project.start("run", "--json")
    assert run.wait() == 0, run.output()
    summary = run.summary()
    assert (summary["turns"], summary["failed_turns"]) == (1, 0), summary
    assert (plain / "notes.txt").read_text() == "my notes\nmore notes\n"
    assert not (plain / ".git").exists()  # nothing made it a repository behind the user

    shown = project.tk_json("session", "show", sid)
    assert shown["snapshots"] is False
    assert shown["counters"]["turns_completed"] == 1
    snapshot = shown["last_completed"]["snapshot"]
    assert (snapshot["snapshot_ref"], snapshot["workspace_commit"]) == (None, None)
    assert "snapshots off" in project.tk("session", "show", sid).stdout
    assert project.tk_json("session", "snapshots", sid)["snapshots"][0]["snapshot_ref"] is None

    revert = ("session", "revert", sid, "--request-id", "revert-1")
    refused(project, *revert, code="FAILED_PRECONDITION", reason="snapshots_disabled")


def test_the_repository_itself_needs_no_flag(user_project: UserProject) -> None:
    user_project.tk("goal", "add", "Ship it", "--id", GOAL)
    created = user_project.tk_json("session", "create", GOAL, "--workspace", ".")
    assert created["snapshots"] is True
    assert "snapshots off" not in user_project.tk("session", "show", created["session_id"]).stdout
