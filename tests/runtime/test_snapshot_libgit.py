"""Snapshots written in this process (runtime/workspaces/libgit.py), checked against git.

A workspace of every kind of entry git distinguishes (executable bits, symlinks, files
deleted, renamed, untracked, ignored, tracked-but-ignored, staged by the user, CRLF
under ``.gitattributes``, a name that is not UTF-8, a ``.turnkeeper`` below the top)
is snapshotted in this process and through git's own processes, turn after turn; both
must give the same tree, and the in-process one must start no git process. What
libgit2 does not do as git does (a repository nested in the workspace, a filter driver,
a HOME other than the one libgit2 started with) is left to git. Retention in process
deletes no ref but the session's own. Real repositories; git processes are counted
through a logging ``git`` on PATH (tests/runtime/git_calls.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.runtime.git_calls import GitCalls, git, install
from turnkeeper.runtime.workspaces.gitcmd import session_git_dir
from turnkeeper.runtime.workspaces.snapshots import (
    REF_PREFIX,
    Snapshot,
    capture,
    forget,
    prune,
    session_index_file,
    workspace_tree,
)

SID = "00000000-0000-4000-8000-0000000000b1"
OTHER = "00000000-0000-4000-8000-0000000000b2"


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GitCalls:
    return install(tmp_path, monkeypatch)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / ".gitignore").write_text("*.log\nbuild/\n")
    (path / ".gitattributes").write_text("*.crlf text eol=crlf\n")
    (path / "a.txt").write_text("alpha\n")
    (path / "run.sh").write_text("#!/bin/sh\n")
    (path / "run.sh").chmod(0o755)
    (path / "sub").mkdir()
    (path / "sub" / "b.txt").write_text("bravo\n")
    (path / "forced.log").write_text("tracked although ignored\n")
    git(path, "add", "-A")
    git(path, "add", "-f", "forced.log")
    git(path, "commit", "-qm", "initial")
    return path


def git_snapshot(repo: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The tree git's own processes build of the worktree now (a fresh throwaway
    index: neither the session's index nor libgit2 has a say)."""
    with monkeypatch.context() as patch:
        patch.setenv("GIT_CONFIG_COUNT", "0")  # configuration libgit2 would not read
        return workspace_tree(repo)


def verbs(calls: GitCalls) -> list[str]:
    """The git subcommands started since the last look (git's own inner calls log
    blank lines)."""
    return [line.split()[0] for line in calls.take() if line.strip()]


def take(repo: Path, n: int, session: str = SID) -> Snapshot:
    snap = capture(repo, session, f"turn-{n}", n, None, retain=3)
    assert snap is not None
    return snap


def modify(repo: Path) -> None:
    (repo / "a.txt").write_text("alpha, changed\n")


def add_untracked(repo: Path) -> None:
    (repo / "sub" / "new.txt").write_text("new\n")
    (repo / "sub" / "deep").mkdir()
    (repo / "sub" / "deep" / "er.txt").write_text("deeper\n")


def delete_and_rename(repo: Path) -> None:
    (repo / "sub" / "b.txt").unlink()
    (repo / "a.txt").rename(repo / "sub" / "a.txt")


def modes_and_links(repo: Path) -> None:
    (repo / "run.sh").chmod(0o644)
    (repo / "a-link").symlink_to("a.txt")
    (repo / "sub" / "tool").write_text("#!/bin/sh\n")
    (repo / "sub" / "tool").chmod(0o755)


def ignored_and_private(repo: Path) -> None:
    (repo / "debug.log").write_text("ignored\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.bin").write_bytes(b"\0" * 64)
    (repo / "forced.log").write_text("tracked, ignored, changed\n")
    (repo / ".turnkeeper").mkdir()
    (repo / ".turnkeeper" / "state").write_text("never in a snapshot\n")
    (repo / "sub" / ".turnkeeper").mkdir()
    (repo / "sub" / ".turnkeeper" / "theirs").write_text("the user's own\n")


def staged_by_the_user(repo: Path) -> None:
    (repo / "staged.txt").write_text("staged\n")
    git(repo, "add", "staged.txt")
    (repo / "staged.txt").write_text("changed after staging\n")


def line_endings(repo: Path) -> None:
    (repo / "windows.crlf").write_bytes(b"one\r\ntwo\n")


def newly_ignored(repo: Path) -> None:
    (repo / "secret.env").write_text("TOKEN=1\n")


def ignore_it(repo: Path) -> None:
    with (repo / ".gitignore").open("a") as handle:
        handle.write("*.env\n")


STEPS: list[Callable[[Path], None]] = [
    modify,
    add_untracked,
    newly_ignored,
    delete_and_rename,
    modes_and_links,
    ignore_it,
    ignored_and_private,
    staged_by_the_user,
    line_endings,
]


