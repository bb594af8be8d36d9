"""A revert judges what to keep by the snapshot's ignore rules, whatever the turn did to them.

Each case is a real repository whose snapshot is taken, then changed as an agent's
turn would change its ignore rules to hide files of its own: a rewritten
``.gitignore``, a new nested one, a changed nested one the snapshot holds, a folder
that ignores itself (``*``), rules hidden behind other rules. After the restore the
worktree — tracked, and untracked-not-ignored under the now restored rules — is the
snapshot's tree, every file of the turn is in the preserve directory, and what the
user had ignored before the turn (``.env``, logs, a cache folder that ignores itself)
is where it was, byte for byte.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from tests.runtime.test_snapshot_repositories import SID, new_repo
from tests.runtime.test_snapshots import git
from turnkeeper.runtime.workspaces.snapshots import Snapshot, capture
from turnkeeper.runtime.workspaces.workspace_restore import (
    Preserver,
    preserve_root,
    read_preserved,
    restore_workspace,
)

# The user's files git ignores, there before the turn: new_repo's, and a tool's cache
# folder that ignores itself, as pytest makes one.
USERS = {
    ".env": b"SECRET=1\n",
    "debug.log": b"a log\n",
    ".pytest_cache/.gitignore": b"# Created by pytest automatically.\n*\n",
    ".pytest_cache/v/cache/lastfailed": b"{}\n",
}


def worktree_tree(repo: Path) -> str:
    """The tree of the worktree as git sees it under the rules in it now (tracked +
    untracked-not-ignored), through an index of its own."""
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "GIT_INDEX_FILE": f"{scratch}/index"}
        subprocess.run(["git", "add", "-A"], cwd=repo, env=env, check=True, timeout=60)
        out = subprocess.run(
            ["git", "write-tree"], cwd=repo, env=env, check=True, capture_output=True, text=True
        )
        return out.stdout.strip()


def take(repo: Path) -> tuple[Snapshot, datetime]:
    """The user's ignored files, then the snapshot of a completed turn and the time
    it completed; the next turn writes a moment later (as a real one does)."""
    for name, content in USERS.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(content)
    snap = capture(repo, SID, "turn-1", 1, None)
    assert snap is not None
    completed = datetime.now(UTC)
    time.sleep(0.05)  # file times come from a coarse clock (a few ms behind)
    return snap, completed


def revert(repo: Path, snap: Snapshot, completed: datetime) -> list[str]:
    """Restore the snapshot; the preserved paths. Then check what every case must hold."""
    root = preserve_root(repo, SID, "revert-1")
    restore_workspace(repo, snap.tree, Preserver(repo, root), SID, since=completed)
    assert worktree_tree(repo) == snap.tree
    assert {name: (repo / name).read_bytes() for name in USERS} == USERS
    preserved = read_preserved(root)
    assert preserved is not None
    assert (Path(preserved.directory) / "files").is_dir()
    # Again (a retry after a crash): nothing left to do, nothing moved twice.
    restore_workspace(repo, snap.tree, Preserver(repo, root), SID, since=completed)
    again = read_preserved(root)
    assert again is not None and again.paths == preserved.paths
    return sorted(preserved.paths)


def test_a_rewritten_gitignore_does_not_keep_the_file_it_hid(tmp_path: Path) -> None:
    repo = new_repo(tmp_path)
    snap, completed = take(repo)
    (repo / ".gitignore").write_text(".env\n*.log\n.turnkeeper/\nsecret.txt\n")
    (repo / "secret.txt").write_text("the agent's\n")

    assert revert(repo, snap, completed) == [".gitignore", "secret.txt"]
    assert not (repo / "secret.txt").exists()
    root = preserve_root(repo, SID, "revert-1")
    assert (root / "files" / "secret.txt").read_text() == "the agent's\n"


def test_nested_rules_new_and_changed_do_not_keep_what_they_hid(tmp_path: Path) -> None:
    repo = new_repo(tmp_path)
    (repo / "sub").mkdir()
    (repo / "sub" / ".gitignore").write_text("local.txt\n")
    (repo / "sub" / "local.txt").write_text("the user's, ignored\n")
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("print('v1')\n")
    snap, completed = take(repo)
    # A changed nested .gitignore the snapshot holds, and a new one.
    (repo / "sub" / ".gitignore").write_text("local.txt\nagent.txt\n")
    (repo / "sub" / "agent.txt").write_text("hidden by the changed rules\n")
    (repo / "src" / ".gitignore").write_text("generated/\n")
    (repo / "src" / "generated").mkdir()
    (repo / "src" / "generated" / "out.py").write_text("hidden by the new rules\n")

    assert revert(repo, snap, completed) == [
        "src/.gitignore",
        "src/generated/out.py",
        "sub/.gitignore",
        "sub/agent.txt",
    ]
    assert (repo / "sub" / ".gitignore").read_text() == "local.txt\n"
    assert (repo / "sub" / "local.txt").read_text() == "the user's, ignored\n"
    assert not (repo / "src" / "generated").exists()


def test_a_folder_that_ignores_itself_is_the_users_only_when_older_than_the_turn(
    tmp_path: Path,
) -> None:
    repo = new_repo(tmp_path)
    snap, completed = take(repo)
    # The agent hides a folder the way a cache does, and adds to the user's cache.
    (repo / "vault").mkdir()
    (repo / "vault" / ".gitignore").write_text("*\n")
    (repo / "vault" / "key.pem").write_text("the agent's key\n")
    (repo / ".pytest_cache" / "v" / "cache" / "nodeids").write_text("[]\n")

    assert revert(repo, snap, completed) == ["vault/.gitignore", "vault/key.pem"]
    assert not (repo / "vault").exists()
    # Inside the user's cache folder nothing is judged: its rules are from before.
    assert (repo / ".pytest_cache" / "v" / "cache" / "nodeids").exists()


def test_rules_hidden_behind_rules_are_all_taken_away(tmp_path: Path) -> None:
    repo = new_repo(tmp_path)
    snap, completed = take(repo)
    # The top rules hide deep/; in it, rules that hide deep/inner/, which hides itself.
    (repo / ".gitignore").write_text(".env\n*.log\n.turnkeeper/\ndeep/\n")
    (repo / "deep" / "inner").mkdir(parents=True)
    (repo / "deep" / ".gitignore").write_text("inner/\nx.txt\n")
    (repo / "deep" / "x.txt").write_text("x\n")
    (repo / "deep" / "inner" / ".gitignore").write_text("*\n")
    (repo / "deep" / "inner" / "y.txt").write_text("y\n")

    assert revert(repo, snap, completed) == [
        ".gitignore",
        "deep/.gitignore",
        "deep/inner/.gitignore",
        "deep/inner/y.txt",
        "deep/x.txt",
    ]
    assert not (repo / "deep").exists()


def test_dropping_an_ignore_line_still_keeps_the_users_files(tmp_path: Path) -> None:
    repo = new_repo(tmp_path)
    snap, completed = take(repo)
    # The agent stops ignoring .env and *.log, and adds a file of its own.
    (repo / ".gitignore").write_text(".turnkeeper/\n")
    (repo / "notes.md").write_text("the agent's notes\n")
    (repo / "agent.log").write_text("the agent's log\n")

    assert revert(repo, snap, completed) == [".gitignore", "notes.md"]
    # Under the snapshot's rules a log is the kind of file the user keeps: untouched.
    assert (repo / "agent.log").exists()
    assert git(repo, "status", "--porcelain") == ""
