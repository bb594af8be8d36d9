"""``git_revision`` remembers HEAD with the stats of the files it depends on
(runtime/workspaces/workspace.py). Every way HEAD moves must be reported by the very next
call in the same process, while a repeated call with nothing moved starts no git
process at all. Real repositories, real git; git processes counted by a logging
``git`` first on PATH (tests/runtime/git_calls.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.runtime.git_calls import GitCalls, git, install
from turnkeeper.runtime.workspaces.workspace import git_marker, git_revision


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GitCalls:
    return install(tmp_path, monkeypatch)


def new_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "sub").mkdir()
    (path / "sub" / "f.txt").write_text("0\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "c0")
    return path


def commit(repo: Path, text: str) -> None:
    (repo / "sub" / "f.txt").write_text(text)
    git(repo, "commit", "-qam", text)


def amend(repo: Path) -> None:
    git(repo, "commit", "-q", "--amend", "-m", "amended")


def new_branch_with_commit(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "feature")
    commit(repo, "on feature\n")


def switch_back(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "side", "HEAD~1")  # HEAD moves to an older commit


def packed_then_commit(repo: Path) -> None:
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    commit(repo, "after packing\n")


def pack_then_reset(repo: Path) -> None:
    # The branch lives only in packed-refs, then moves: git writes it loose again.
    git(repo, "pack-refs", "--all")
    git(repo, "reset", "-q", "--hard", "HEAD~1")


def detach(repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach", "HEAD~1")


def commit_while_detached(repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    commit(repo, "detached work\n")


def reset_hard(repo: Path) -> None:
    git(repo, "reset", "-q", "--hard", "HEAD~1")


MOVES: dict[str, Callable[[Path], None]] = {
    "commit": lambda repo: commit(repo, "1\n"),
    "amend": amend,
    "checkout -b and commit": new_branch_with_commit,
    "checkout -b at an older commit": switch_back,
    "pack-refs then commit": packed_then_commit,
    "pack-refs then reset": pack_then_reset,
    "detach": detach,
    "commit while detached": commit_while_detached,
    "reset --hard": reset_hard,
}


@pytest.mark.parametrize("move", list(MOVES))
def test_every_way_head_moves_is_reported_at_once(
    tmp_path: Path, calls: GitCalls, move: str
) -> None:
    repo = new_repo(tmp_path / "repo")
    commit(repo, "base\n")  # so HEAD~1 exists
    subdir = repo / "sub"
    before = git(repo, "rev-parse", "HEAD")
    assert git_revision(repo) == before
    assert git_revision(subdir) == before
    calls.take()
    # Memoised: asking again with nothing moved starts no git process. Without this
    # the checks below would hold for code that simply always asks git.
    assert git_revision(repo) == before
    assert git_revision(subdir) == before
    assert calls.take() == []

    MOVES[move](repo)
    after = git(repo, "rev-parse", "HEAD")
    assert after != before
    assert git_revision(repo) == after
    assert git_revision(subdir) == after
    assert git_revision(repo) == after  # and the new answer is what is remembered


def test_a_sequence_of_moves_in_one_repository(tmp_path: Path, calls: GitCalls) -> None:
    # One memo entry living through every kind of move in turn, each checked at once.
    repo = new_repo(tmp_path / "repo")
    for n in range(3):
        commit(repo, f"step {n}\n")
    for move in MOVES.values():
        git_revision(repo)
        move(repo)
        assert git_revision(repo) == git(repo, "rev-parse", "HEAD")


def test_a_repository_without_commits_and_its_first_commit(tmp_path: Path, calls: GitCalls) -> None:
    repo = tmp_path / "fresh"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    assert git_revision(repo) is None
    (repo / "a").write_text("a\n")
    git(repo, "add", "a")
    git(repo, "commit", "-qm", "first")
    assert git_revision(repo) == git(repo, "rev-parse", "HEAD")


def test_a_directory_with_no_git_above_it_is_none_without_asking_git(
    tmp_path: Path, calls: GitCalls
) -> None:
    plain = tmp_path / "plain" / "deeper"
    plain.mkdir(parents=True)
    if git_marker(plain.resolve()) is not None:
        pytest.skip(f"{tmp_path} is inside a git repository on this machine")
    calls.take()
    assert git_revision(plain) is None
    assert git_revision(plain) is None
    assert calls.take() == []


def test_git_dir_in_the_environment_bypasses_the_memo(
    tmp_path: Path, calls: GitCalls, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = new_repo(tmp_path / "repo")
    other = new_repo(tmp_path / "other")
    commit(other, "only in other\n")
    mine, theirs = git(repo, "rev-parse", "HEAD"), git(other, "rev-parse", "HEAD")
    assert mine != theirs
    assert git_revision(repo) == mine  # remembered for repo's path

    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    calls.take()
    # git itself now reads the other repository at this path; so must git_revision.
    assert git_revision(repo) == theirs
    assert calls.take() != []  # asked git, not the memo
    monkeypatch.delenv("GIT_DIR")
    assert git_revision(repo) == mine


def test_a_commit_through_a_symbolic_branch_is_reported(tmp_path: Path, calls: GitCalls) -> None:
    repo = new_repo(tmp_path / "repo")
    git(repo, "symbolic-ref", "refs/heads/master", "refs/heads/main")
    git(repo, "symbolic-ref", "HEAD", "refs/heads/master")
    assert git_revision(repo) == git(repo, "rev-parse", "HEAD")
    commit(repo, "through the alias\n")
    assert git_revision(repo) == git(repo, "rev-parse", "HEAD")
