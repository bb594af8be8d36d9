"""A revert after the agent committed: HEAD comes back too (runtime/workspaces/workspace_head.py).

``t1``'s first turn completes with its snapshot; then the agent commits on the
branch (twice) and leaves more uncommitted changes, and the session crashes. The
revert moves the branch back to the snapshot's parent (HEAD when the snapshot was
taken), keeps the agent's commits under ``refs/turnkeeper/reverted/<session>/<id>``,
resets the index to the new HEAD, and restores the worktree byte for byte: ``git
status`` reads as it did at the snapshot. A fault or a real SIGKILL at every revert
step is completed by a retry with exactly one restore, the index reset included.
The pieces are also checked on a bare repository: a crash between keeping the
commit and moving the branch, a branch that moved again, a detached HEAD, a branch
that had no commit at the snapshot, the compare-and-swap, an unmoved HEAD.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime.crash_support import CrashProject, _git, assert_goal_completed, make_project
from tests.runtime.test_revert import (
    InjectedError,
    artifact,
    event_types,
    resumable_script,
    snapshot_of,
)
from turnkeeper.crashpoints import REVERT_POINTS
from turnkeeper.errors import Aborted, FailedPrecondition
from turnkeeper.kernel.session import SetStatus
from turnkeeper.runtime.control.controller import Controller
from turnkeeper.runtime.control.operations import Operations
from turnkeeper.runtime.workspaces import workspace_head
from turnkeeper.runtime.workspaces.snapshots import workspace_tree
from turnkeeper.runtime.workspaces.workspace_head import (
    REVERTED_PREFIX,
    restore_head,
    reverted_refs,
    saved_ref,
)


def out(repo: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=repo,
        check=check,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.stdout.strip()


def status(repo: Path) -> list[str]:
    """``git status`` as the user sees it, minus turnkeeper's own directory."""
    lines = out(repo, "status", "--porcelain", "--untracked-files=all").splitlines()
    return [line for line in lines if ".turnkeeper/" not in line]


def index_matches_head(repo: Path) -> bool:
    return (
        subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=repo, check=False).returncode
        == 0
    )


@pytest.fixture
def project(tmp_path: Path) -> Iterator[CrashProject]:
    project = make_project(tmp_path / "p", resumable_script())
    project.run_control_plane("--max-turns", "1")  # t1's first turn: a.txt drafted
    try:
        yield project
    finally:
        project.cleanup()


class Before:
    """What the session looked like at its snapshot, and the agent's later commits."""

    def __init__(self, project: CrashProject):
        repo = project.repo
        self.branch = out(repo, "symbolic-ref", "HEAD")
        self.head = out(repo, "rev-parse", "HEAD")
        self.status = status(repo)
        self.tree, self.copy = snapshot_of(project)
        last = project.session().last_completed
        assert last is not None and last.snapshot.workspace_commit is not None
        self.parent = out(repo, "rev-parse", f"{last.snapshot.workspace_commit}^")
        assert self.parent == self.head  # the snapshot was taken on this HEAD
        # The agent commits twice on the branch, then leaves uncommitted work.
        (repo / "a.txt").write_text("agent v2\n")
        (repo / "c.txt").write_text("committed by the agent\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", "agent: first")
        (repo / "README").write_text("rewritten by the agent\n")
        _git(repo, "commit", "-qam", "agent: second")
        self.agent_commits = out(repo, "rev-list", f"{self.head}..HEAD").split()
        assert len(self.agent_commits) == 2
        (repo / "d.txt").write_text("uncommitted\n")
        _git(repo, "add", "d.txt")
        with artifact(project).open("a") as handle:
            handle.write('{"type": "turn", "partial": tr')
        project.cli("session", "crash", project.session_id, "--json")


def assert_back_at_the_snapshot(project: CrashProject, before: Before, request_id: str) -> None:
    repo = project.repo
    assert out(repo, "symbolic-ref", "HEAD") == before.branch  # still on its branch
    assert out(repo, "rev-parse", "HEAD") == before.parent
    assert index_matches_head(repo)
    assert workspace_tree(repo) == before.tree
    assert artifact(project).read_bytes() == before.copy
    assert status(repo) == before.status
    # Nothing the agent committed is lost: both commits are under the private ref.
    kept = out(repo, "rev-parse", saved_ref(project.session_id, request_id))
    assert kept == before.agent_commits[0]  # rev-list lists the newest first
    for commit in before.agent_commits:
        out(repo, "merge-base", "--is-ancestor", commit, kept)
    state = project.session()
    assert (state.status, state.operation) == ("suspended", None)


