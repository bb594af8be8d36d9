"""What turnkeeper writes into a session's workspace stays out of that repository's commits.

As a user has it: ``turnkeeper init`` in one repository, and a session working in
another — a repository of its own, with no ``.turnkeeper/`` line in any
``.gitignore`` — or in a linked worktree. After a turn, the workspace holds
turnkeeper's files (the snapshot's copy of the host's transcript, the scripted
host's state), yet ``git add -A`` there stages the agent's work and nothing of
turnkeeper's, and the user's own ignore files are left as they were.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.usage.project import GIT_IDENTITY, UserProject
from tests.usage.test_private_dirs import KEYS, VERSIONS

GOAL = "g1"


def repository(path: Path) -> Path:
    """A repository of the user's own, apart from the project's."""
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("another repository\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", *args],
        cwd=repo,
        env={**os.environ, **GIT_IDENTITY},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return proc.stdout


def test_a_turn_in_a_repository_of_its_own_leaves_nothing_for_git_add(
    user_project: UserProject,
) -> None:
    project = user_project
    workspace = repository(project.root.parent / "workspace")
    project.tk("goal", "add", "Write the notes", "--id", GOAL)
    project.tk("todo", "add", GOAL, "Write notes", "--id", "t1")
    write = {"op": "write", "path": "notes.txt", "content": "the agent's notes\n"}
    script = {"turns": [{"steps": [write], "result": {"todo_done": True}}]}
    config = project.host_config("scripted", {"script": script})  # its state: the default
    created = project.tk_json(
        "session", "create", GOAL, "--host", "scripted", "--host-config", config,
        "--workspace", str(workspace),
    )  # fmt: skip
    sid = created["session_id"]

    project.tk("run", "--max-turns", "1", timeout=90)

    copy = project.tk_json("session", "show", sid)["last_completed"]["snapshot"]
    transcript_copy = Path(copy["host_artifact_copy"])
    assert transcript_copy.is_file()
    assert transcript_copy.is_relative_to(workspace / ".turnkeeper")  # written in there
    assert (workspace / ".turnkeeper" / "host-state" / "scripted" / "runs.jsonl").is_file()
    git(workspace, "add", "-A")
    assert git(workspace, "status", "--porcelain", "--untracked-files=all") == "A  notes.txt\n"
    assert not (workspace / ".gitignore").exists()  # no rule of the user's was needed
    assert "turnkeeper" not in (workspace / ".git" / "info" / "exclude").read_text()


def test_a_cli_home_inside_a_linked_worktree_is_ignored_there(user_project: UserProject) -> None:
    project = user_project
    worktree = project.root.parent / "linked"
    project.git("worktree", "add", "-q", "-b", "side", str(worktree))
    goal = project.tk("goal", "add", "Work", "-c", "done", "-q").stdout.strip()
    binary = project.agent("codex", f'#!/bin/sh\necho "{VERSIONS["codex"]}"\n')
    config = project.host_config("codex", {"codex_home": ".codex-work", "binary": str(binary)})

    project.tk(
        "session", "create", goal, "--host", "codex", "--host-config", config,
        "--workspace", str(worktree), env=KEYS,
    )  # fmt: skip
    rollout = worktree / ".codex-work" / "sessions" / "rollout-1.jsonl"
    rollout.parent.mkdir(parents=True)
    rollout.write_text('{"type": "session_meta"}\n')

    # git reads a linked worktree's info/exclude from the main repository's git dir.
    assert git(worktree, "status", "--porcelain", "--untracked-files=all") == ""
    exclude = project.root / ".git" / "info" / "exclude"
    assert exclude.read_text().count("/.codex-work/") == 1
