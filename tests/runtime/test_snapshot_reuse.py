"""Snapshot reuse (runtime/workspaces/snapshots.py ``capture`` with
runtime/workspaces/workspace_fingerprint.py) and the session's own index in ``.git``.

An unchanged workspace gets its last snapshot back without starting git; every
real change — content rewritten with its old size and mtime, a new, deleted or
moved file, a new commit on HEAD, a changed host artifact — gets a new snapshot
whose tree equals one built independently; an ignored file's change is re-checked
and gets the same snapshot. Real repositories; git processes are counted through a
logging ``git`` on PATH (tests/runtime/git_calls.py).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.runtime.git_calls import REAL_GIT, GitCalls, git, install
from turnkeeper.runtime.workspaces import workspace_fingerprint
from turnkeeper.runtime.workspaces.snapshots import (
    REF_PREFIX,
    Snapshot,
    capture,
    copy_dir,
    remove_all,
    session_index_file,
    session_refs,
    sha256_file,
    snapshot_name,
)
from turnkeeper.runtime.workspaces.workspace_fingerprint import fingerprint

SID = "00000000-0000-4000-8000-00000000abcd"
FILES = [".gitignore", "a.txt", "sub/b.txt", "untracked.txt"]  # what a snapshot holds


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GitCalls:
    return install(tmp_path, monkeypatch)


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trust a fingerprint as soon as every stat in it is in the past: the files a
    test just wrote count as settled without the test sleeping out git's 2 s racy
    window (the racy rule itself is tested with the real window below)."""
    monkeypatch.setattr(workspace_fingerprint, "RACY_NS", 0)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / ".gitignore").write_text("*.log\n")
    (path / "a.txt").write_text("alpha\n")
    (path / "sub").mkdir()
    (path / "sub" / "b.txt").write_text("bravo\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "initial")
    (path / "untracked.txt").write_text("not yet added\n")
    (path / "debug.log").write_text("ignored\n")
    return path


@pytest.fixture
def artifact(tmp_path: Path) -> Path:
    path = tmp_path / "host" / "session.jsonl"
    path.parent.mkdir()
    path.write_text('{"turn": 1}\n')
    return path


def files_of(repo: Path, tree: str) -> list[str]:
    return sorted(git(repo, "ls-tree", "-r", "--name-only", tree).split())


def independent_tree(repo: Path, files: list[str], scratch: Path) -> str:
    """The tree of ``files`` as they are in ``repo`` now, built in a repository of
    its own (so neither the session index nor any memo can have a say in it)."""
    scratch.mkdir()
    git(scratch, "init", "-q")
    for name in files:
        (scratch / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, scratch / name)
    git(scratch, "add", "-f", "-A")
    return git(scratch, "write-tree")


def index_inode(repo: Path) -> int:
    """The session index's inode: a new one each time the tree is built (the index is
    written to a temporary file and renamed into place)."""
    index = session_index_file(repo, SID)
    assert index is not None
    return index.stat().st_ino


def refs(repo: Path) -> list[str]:
    return [ref for ref, _ in session_refs(repo, SID)]


def take(repo: Path, n: int, artifact: Path | None = None) -> Snapshot:
    snap = capture(repo, SID, f"turn-{n}", n, artifact)
    assert snap is not None
    return snap


def test_an_unchanged_workspace_gets_its_last_snapshot_without_starting_git(
    repo: Path, artifact: Path, calls: GitCalls, settled: None
) -> None:
    first = take(repo, 1, artifact)
    assert first.artifact_copy is not None  # written under .turnkeeper/, not fingerprinted
    calls.take()
    again = take(repo, 2, artifact)
    assert again == first  # same ref, commit, tree, parent and artifact copy
    assert calls.take() == []  # decided by stat alone
    assert refs(repo) == [first.ref]  # no new ref, and no copy for turn 2
    assert not copy_dir(repo, SID, snapshot_name(2, "turn-2")).exists()


def rewrite_keeping_size_and_mtime(repo: Path, artifact: Path) -> list[str]:
    # Only ctime (which no tool can set back) tells this change apart.
    path = repo / "a.txt"
    before = path.stat()
    path.write_text("ALPHA\n")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size,
        before.st_mtime_ns,
        before.st_ino,
    )
    return FILES