def test_a_revert_moves_the_branch_back_and_keeps_the_agents_commits(
    project: CrashProject,
) -> None:
    before = Before(project)
    done = project.cli("session", "revert", project.session_id, "--request-id", "r1", "--json")
    assert done.json()["result"] == "reverted"
    assert_back_at_the_snapshot(project, before, "r1")
    assert reverted_refs(project.repo, project.session_id) == [
        (saved_ref(project.session_id, "r1"), before.agent_commits[0])
    ]
    # The branch's reflog says who moved it, and why.
    assert "turnkeeper revert r1" in out(project.repo, "reflog", "-1", before.branch)
    # The session goes on from the snapshot: the continuation and t2 complete on it.
    with project.store() as store:
        controller = Controller(store)
        token = controller.acquire(project.session_id)
        controller.sessions.execute(project.session_id, SetStatus(lease=token, action="resume"))
        controller.release(project.session_id)
    project.run_control_plane()
    assert_goal_completed(project)
    assert out(project.repo, "rev-parse", "HEAD") == before.parent
    # Delete leaves none of turnkeeper's refs behind, the reverted ones included.
    project.cli("session", "delete", project.session_id, "--request-id", "d1", "--json")
    assert "refs/turnkeeper/" not in out(project.repo, "for-each-ref")


@pytest.mark.parametrize("point", REVERT_POINTS)
def test_a_fault_at_each_step_is_completed_by_a_retry(project: CrashProject, point: str) -> None:
    before = Before(project)

    def fault(name: str) -> None:
        if name == point:
            raise InjectedError(name)

    with project.store() as store, pytest.raises(InjectedError):
        Operations(store, fault=fault).revert(project.session_id, "r1")
    with project.store() as store:
        done = Operations(store).revert(project.session_id, "r2")
    assert done.result == "reverted"
    assert done.operation is not None
    # Once r1 was admitted, r2 joined it: the commits are kept under the operation's id.
    root = "r2" if point == "revert.observed" else "r1"
    assert done.operation.root_request_id == root
    assert_back_at_the_snapshot(project, before, root)
    types = event_types(project)
    assert types.count("operation.step_recorded") == 1  # exactly one restore
    assert types.count("operation.finished") == 1


@pytest.mark.parametrize("point", REVERT_POINTS)
def test_a_sigkill_at_each_step_is_completed_by_a_retry(project: CrashProject, point: str) -> None:
    before = Before(project)
    args = ("session", "revert", project.session_id, "--request-id", "r1", "--json")
    killed = project.cli(*args, crash_at=point)
    assert killed.returncode == -signal.SIGKILL, killed.describe()
    if point == "revert.head_moved":
        # Killed between moving the branch and resetting the index: the retry must
        # still reset it, although HEAD is already where it belongs.
        assert out(project.repo, "rev-parse", "HEAD") == before.parent
        assert not index_matches_head(project.repo)
    assert project.cli(*args).json()["result"] == "reverted"
    assert_back_at_the_snapshot(project, before, "r1")
    assert event_types(project).count("operation.step_recorded") == 1


# --- the pieces, on a bare repository ------------------------------------------------

SID = "00000000-0000-4000-8000-0000000000aa"


def repo_with_snapshot(path: Path, *, first_commit: bool = True) -> tuple[Path, str]:
    """A repository and a snapshot commit of its worktree, as ``capture`` makes one:
    the worktree's tree with HEAD (if any) as the only parent."""
    path.mkdir()
    out(path, "init", "-q", "-b", "main")
    (path / "f.txt").write_text("at the snapshot\n")
    if first_commit:
        out(path, "add", "f.txt")
        out(path, "commit", "-qm", "base")
    out(path, "add", "-A")
    tree = out(path, "write-tree")
    head = out(path, "rev-parse", "--verify", "-q", "HEAD", check=False)
    parents = ["-p", head] if head else []
    snapshot = out(path, "commit-tree", tree, *parents, "-m", "snapshot")
    return path, snapshot


def agent_commit(repo: Path, text: str) -> str:
    (repo / "f.txt").write_text(text)
    out(repo, "commit", "-qam", text)
    return out(repo, "rev-parse", "HEAD")


