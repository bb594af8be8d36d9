"""A revert brings HEAD back too: commits the agent made after the snapshot leave the
branch and are kept under a private ref.

A snapshot commit's parent is HEAD when the snapshot was taken (``capture`` in
runtime/workspaces/snapshots.py). Restoring the worktree alone would leave HEAD and the branch
where the agent moved them, so the session would come back with its later commits
still checked out. ``restore_head`` therefore, when HEAD moved since the snapshot:

1. keeps the commit HEAD holds under ``refs/turnkeeper/reverted/<session>/<request>``
   (nothing the agent committed is lost; the branch's reflog names it too);
2. moves the current branch (or a detached HEAD) back to the snapshot's parent with a
   compare-and-swap ``git update-ref <ref> <new> <old>``: a branch that moved again
   meanwhile is contention (``ABORTED``), the operation stays pending for a retry;
3. resets the index to the new HEAD (``git reset --mixed`` semantics: what was
   uncommitted at the snapshot comes back as unstaged changes in the worktree).

Each step is safe to run again, so a retry after a crash anywhere finishes the job:
HEAD already at the parent skips steps 1-2, and the private ref's existence says
this revert moved HEAD, so the index is reset even when the crash came between
steps 2 and 3. When HEAD never moved nothing here touches HEAD, branch or index.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

from turnkeeper.errors import Aborted, FailedPrecondition
from turnkeeper.runtime.workspaces.gitcmd import worktree_git
from turnkeeper.runtime.workspaces.snapshots import refs_under

REVERTED_PREFIX = "refs/turnkeeper/reverted"
HEAD_MOVED_POINT = "revert.head_moved"
# A request id as it may appear in a ref name; any other is named by its digest.
_REF_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


def ref_component(request_id: str) -> str:
    safe = _REF_SAFE.fullmatch(request_id) and ".." not in request_id
    if safe and not request_id.endswith((".", ".lock")):
        return request_id
    return "id-" + hashlib.sha256(request_id.encode()).hexdigest()[:24]


def saved_ref(session_id: str, request_id: str) -> str:
    """Where the revert ``request_id`` keeps the commit it took the branch away from."""
    return f"{REVERTED_PREFIX}/{session_id}/{ref_component(request_id)}"


def commit_of(workspace: Path, rev: str) -> str | None:
    proc = worktree_git(workspace, "rev-parse", "--verify", "-q", f"{rev}^{{commit}}", check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def snapshot_parent(workspace: Path, snapshot_commit: str) -> str | None:
    """HEAD when the snapshot was taken; None when the branch had no commit yet."""
    return commit_of(workspace, f"{snapshot_commit}^1")


def _head_ref(workspace: Path) -> str:
    """The ref HEAD moves: its branch (even an unborn one), or ``HEAD`` when detached."""
    proc = worktree_git(workspace, "symbolic-ref", "-q", "HEAD", check=False)
    return proc.stdout.strip() if proc.returncode == 0 else "HEAD"


def _keep(workspace: Path, ref: str, commit: str) -> None:
    """Keep ``commit`` under ``ref``; never overwrite what a ref there already keeps."""
    existing = commit_of(workspace, ref)
    if existing == commit:
        return  # a retry: kept already
    if existing is not None:
        # HEAD moved again between two attempts of this revert: keep that one beside.
        ref = f"{ref}+{commit[:12]}"
    worktree_git(workspace, "update-ref", ref, commit, "")  # "" : only if it does not exist yet


def _move(workspace: Path, ref: str, new: str | None, old: str | None, why: str) -> None:
    if new is None and ref == "HEAD":
        raise FailedPrecondition(
            "the snapshot was taken before the first commit, and HEAD is now detached",
            reason="head_unborn_at_snapshot",
        )
    no_deref = ["--no-deref"] if ref == "HEAD" else []
    if new is None:  # the branch had no commit at the snapshot: unborn again
        args = ["update-ref", "-m", why, *no_deref, "-d", ref, old or ""]
    else:
        args = ["update-ref", "-m", why, *no_deref, ref, new, old or ""]
    proc = worktree_git(workspace, *args, check=False)
    if proc.returncode == 0:
        return
    if commit_of(workspace, ref) != old:
        raise Aborted(
            f"{ref} moved while the revert ran; retry",
            reason="workspace_head_moved",
            details={"ref": ref},
        )
    raise FailedPrecondition(
        f"git update-ref {ref} failed: {proc.stderr.strip()[:500]}", reason="git_failed"
    )


def _reset_index(workspace: Path, commit: str | None) -> None:
    if commit is None:
        worktree_git(workspace, "read-tree", "--empty")
    else:
        worktree_git(workspace, "read-tree", commit)
    # read-tree drops the stat cache; refresh it so `git status` need not rehash.
    # (It exits 1 when files differ from the index, which is expected here.)
    worktree_git(workspace, "update-index", "-q", "--refresh", check=False)


def restore_head(
    workspace: Path,
    session_id: str,
    request_id: str,
    snapshot_commit: str,
    checkpoint: Callable[[str], None] = lambda _name: None,
) -> str | None:
    """Bring HEAD back to where the snapshot was taken (see the module docstring); the
    commit the branch was moved away from, or None when it had not moved.
    ``checkpoint`` is called between moving the ref and resetting the index."""
    parent = snapshot_parent(workspace, snapshot_commit)
    ref = _head_ref(workspace)
    head = commit_of(workspace, "HEAD")
    kept = saved_ref(session_id, request_id)
    moved_from: str | None = None
    if head != parent:
        if head is not None:
            _keep(workspace, kept, head)
        why = f"turnkeeper revert {request_id}: back to the snapshot of session {session_id}"
        _move(workspace, ref, parent, head, why)
        moved_from = head
    checkpoint(HEAD_MOVED_POINT)
    if moved_from is not None or commit_of(workspace, kept) is not None:
        _reset_index(workspace, parent)
    return moved_from


def reverted_refs(workspace: Path, session_id: str) -> list[tuple[str, str]]:
    """(ref, commit) of what reverts of the session took off its branch."""
    return refs_under(workspace, f"{REVERTED_PREFIX}/{session_id}/")


def remove_reverted(workspace: Path, session_id: str) -> None:
    """Drop the session's reverted refs (session delete: no orphans). The commits stay
    named in the branch's reflog until git expires it."""
    for ref, _ in reverted_refs(workspace, session_id):
        worktree_git(workspace, "update-ref", "-d", ref)
