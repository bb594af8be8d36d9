"""What ``head_stamp`` and the snapshot's workspace key remember, and that a change
is never answered from memory (runtime/workspaces/workspace.py, snapshots.py).

``head_stamp`` keeps the text of HEAD and of the branch it names by their stat, once
that stat is older than the racy window: a ref rewritten in place — same inode, same
size, its old mtime put back — moves its ctime, so it is read again. ``capture``
keys a workspace by the identity of its directory, so a directory put in place of
another at the same path is never taken for it.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests.runtime.git_calls import GitCalls, git, install
from tests.runtime.test_git_revision_memo import MOVES, commit, new_repo
from turnkeeper.runtime.workspaces import workspace, workspace_fingerprint
from turnkeeper.runtime.workspaces.snapshots import capture, forget, is_repository
from turnkeeper.runtime.workspaces.workspace import git_revision, head_stamp

SID = "00000000-0000-4000-8000-00000000beef"
SETTLE_NS = 20_000_000  # the racy window in these tests: 20 ms, slept out
SETTLE_S = 0.05


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GitCalls:
    return install(tmp_path, monkeypatch)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ref file ``head_stamp`` opens, in order; the texts start unknown."""
    workspace._ref_texts.clear()
    opened: list[str] = []
    real = workspace._read_ref

    def counted(path: str) -> str:
        opened.append(os.path.basename(path))
        return real(path)

    monkeypatch.setattr(workspace, "_read_ref", counted)
    return opened


def test_a_settled_head_is_not_read_again_until_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: list[str]
) -> None:
    monkeypatch.setattr(workspace, "_RACY_NS", SETTLE_NS)
    repo = new_repo(tmp_path / "repo")
    git(repo, "branch", "bbbb")  # as long a name as main
    commit(repo, "only on main\n")
    time.sleep(SETTLE_S)
    first = head_stamp(repo / ".git")
    assert reads == ["HEAD", "main"]
    reads.clear()
    assert head_stamp(repo / ".git") == first
    assert reads == []  # both texts known by their stat
    # Rewritten in place: the same inode and size, and the old mtime put back.
    head = repo / ".git" / "HEAD"
    before = head.stat()
    with head.open("r+") as text:
        text.write("ref: refs/heads/bbbb\n")
    os.utime(head, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = head.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    moved = head_stamp(repo / ".git")
    assert moved is not None and moved != first
    assert reads[0] == "HEAD"
    assert any(entry is not None and entry[0].endswith("bbbb") for entry in moved)
    assert git_revision(repo) == git(repo, "rev-parse", "bbbb")


def test_a_head_inside_the_racy_window_is_read_every_time(tmp_path: Path, reads: list[str]) -> None:
    repo = new_repo(tmp_path / "repo")
    git(repo, "checkout", "-q", "-b", "feature")  # HEAD just written: racy
    for _ in range(2):
        head_stamp(repo / ".git")
    assert reads.count("HEAD") == 2


def test_every_way_head_moves_is_reported_with_settled_refs(
    tmp_path: Path, calls: GitCalls, monkeypatch: pytest.MonkeyPatch, reads: list[str]
) -> None:
    # git replaces a ref by rename (a new inode), so a remembered text is never the
    # answer after any of these, even with every ref settled at once.
    monkeypatch.setattr(workspace, "_RACY_NS", 0)
    repo = new_repo(tmp_path / "repo")
    for n in range(3):
        commit(repo, f"step {n}\n")
    for move in MOVES.values():
        git_revision(repo)
        move(repo)
        assert git_revision(repo) == git(repo, "rev-parse", "HEAD")


def test_a_directory_put_in_place_of_a_repository_is_not_taken_for_it(
    tmp_path: Path, calls: GitCalls
) -> None:
    repo = new_repo(tmp_path / "repo")
    first = capture(repo, SID, "turn-1", 1, None)
    assert first is not None and is_repository(repo)
    aside = tmp_path / "aside"
    repo.rename(aside)
    repo.mkdir()  # the same path, no repository
    assert not is_repository(repo)
    assert capture(repo, SID, "turn-2", 2, None) is None
    repo.rmdir()
    # Another repository at the path: a copy of the first, times kept, one file changed.
    shutil.copytree(aside, repo, symlinks=True)
    (repo / "sub" / "f.txt").write_text("changed in the copy\n")
    second = capture(repo, SID, "turn-3", 3, None)
    assert second is not None and second.tree != first.tree
    assert git(repo, "show", f"{second.tree}:sub/f.txt") == "changed in the copy"


def test_forget_drops_the_last_snapshot_of_the_directory(
    tmp_path: Path, calls: GitCalls, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workspace_fingerprint, "RACY_NS", 0)
    repo = new_repo(tmp_path / "repo")
    time.sleep(SETTLE_S)
    first = capture(repo, SID, "turn-1", 1, None)
    calls.take()
    assert capture(repo, SID, "turn-2", 2, None) == first
    assert calls.take() == []  # remembered: served without git
    forget(repo, SID)
    third = capture(repo, SID, "turn-3", 3, None)
    assert first is not None and third is not None
    # Nothing remembered: the tree built again (the same), a new snapshot written.
    assert third.ref != first.ref and third.tree == first.tree
    assert git(repo, "rev-parse", third.ref) == third.commit