def test_a_crash_between_keeping_the_commit_and_moving_the_branch(tmp_path: Path) -> None:
    repo, snapshot = repo_with_snapshot(tmp_path / "r")
    base = out(repo, "rev-parse", "HEAD")
    later = agent_commit(repo, "agent\n")
    out(repo, "update-ref", saved_ref(SID, "r1"), later)  # kept, then the crash
    assert restore_head(repo, SID, "r1", snapshot) == later
    assert out(repo, "rev-parse", "HEAD") == base
    assert index_matches_head(repo)
    assert reverted_refs(repo, SID) == [(saved_ref(SID, "r1"), later)]


def test_a_branch_moved_again_between_attempts_keeps_both(tmp_path: Path) -> None:
    repo, snapshot = repo_with_snapshot(tmp_path / "r")
    base = out(repo, "rev-parse", "HEAD")
    first = agent_commit(repo, "one\n")
    assert restore_head(repo, SID, "r1", snapshot) == first
    second = agent_commit(repo, "two\n")  # someone committed before the retry
    assert restore_head(repo, SID, "r1", snapshot) == second
    assert out(repo, "rev-parse", "HEAD") == base
    assert {commit for _, commit in reverted_refs(repo, SID)} == {first, second}


def test_a_detached_head_is_moved_back_detached(tmp_path: Path) -> None:
    repo, snapshot = repo_with_snapshot(tmp_path / "r")
    base = out(repo, "rev-parse", "HEAD")
    out(repo, "checkout", "-q", "--detach")
    later = agent_commit(repo, "detached work\n")
    assert restore_head(repo, SID, "r1", snapshot) == later
    assert out(repo, "rev-parse", "HEAD") == base
    assert out(repo, "symbolic-ref", "-q", "HEAD", check=False) == ""  # still detached
    assert out(repo, "rev-parse", "main") == base  # the branch was never touched
    assert index_matches_head(repo)


def test_a_branch_without_a_commit_at_the_snapshot_is_unborn_again(tmp_path: Path) -> None:
    repo, snapshot = repo_with_snapshot(tmp_path / "r", first_commit=False)
    assert workspace_head.snapshot_parent(repo, snapshot) is None
    later = agent_commit(repo, "first commit by the agent\n")
    assert restore_head(repo, SID, "r1", snapshot) == later
    assert out(repo, "rev-parse", "--verify", "-q", "HEAD", check=False) == ""
    assert out(repo, "symbolic-ref", "HEAD") == "refs/heads/main"
    assert out(repo, "ls-files") == ""  # the index is empty, as before the first commit
    assert (repo / "f.txt").exists()  # the worktree is restore_workspace's business
    assert reverted_refs(repo, SID) == [(saved_ref(SID, "r1"), later)]
    # Detached with nothing to go back to cannot be expressed: refused, not guessed.
    out(repo, "update-ref", "--no-deref", "HEAD", later)  # detached at the agent's commit
    with pytest.raises(FailedPrecondition) as refused:
        restore_head(repo, SID, "r2", snapshot)
    assert refused.value.reason == "head_unborn_at_snapshot"


def test_the_branch_moves_only_from_the_commit_the_revert_saw(tmp_path: Path) -> None:
    repo, _ = repo_with_snapshot(tmp_path / "r")
    base = out(repo, "rev-parse", "HEAD")
    later = agent_commit(repo, "agent\n")
    # The revert read HEAD as `base`, but the branch is at `later` by now.
    with pytest.raises(Aborted) as moved:
        workspace_head._move(repo, "refs/heads/main", base, base, "test")
    assert moved.value.reason == "workspace_head_moved"
    assert out(repo, "rev-parse", "HEAD") == later


def test_an_unmoved_head_leaves_branch_and_index_alone(tmp_path: Path) -> None:
    repo, snapshot = repo_with_snapshot(tmp_path / "r")
    (repo / "f.txt").write_text("staged, not committed\n")
    out(repo, "add", "f.txt")
    staged = out(repo, "diff", "--cached")
    assert restore_head(repo, SID, "r1", snapshot) is None
    assert out(repo, "diff", "--cached") == staged
    assert reverted_refs(repo, SID) == []


def test_any_request_id_makes_a_valid_private_ref(tmp_path: Path) -> None:
    repo, snapshot = repo_with_snapshot(tmp_path / "r")
    later = agent_commit(repo, "agent\n")
    odd = "retry #2: ~^ back..to [it].lock"
    restore_head(repo, SID, odd, snapshot)
    ref = saved_ref(SID, odd)
    assert ref.startswith(f"{REVERTED_PREFIX}/{SID}/id-")
    assert out(repo, "rev-parse", ref) == later
    assert saved_ref(SID, "r-1.ok") == f"{REVERTED_PREFIX}/{SID}/r-1.ok"
