"""Snapshots and their restore in every ordinary shape of repository.

Each case is a real repository: ``.turnkeeper/`` ignored as ``turnkeeper init``
leaves it, committed and uncommitted ``.gitignore`` rules, a nested ``.gitignore``,
``info/exclude``, an unborn branch, a detached HEAD. The snapshot must hold exactly
the tracked and untracked-not-ignored files (checked against a tree built in a
repository of its own), and restoring it must bring those back byte for byte while
leaving what it never captured alone.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.runtime.test_snapshots import git, independent_tree
from turnkeeper.runtime.workspaces.snapshots import capture, submodule_refusal
from turnkeeper.runtime.workspaces.workspace_restore import (
    Preserver,
    preserve_root,
    read_preserved,
    restore_workspace,
)

SID = "00000000-0000-4000-8000-0000000000aa"


def files_of(repo: Path, tree: str) -> list[str]:
    return sorted(git(repo, "ls-tree", "-r", "--name-only", tree).split())


def new_repo(root: Path, *, commit: bool = True) -> Path:
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".env\n*.log\n.turnkeeper/\n")
    (repo / "README.md").write_text("readme\n")
    (repo / ".env").write_text("SECRET=1\n")
    (repo / "debug.log").write_text("a log\n")
    (repo / ".turnkeeper").mkdir()
    (repo / ".turnkeeper" / "turnkeeper.db").write_bytes(b"not for snapshots")
    if commit:
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "initial")
    return repo


def nested_rules(repo: Path) -> list[str]:
    (repo / "sub").mkdir()
    (repo / "sub" / ".gitignore").write_text("local.txt\n")
    (repo / "sub" / "local.txt").write_text("mine\n")
    (repo / "sub" / "shared.txt").write_text("shared\n")
    return [".gitignore", "README.md", "sub/.gitignore", "sub/shared.txt"]


def uncommitted_rule(repo: Path) -> list[str]:
    with (repo / ".gitignore").open("a") as rules:
        rules.write("*.tmp\n")
    (repo / "scratch.tmp").write_text("scratch\n")
    (repo / "kept.txt").write_text("kept\n")
    return [".gitignore", "README.md", "kept.txt"]


def info_exclude(repo: Path) -> list[str]:
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("private/\n")
    (repo / "private").mkdir()
    (repo / "private" / "notes.txt").write_text("private\n")
    (repo / "public.txt").write_text("public\n")
    return [".gitignore", "README.md", "public.txt"]


def detached_head(repo: Path) -> list[str]:
    (repo / "second.txt").write_text("second\n")
    git(repo, "add", "second.txt")
    git(repo, "commit", "-qm", "second")
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    (repo / "work.txt").write_text("work\n")
    return [".gitignore", "README.md", "work.txt"]


SHAPES: dict[str, tuple[bool, Callable[[Path], list[str]]]] = {
    "nested .gitignore": (True, nested_rules),
    "uncommitted .gitignore rule": (True, uncommitted_rule),
    "info/exclude": (True, info_exclude),
    "detached HEAD": (True, detached_head),
    "unborn branch": (False, lambda repo: [".gitignore", "README.md"]),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_snapshot_holds_exactly_what_git_would_and_is_restored(
    tmp_path: Path, shape: str
) -> None:
    commit, make = SHAPES[shape]
    repo = new_repo(tmp_path, commit=commit)
    expected = make(repo)
    head = git(repo, "rev-parse", "HEAD").strip() if commit else None

    snap = capture(repo, SID, "turn-1", 1, None)
    taken = datetime.now(UTC)  # the snapshot's turn completes

    assert snap is not None
    assert files_of(repo, snap.tree) == expected
    assert snap.tree == independent_tree(repo, expected, tmp_path / "independent")
    assert snap.parent == head
    parents = git(repo, "rev-list", "--parents", "-n", "1", snap.commit).split()[1:]
    assert parents == ([head] if head else [])
    contents = {name: (repo / name).read_bytes() for name in expected}
    ignored = {name: (repo / name).read_bytes() for name in (".env", "debug.log")}

    # An agent's turn: every kept file changed, one deleted, one added.
    for name in expected:
        (repo / name).write_text("changed by the agent\n")
    (repo / expected[-1]).unlink()
    (repo / "agent.txt").write_text("new\n")

    root = preserve_root(repo, SID, "revert-1")
    restore_workspace(repo, snap.tree, Preserver(repo, root), SID, since=taken)

    assert {name: (repo / name).read_bytes() for name in expected} == contents
    assert not (repo / "agent.txt").exists()
    assert {name: (repo / name).read_bytes() for name in ignored} == ignored
    assert (repo / ".turnkeeper" / "turnkeeper.db").read_bytes() == b"not for snapshots"
    preserved = read_preserved(root)
    assert preserved is not None
    # Every file the restore overwrote or removed is kept, with what it held.
    assert sorted(preserved.paths) == sorted({*expected[:-1], "agent.txt"})
    assert (root / "files" / "agent.txt").read_text() == "new\n"


def test_init_ignoring_turnkeeper_does_not_stop_the_snapshot(tmp_path: Path) -> None:
    # `git add -A -- . ':(exclude).turnkeeper'` fails ("paths are ignored") exactly
    # when .turnkeeper/ is ignored, as `turnkeeper init` makes it.
    repo = new_repo(tmp_path)
    proc = subprocess.run(
        ["git", "add", "--dry-run", "-A", "--", ".", ":(exclude,top).turnkeeper"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0 and "ignored" in proc.stderr  # the trap is real
    (repo / "new.txt").write_text("new\n")
    snap = capture(repo, SID, "turn-1", 1, None)
    assert snap is not None
    assert files_of(repo, snap.tree) == [".gitignore", "README.md", "new.txt"]


def test_a_turnkeeper_directory_below_the_top_is_the_users(tmp_path: Path) -> None:
    repo = new_repo(tmp_path)
    (repo / "vendor" / ".turnkeeper").mkdir(parents=True)
    (repo / "vendor" / ".turnkeeper" / "theirs.txt").write_text("theirs\n")
    (repo / ".gitignore").write_text(".env\n*.log\n/.turnkeeper/\n")
    snap = capture(repo, SID, "turn-1", 1, None)
    assert snap is not None
    assert "vendor/.turnkeeper/theirs.txt" in files_of(repo, snap.tree)


def test_a_rules_change_by_the_agent_does_not_make_ignored_files_removable(
    tmp_path: Path,
) -> None:
    repo = new_repo(tmp_path)
    (repo / "build").mkdir()
    (repo / "build" / "out.bin").write_bytes(b"\x00\x01")
    (repo / ".gitignore").write_text(".env\n*.log\n.turnkeeper/\nbuild/\n")
    snap = capture(repo, SID, "turn-1", 1, None)
    taken = datetime.now(UTC)  # the snapshot's turn completes
    assert snap is not None
    # The agent stops ignoring .env and build/, and ignores what it adds.
    (repo / ".gitignore").write_text("*.log\n.turnkeeper/\n*.cache\n")
    (repo / "agent.cache").write_text("the agent's cache\n")
    (repo / "agent.txt").write_text("the agent's\n")

    root = preserve_root(repo, SID, "r")
    restore_workspace(repo, snap.tree, Preserver(repo, root), SID, since=taken)

    assert (repo / ".env").read_text() == "SECRET=1\n"  # ignored by the snapshot's rules
    assert (repo / "build" / "out.bin").read_bytes() == b"\x00\x01"
    # Ignored only by the agent's rule: not what the snapshot's rules ignore.
    assert not (repo / "agent.cache").exists()
    assert not (repo / "agent.txt").exists()
    assert (repo / ".gitignore").read_text() == ".env\n*.log\n.turnkeeper/\nbuild/\n"
    preserved = read_preserved(root)
    assert preserved is not None
    assert sorted(preserved.paths) == [".gitignore", "agent.cache", "agent.txt"]


def test_what_stands_in_the_way_is_moved_aside_and_a_retry_changes_nothing(
    tmp_path: Path,
) -> None:
    repo = new_repo(tmp_path)
    (repo / "a").write_text("a file\n")
    (repo / "dir").mkdir()
    (repo / "dir" / "inside.txt").write_text("inside\n")
    snap = capture(repo, SID, "turn-1", 1, None)
    taken = datetime.now(UTC)  # the snapshot's turn completes
    assert snap is not None
    # A file became a directory (holding an ignored file), a directory became a
    # symlink pointing out of the workspace.
    (repo / "a").unlink()
    (repo / "a").mkdir()
    (repo / "a" / "deep.log").write_text("ignored, inside the new directory\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / "dir" / "inside.txt").unlink()
    (repo / "dir").rmdir()
    (repo / "dir").symlink_to(outside)

    root = preserve_root(repo, SID, "r")
    restore_workspace(repo, snap.tree, Preserver(repo, root), SID, since=taken)

    assert (repo / "a").read_text() == "a file\n"
    assert not (repo / "dir").is_symlink()
    assert (repo / "dir" / "inside.txt").read_text() == "inside\n"
    assert list(outside.iterdir()) == []  # nothing written through the symlink
    preserved = read_preserved(root)
    assert preserved is not None
    assert sorted(preserved.paths) == ["a/deep.log", "dir"]
    assert (root / "files" / "a" / "deep.log").read_text().startswith("ignored")
    assert (root / "files" / "dir").is_symlink()

    before = sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))
    restore_workspace(repo, snap.tree, Preserver(repo, root), SID, since=taken)
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == before


def test_a_submodule_workspace_is_named(tmp_path: Path) -> None:
    library = tmp_path / "library"
    library.mkdir()
    git(library, "init", "-q", "-b", "main")
    (library / "lib.txt").write_text("lib\n")
    git(library, "add", "-A")
    git(library, "commit", "-qm", "lib")
    repo = new_repo(tmp_path)
    assert submodule_refusal(repo) is None
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "lib")
    reason = submodule_refusal(repo)
    assert reason is not None and "holds submodules (lib)" in reason
    inner = submodule_refusal(repo / "lib")
    assert inner is not None and inner.startswith("it is a submodule of")


def test_a_linked_worktree_is_snapshotted_and_restored_through_its_own_git_dir(
    tmp_path: Path,
) -> None:
    repo = new_repo(tmp_path)
    worktree = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "side", str(worktree))
    assert (worktree / ".git").is_file()
    (worktree / ".turnkeeper").mkdir()
    (worktree / ".turnkeeper" / "turnkeeper.db").write_bytes(b"private")
    (worktree / "new.txt").write_text("new\n")
    snap = capture(worktree, SID, "turn-1", 1, None)
    taken = datetime.now(UTC)  # the snapshot's turn completes
    assert snap is not None
    assert files_of(worktree, snap.tree) == [".gitignore", "README.md", "new.txt"]
    (worktree / "new.txt").write_text("changed\n")

    root = preserve_root(worktree, SID, "r")
    restore_workspace(worktree, snap.tree, Preserver(worktree, root), SID, since=taken)

    assert (worktree / "new.txt").read_text() == "new\n"
    own_git_dir = Path(git(worktree, "rev-parse", "--absolute-git-dir").strip())
    assert root.is_relative_to(own_git_dir) and own_git_dir != repo / ".git"
    assert (root / "files" / "new.txt").read_text() == "changed\n"