def add_untracked(repo: Path, artifact: Path) -> list[str]:
    (repo / "sub" / "new.txt").write_text("new\n")
    return sorted([*FILES, "sub/new.txt"])


def delete_tracked(repo: Path, artifact: Path) -> list[str]:
    (repo / "sub" / "b.txt").unlink()
    return [f for f in FILES if f != "sub/b.txt"]


def delete_untracked(repo: Path, artifact: Path) -> list[str]:
    (repo / "untracked.txt").unlink()
    return [f for f in FILES if f != "untracked.txt"]


def rename(repo: Path, artifact: Path) -> list[str]:
    (repo / "a.txt").rename(repo / "sub" / "a.txt")
    return sorted([f for f in FILES if f != "a.txt"] + ["sub/a.txt"])


def commit_on_head(repo: Path, artifact: Path) -> list[str]:
    git(repo, "commit", "-q", "--allow-empty", "-m", "nothing but a new HEAD")
    return FILES


def change_artifact(repo: Path, artifact: Path) -> list[str]:
    artifact.write_text('{"turn": 2}\n')
    return FILES


CHANGES: dict[str, Callable[[Path, Path], list[str]]] = {
    "same size and mtime": rewrite_keeping_size_and_mtime,
    "untracked file added": add_untracked,
    "tracked file deleted": delete_tracked,
    "untracked file deleted": delete_untracked,
    "file moved": rename,
    "new commit on HEAD": commit_on_head,
    "host artifact changed": change_artifact,
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_every_change_gets_a_new_snapshot_with_the_right_tree(
    repo: Path, artifact: Path, tmp_path: Path, calls: GitCalls, settled: None, change: str
) -> None:
    first = take(repo, 1, artifact)
    expected_files = CHANGES[change](repo, artifact)
    second = take(repo, 2, artifact)

    assert second.ref != first.ref and second.commit != first.commit
    assert refs(repo) == [first.ref, second.ref]
    assert files_of(repo, second.tree) == expected_files
    assert second.tree == independent_tree(repo, expected_files, tmp_path / "scratch")
    head = git(repo, "rev-parse", "HEAD")
    assert second.parent == head == git(repo, "rev-parse", f"{second.commit}^")
    assert second.artifact_digest == sha256_file(artifact)
    assert second.artifact_copy is not None
    assert Path(second.artifact_copy).read_bytes() == artifact.read_bytes()
    # The first snapshot still holds what it held.
    assert files_of(repo, first.tree) == FILES
    assert git(repo, "show", f"{first.tree}:a.txt") == "alpha"


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_worktree_kept_as_a_digest_still_shows_every_change(
    repo: Path, artifact: Path, settled: None, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    # A worktree of more than KEPT_ENTRIES entries is remembered as a digest of its stats.
    monkeypatch.setattr(workspace_fingerprint, "KEPT_ENTRIES", 0)
    before = fingerprint(repo, [artifact])
    assert before is not None and isinstance(before.key[-1], bytes)
    assert fingerprint(repo, [artifact]) == before
    CHANGES[change](repo, artifact)
    after = fingerprint(repo, [artifact])
    assert after is not None and after.key != before.key


def test_a_change_to_an_ignored_file_is_rechecked_and_gets_the_same_snapshot(
    repo: Path, artifact: Path, calls: GitCalls, settled: None
) -> None:
    first = take(repo, 1, artifact)
    written = index_inode(repo)
    (repo / "debug.log").write_text("more ignored output\n")
    calls.take()
    again = take(repo, 2, artifact)
    assert again == first
    assert (again.tree, again.parent, again.artifact_digest) == (
        first.tree,
        first.parent,
        first.artifact_digest,
    )
    # The stat fingerprint changed, so the tree was built again (in this process: the
    # index is written anew by rename), and no git process was started.
    assert index_inode(repo) != written
    assert calls.take() == []
    assert refs(repo) == [first.ref]


def test_a_fingerprint_taken_inside_the_racy_window_is_not_trusted(
    repo: Path, calls: GitCalls
) -> None:
    # The real 2 s window, and a file written just now.
    (repo / "a.txt").write_text("just written\n")
    fresh = fingerprint(repo)
    assert fresh is not None and not fresh.trusted
    first = take(repo, 1)
    written = index_inode(repo)
    # An untrusted fingerprint is never used to reuse a snapshot: the tree is built
    # again (the session index written anew) and found the same.
    again = take(repo, 2)
    assert again == first
    assert index_inode(repo) != written
    # Outside the window the same, unchanged workspace is trusted.
    later = time.time_ns() + 2 * workspace_fingerprint.RACY_NS
    assert fresh.key == fingerprint_at(repo, later).key
    assert fingerprint_at(repo, later).trusted


def fingerprint_at(repo: Path, now_ns: int) -> workspace_fingerprint.Fingerprint:
    """The fingerprint as it would be taken at ``now_ns`` (a clock moved forward by
    hand, rather than the test sleeping through the window)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "time_ns", lambda: now_ns)
        found = fingerprint(repo)
    assert found is not None
    return found


def test_too_many_entries_are_not_fingerprinted_and_still_snapshot_right(
    repo: Path, tmp_path: Path, calls: GitCalls, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert fingerprint(repo) is not None
    monkeypatch.setattr(workspace_fingerprint, "MAX_ENTRIES", 3)  # the repo has 6
    assert fingerprint(repo) is None
    first = take(repo, 1)
    written = index_inode(repo)
    assert take(repo, 2) == first  # equal tree and parent: same snapshot
    assert index_inode(repo) != written  # but the tree had to be built to say so
    (repo / "a.txt").write_text("changed\n")
    second = take(repo, 3)
    assert second.ref != first.ref
    assert second.tree == independent_tree(repo, FILES, tmp_path / "scratch")


def status(repo: Path) -> list[str]:
    # --no-optional-locks: status must not refresh (rewrite) the index it reports on.
    out = git(repo, "--no-optional-locks", "status", "--porcelain", "--ignored", "-uall")
    # The snapshots' transcript copies, in turnkeeper's folder (untracked, or ignored
    # by the folder's own .gitignore), are not what this looks for.
    return [line for line in out.splitlines() if not line[3:].startswith(".turnkeeper/")]


def ls_files(repo: Path, index: Path) -> list[str]:
    out = subprocess.run(
        [REAL_GIT, "ls-files"],
        cwd=repo,
        env={**os.environ, "GIT_INDEX_FILE": str(index)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted(out.split())


def test_the_session_index_lives_in_git_and_goes_with_remove_all(
    repo: Path, artifact: Path, calls: GitCalls, settled: None
) -> None:
    git(repo, "add", "untracked.txt")  # a staged change of the user's
    user_index = (repo / ".git" / "index").read_bytes()
    before = status(repo)
    first = take(repo, 1, artifact)

    index = session_index_file(repo, SID)
    assert index == repo / ".git" / "turnkeeper" / "sessions" / SID / "index"
    assert index.is_file()
    assert ls_files(repo, index) == files_of(repo, first.tree)  # the snapshot's index
    # Neither the user's index nor ``git status`` (ignored files included) knows of it.
    assert (repo / ".git" / "index").read_bytes() == user_index
    assert status(repo) == before

    remove_all(repo, SID)
    assert not index.exists()
    assert refs(repo) == []
    assert not (repo / ".turnkeeper" / "snapshots" / SID).exists()
    # Forgotten too: the same, unchanged workspace now gets a new snapshot (its last
    # one is gone) and a new index.
    renewed = take(repo, 2, artifact)
    assert renewed.ref == f"{REF_PREFIX}/{SID}/{snapshot_name(2, 'turn-2')}"
    assert refs(repo) == [renewed.ref]
    assert renewed.tree == first.tree
    assert index.is_file()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_a_damaged_session_index_is_rebuilt(
    repo: Path, tmp_path: Path, calls: GitCalls, settled: None, damage: str
) -> None:
    first = take(repo, 1)
    index = session_index_file(repo, SID)
    assert index is not None and index.is_file()
    data = index.read_bytes()
    index.write_bytes(
        {"garbage": os.urandom(len(data)), "truncated": data[: len(data) // 2], "empty": b""}[
            damage
        ]
    )
    (repo / "sub" / "b.txt").write_text("changed after the damage\n")
    second = take(repo, 2)
    assert second.ref != first.ref
    assert second.tree == independent_tree(repo, FILES, tmp_path / "scratch")
    assert ls_files(repo, index) == FILES  # a sound index again


# --- known gaps: the session index and the fingerprint outlive ignore rules -------------


def test_a_file_ignored_after_a_snapshot_leaves_the_next_one(
    repo: Path, tmp_path: Path, calls: GitCalls, settled: None
) -> None:
    (repo / "secret.env").write_text("TOKEN=1\n")
    first = take(repo, 1)
    assert "secret.env" in files_of(repo, first.tree)
    with (repo / ".gitignore").open("a") as handle:
        handle.write("*.env\n")
    second = take(repo, 2)
    assert files_of(repo, second.tree) == FILES
    assert second.tree == independent_tree(repo, FILES, tmp_path / "scratch")


def test_a_rule_dropped_from_info_exclude_is_seen(
    repo: Path, tmp_path: Path, calls: GitCalls, settled: None
) -> None:
    exclude = repo / ".git" / "info" / "exclude"
    exclude.parent.mkdir(exist_ok=True)
    exclude.write_text("notes.txt\n")
    (repo / "notes.txt").write_text("mine\n")
    first = take(repo, 1)
    assert "notes.txt" not in files_of(repo, first.tree)
    exclude.write_text("")
    second = take(repo, 2)
    expected = sorted([*FILES, "notes.txt"])
    assert files_of(repo, second.tree) == expected


def test_the_global_ignore_files_follow_the_environment(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The user's ignore files are derived once per HOME and XDG_CONFIG_HOME: a change
    # of either is seen at the next fingerprint, and so is a change inside the files
    # the new values name — without HOME too, where the home is the password database's.
    monkeypatch.setattr(workspace_fingerprint, "RACY_NS", 0)

    def watched(path: Path, content: str = "*.log\n") -> bool:
        # Whether writing ``path`` changes the fingerprint: whether it is looked at.
        before = fingerprint(repo)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content + str(time.monotonic_ns()))
        after = fingerprint(repo)
        assert before is not None and after is not None
        return after.key != before.key

    one, two = tmp_path / "one", tmp_path / "two"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(one))
    assert watched(one / "git" / "ignore")
    assert not watched(two / "git" / "ignore")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(two))
    assert watched(two / "git" / "ignore")
    assert watched(two / "git" / "config")
    assert not watched(one / "git" / "ignore")

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert watched(home / ".gitconfig")
    assert watched(home / ".config" / "git" / "ignore")
    assert not watched(two / "git" / "ignore")
    # Back to a value seen before.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(two))
    assert watched(two / "git" / "ignore")

    # Without HOME: the password database's home, asked again at every fingerprint.
    monkeypatch.delenv("HOME")
    monkeypatch.delenv("XDG_CONFIG_HOME")
    listed = {"home": tmp_path / "listed"}

    class Entry:
        @property
        def pw_dir(self) -> str:
            return str(listed["home"])

    monkeypatch.setattr(pwd, "getpwuid", lambda uid: Entry())
    assert watched(tmp_path / "listed" / ".gitconfig")
    listed["home"] = tmp_path / "relisted"
    assert watched(tmp_path / "relisted" / ".gitconfig")
    assert not watched(tmp_path / "listed" / ".gitconfig")


def test_an_ignore_file_that_appears_or_goes_is_seen(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The user's global ignore file is missing most of the time: its coming and going
    # both change the fingerprint.
    monkeypatch.setattr(workspace_fingerprint, "RACY_NS", 0)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    missing = fingerprint(repo)
    assert fingerprint(repo) == missing
    ignore = tmp_path / "config" / "git" / "ignore"
    ignore.parent.mkdir(parents=True)
    ignore.write_text("*.txt\n")
    present = fingerprint(repo)
    assert missing is not None and present is not None and present.key != missing.key
    ignore.unlink()
    assert fingerprint(repo) == missing


def test_an_ignore_file_that_goes_and_comes_back_is_seen(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The repository's exclude file is there most of the time (it is stat-ed straight
    # away): its going, its coming back and a rewrite are all seen.
    monkeypatch.setattr(workspace_fingerprint, "RACY_NS", 0)
    exclude = repo / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    exclude.write_text("*.log\n")
    present = fingerprint(repo)
    assert fingerprint(repo) == present
    exclude.unlink()
    missing = fingerprint(repo)
    assert present is not None and missing is not None and missing.key != present.key
    assert fingerprint(repo) == missing
    exclude.write_text("*.tmp\n")
    back = fingerprint(repo)
    assert back is not None and back.key not in (present.key, missing.key)