def test_each_turn_in_process_is_the_tree_git_builds_and_starts_no_git(
    repo: Path, calls: GitCalls, monkeypatch: pytest.MonkeyPatch
) -> None:
    take(repo, 1)  # the session index is seeded (by git) once
    user_index = (repo / ".git" / "index").read_bytes()
    head = git(repo, "rev-parse", "HEAD")
    seen = set()
    for n, step in enumerate(STEPS, start=2):
        step(repo)
        if (repo / ".git" / "index").read_bytes() != user_index:  # the user staged
            user_index = (repo / ".git" / "index").read_bytes()
        calls.take()
        snap = take(repo, n)
        assert calls.take() == [], step.__name__  # no git process for any of it
        assert snap.tree == git_snapshot(repo, monkeypatch), step.__name__
        seen.add(snap.tree)
        # The commit git would have written: the tree, HEAD as parent, the message.
        assert git(repo, "rev-parse", f"{snap.commit}^{{tree}}") == snap.tree
        assert git(repo, "rev-parse", f"{snap.commit}^") == head
        assert git(repo, "log", "-1", "--format=%an <%ae>", snap.commit) == (
            "turnkeeper <turnkeeper@localhost>"
        )
        assert f"turn: turn-{n}" in git(repo, "log", "-1", "--format=%B", snap.commit)
        assert git(repo, "rev-parse", snap.ref) == snap.commit
    assert len(seen) == len(STEPS)  # every step changed the tree
    # The user's HEAD, branch and index are as the user left them.
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main"
    assert (repo / ".git" / "index").read_bytes() == user_index
    assert "staged.txt" in git(repo, "diff", "--cached", "--name-only")


def test_a_nested_repository_is_left_to_git(
    repo: Path, calls: GitCalls, monkeypatch: pytest.MonkeyPatch
) -> None:
    take(repo, 1)
    nested = repo / "vendor"
    nested.mkdir()
    git(nested, "init", "-q")
    (nested / "x.txt").write_text("x\n")
    git(nested, "add", "-A")
    git(nested, "commit", "-qm", "nested")
    calls.take()
    snap = take(repo, 2)
    assert "add" in verbs(calls)  # libgit2 refused: git did
    assert snap.tree == git_snapshot(repo, monkeypatch)
    assert "160000 commit" in git(repo, "ls-tree", snap.tree, "vendor")  # git's gitlink


def test_a_name_that_is_not_utf8_is_left_to_git(
    repo: Path, calls: GitCalls, monkeypatch: pytest.MonkeyPatch
) -> None:
    take(repo, 1)
    os.mkdir(os.fsencode(repo) + b"/caf\xe9")
    with open(os.fsencode(repo) + b"/caf\xe9/menu", "w") as handle:
        handle.write("not UTF-8 above\n")
    snap = take(repo, 2)
    assert snap.tree == git_snapshot(repo, monkeypatch)
    assert "caf" in git(repo, "ls-tree", "--name-only", snap.tree)


def test_a_filter_driver_is_left_to_git(
    repo: Path, calls: GitCalls, monkeypatch: pytest.MonkeyPatch
) -> None:
    git(repo, "config", "filter.upper.clean", "tr a-z A-Z")
    (repo / ".gitattributes").write_text("*.up filter=upper\n")
    (repo / "shout.up").write_text("quiet\n")
    calls.take()
    snap = take(repo, 1)
    done = verbs(calls)
    assert "add" in done and "commit-tree" in done
    blob = git(repo, "rev-parse", f"{snap.tree}:shout.up")
    assert git(repo, "cat-file", "-p", blob) == "QUIET"  # the clean filter ran


def test_another_home_than_libgit2_started_with_is_left_to_git(
    repo: Path, tmp_path: Path, calls: GitCalls, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "ignore").write_text("*.txt\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    (repo / "untracked.txt").write_text("ignored by the new HOME's rules\n")
    calls.take()
    snap = take(repo, 1)
    assert "add" in verbs(calls)
    assert "untracked.txt" not in git(repo, "ls-tree", "-r", "--name-only", snap.tree)


def test_retention_in_process_deletes_only_the_sessions_own_refs(
    repo: Path, calls: GitCalls
) -> None:
    git(repo, "branch", "keep")
    git(repo, "tag", "v1")
    git(repo, "update-ref", f"{REF_PREFIX}/{SID}x/00000001-x", "HEAD")  # a longer id
    theirs = take(repo, 1, OTHER)
    made = [take(repo, 1).ref]  # the session index seeded: git's processes, once
    git(repo, "pack-refs", "--all")  # some refs packed, as after a gc
    calls.take()
    for n in range(2, 8):
        (repo / "a.txt").write_text(f"turn {n}\n")
        made.append(take(repo, n).ref)
    # Written and pruned in this process too; HEAD alone is read by git again, as its
    # stamp includes packed-refs, which deleting a packed ref rewrites.
    assert set(verbs(calls)) <= {"rev-parse"}
    kept = git(repo, "for-each-ref", "--format=%(refname)", f"{REF_PREFIX}/{SID}/").split()
    assert kept == made[-3:]  # retain=3, the oldest (packed or loose) deleted
    everything = git(repo, "for-each-ref", "--format=%(refname)").split()
    for ref in ("refs/heads/main", "refs/heads/keep", "refs/tags/v1", theirs.ref):
        assert ref in everything
    assert f"{REF_PREFIX}/{SID}x/00000001-x" in everything
    assert prune(repo, SID, 1) == made[-3:-1]  # without libgit2: git's processes


def test_the_session_git_dir_is_its_own_and_an_old_index_moves_in(repo: Path) -> None:
    old = repo / ".git" / "turnkeeper" / f"{SID}.index"
    old.parent.mkdir(parents=True)
    git(repo, "read-tree", "HEAD")
    old.write_bytes((repo / ".git" / "index").read_bytes())
    index = session_index_file(repo, SID)
    assert index == session_git_dir(repo / ".git", SID) / "index"
    assert index.is_file() and not old.exists()  # moved, stat cache and all
    forget(repo, SID)
    snap = take(repo, 1)
    assert git(repo, "rev-parse", f"{snap.commit}^{{tree}}") == snap.tree
    # git itself sees no worktree and no other repository state in it.
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(repo, "status", "--porcelain") == ""
