"""Workspace snapshots at every completed turn: what a revert restores (invariant 7).

A snapshot is a git commit object under a private ref,
``refs/turnkeeper/snapshots/<session>/<ordinal>-<turn>``, whose tree holds the
tracked files and the untracked-but-not-ignored ones. It is built through an index
file of the session's own, so the user's HEAD, branch, index and stash are never
touched: a dirty index with staged changes stays exactly as it was.
turnkeeper's own ``.turnkeeper/`` directory is never part of a snapshot (it holds
the snapshots' artifact copies and host state, which a revert must not rewind).

The host session artifact (the scripted host's session file, a Codex rollout, a
Claude transcript) is copied to ``<workspace>/.turnkeeper/snapshots/<session>/
<ordinal>-<turn>/`` and its sha256 recorded, so a revert can put it back in place
and a turn can tell when the live file no longer is what the last snapshot saw.
That folder ignores itself (hosts/workspace_folder.py): in a workspace that is a
repository of its own, ``git add -A`` does not commit the transcripts either.

The ordinal (the session's completed-turn count) makes ref names sort in turn
order, which is how retention finds the oldest snapshots to prune.

Each snapshot commit's message names what the log must already hold when it is
taken: the session, the turn, its ordinal, how many turns the session had accepted
and the goal stream's head (:class:`SnapshotClaims`). A database found behind
those claims lost acknowledged writes (runtime/services/workspace_claims.py).

Cost. Each session keeps its own index file in the git directory, so ``add -A``
re-hashes only what changed since the last snapshot. The tree, the commit, its ref
and retention's pruning are written in this process through libgit2
(runtime/workspaces/libgit.py): a snapshot starts no process. Where libgit2 would not
do what git does, git's own processes do it (``GIT_INDEX_FILE``, ``add -A``,
``write-tree``, ``commit-tree``, ``update-ref``). A turn that changed nothing
— same stat fingerprint of the worktree, HEAD and artifact
(runtime/workspaces/workspace_fingerprint.py), or the same tree, parent and artifact digest —
reuses the last snapshot instead of writing a new commit: the snapshot a revert
restores is then the same, byte for byte. (Restoring one: runtime/workspaces/workspace_restore.py.)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from turnkeeper.effects import split_host_config
from turnkeeper.errors import FailedPrecondition, TurnkeeperError
from turnkeeper.hosts import load_host
from turnkeeper.hosts.base import KeepsSessionArtifact
from turnkeeper.hosts.workspace_folder import FOLDER_NAME, workspace_folder
from turnkeeper.json_types import JsonMapping
from turnkeeper.kernel.session.records import SnapshotRef
from turnkeeper.memo import Memo
from turnkeeper.runtime.workspaces.gitcmd import (
    PRIVATE_NAME,
    SNAPSHOT_REF_PREFIX,
    git,
    session_git_dir,
)
from turnkeeper.runtime.workspaces.scratch_index import (
    PATHSPEC,
    scratch_dir,
    seed_index,
    workspace_tree,
)
from turnkeeper.runtime.workspaces.workspace import git_revision
from turnkeeper.runtime.workspaces.workspace_fingerprint import fingerprint

if TYPE_CHECKING:
    import pygit2

__all__ = [
    "PATHSPEC",
    "REF_PREFIX",
    "Snapshot",
    "SnapshotClaims",
    "capture",
    "git",
    "scratch_dir",
    "seed_index",
    "workspace_tree",
]

REF_PREFIX = SNAPSHOT_REF_PREFIX
PRIVATE_DIR = FOLDER_NAME
RETAIN_ENV = "TURNKEEPER_SNAPSHOT_RETAIN"
DEFAULT_RETAIN = 20


@dataclass(frozen=True)
class SnapshotClaims:
    """What the log holds when a snapshot is taken, written into its commit message:
    the turns the session had accepted (this one included) and the goal stream's
    head. Both were durable before the snapshot (``turn.accepted`` and every goal
    append commit durably), so a log found with less lost acknowledged writes."""

    turns_accepted: int
    goal_seq: int


@dataclass(frozen=True)
class Snapshot:
    """One captured snapshot, as recorded in ``SnapshotRef``."""

    ref: str
    commit: str
    tree: str
    artifact_path: str | None = None
    artifact_copy: str | None = None
    artifact_digest: str | None = None
    parent: str | None = None  # HEAD when it was taken


# A workspace directory by identity, (st_dev, st_ino), not by its resolved path:
# resolving costs a stat per path component each turn, and a directory reached by
# another name (a symlink, a move) is still the same directory with the same files.
_Where = tuple[int, int]
# Both owned by this module (capture, forget, is_repository), made at import, one per
# process; anyone may clear them, at the cost of asking git again (docs/caches.md).
# The last snapshot of each (workspace, session) in this process, with the stat
# fingerprint taken just before it: what a turn that changed nothing reuses.
_last: Memo[tuple[_Where, str], tuple[tuple[object, ...] | None, Snapshot]] = Memo(
    "last snapshot by workspace and session",
    max_entries=4096,
    invalidation="when the workspace's fingerprint differs from the one kept with it; "
    "dropped by forget() (session deleted, its lost snapshots moved aside)",
)
# Workspace directory -> the inode of its ``.git``, for a repository's top level.
_repositories: Memo[_Where, int] = Memo(
    "repository top level by workspace directory",
    max_entries=4096,
    invalidation="when the workspace's .git has another inode (or is gone)",
)


def retain_count() -> int:
    """Snapshots kept per session (``TURNKEEPER_SNAPSHOT_RETAIN``, default 20, at least 1:
    the newest is what a revert needs)."""
    raw = os.environ.get(RETAIN_ENV, "")
    try:
        return max(1, int(raw)) if raw else DEFAULT_RETAIN
    except ValueError:
        return DEFAULT_RETAIN


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_repository(workspace: Path) -> bool:
    """Whether ``workspace`` is the top level of a git repository. Remembered per
    ``.git`` inode: a workspace without ``.git`` is answered by stat alone."""
    return _top_level(workspace) is not None


def _top_level(workspace: Path) -> _Where | None:
    """``workspace``'s identity, when it is the top level of a git repository (else
    None): a turn's capture needs both."""
    top = os.fspath(workspace)
    where = _identity(top)
    if where is None:
        return None
    try:
        marker: int | None = os.stat(os.path.join(top, ".git")).st_ino
    except OSError:
        marker = None
    if marker is not None and _repositories.get(where) == marker:
        return where
    if marker is None and "GIT_DIR" not in os.environ:
        return None
    proc = git(workspace, "rev-parse", "--show-toplevel", check=False)
    found = proc.returncode == 0 and Path(proc.stdout.strip()).resolve() == workspace.resolve()
    if found and marker is not None:
        _repositories.put(where, marker)
    return where if found else None


def _identity(path: str) -> _Where | None:
    """(device, inode) of the directory at ``path``; None when it is no directory."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


_GITLINK_MODE = "160000"


def submodule_refusal(workspace: Path) -> str | None:
    """Why snapshots cannot hold this repository, or None: a snapshot records a
    submodule as one commit id, never its files, so a revert could not bring back what
    an agent changed in one — whether the workspace is a submodule or holds some."""
    above = git(workspace, "rev-parse", "--show-superproject-working-tree", check=False)
    if above.returncode == 0 and above.stdout.strip():
        return f"it is a submodule of {above.stdout.strip()}"
    staged = git(workspace, "--no-optional-locks", "ls-files", "--stage", "-z").stdout
    inner = [e.split("\t", 1)[1] for e in staged.split("\0") if e.startswith(_GITLINK_MODE)]
    if inner or (workspace / ".gitmodules").is_file():
        named = ", ".join(inner[:5]) or "listed in .gitmodules"
        return f"it holds submodules ({named})"
    return None


def snapshot_name(ordinal: int, turn_id: str) -> str:
    return f"{ordinal:08d}-{turn_id}"


def copy_dir(workspace: Path, session_id: str, name: str) -> Path:
    return workspace / PRIVATE_DIR / "snapshots" / session_id / name


def capture(
    workspace: Path,
    session_id: str,
    turn_id: str,
    ordinal: int,
    artifact: Path | None,
    *,
    retain: int | None = None,
    claims: SnapshotClaims | None = None,
) -> Snapshot | None:
    """Snapshot ``workspace`` (and copy ``artifact``) for the turn; None outside a git
    repository's top level (nothing to snapshot). Idempotent for one turn: a retry
    after a crash rewrites the same ref and copy. A workspace unchanged since the
    session's last snapshot in this process gets that snapshot back. ``claims`` go
    into the commit message (see :class:`SnapshotClaims`)."""
    top = _top_level(workspace)
    if top is None:
        return None
    key = (top, session_id)
    seen = fingerprint(workspace, [artifact] if artifact is not None else [])
    last = _last.get(key)
    if seen is not None and last is not None and last[0] == seen.key:
        return last[1]
    name = snapshot_name(ordinal, turn_id)
    message = snapshot_message(session_id, turn_id, ordinal, claims)
    snapshot = _capture(workspace, session_id, name, message, artifact, last, retain)
    _last.put(key, (seen.key if seen is not None and seen.trusted else None, snapshot))
    return snapshot


def snapshot_message(
    session_id: str, turn_id: str, ordinal: int, claims: SnapshotClaims | None
) -> str:
    """The commit message: one ``key: value`` line per fact (runtime/services/workspace_claims.py
    reads them back with ``git for-each-ref``)."""
    lines = [f"session: {session_id}", f"turn: {turn_id}", f"ordinal: {ordinal}"]
    if claims is not None:
        lines += [f"turns-accepted: {claims.turns_accepted}", f"goal-seq: {claims.goal_seq}"]
    return "turnkeeper snapshot\n\n" + "\n".join(lines) + "\n"


def _capture(
    workspace: Path,
    session_id: str,
    name: str,
    message: str,
    artifact: Path | None,
    last: tuple[tuple[object, ...] | None, Snapshot] | None,
    retain: int | None,
) -> Snapshot:
    # Imported here, not with the module: pygit2 takes a tenth of a second to load, and
    # the commands that only list or delete snapshots never need it.
    from turnkeeper.runtime.workspaces import libgit

    with libgit.session_repository(workspace, session_id) as repo:  # None: git does it
        tree = _session_tree(workspace, session_id, repo)
        parent = git_revision(workspace)
        if last is not None and _unchanged(last[1], tree, parent, artifact):
            return last[1]  # only ignored or stat-only changes: the same snapshot
        ref = f"{REF_PREFIX}/{session_id}/{name}"
        if repo is not None:
            commit = libgit.create_snapshot(repo, tree, parent, message, ref)
        else:
            args = ["commit-tree", tree, "-m", message] + (["-p", parent] if parent else [])
            commit = git(workspace, *args).stdout.strip()
            git(workspace, "update-ref", ref, commit)
        copied: Path | None = None
        digest: str | None = None
        if artifact is not None and artifact.is_file():
            workspace_folder(workspace)  # a transcript's copy: out of the user's `git add -A`
            target = copy_dir(workspace, session_id, name)
            target.mkdir(parents=True, exist_ok=True)
            copied = target / artifact.name
            tmp = copied.with_name(copied.name + ".tmp")
            shutil.copyfile(artifact, tmp)
            os.replace(tmp, copied)  # a crash mid-copy never leaves a truncated copy
            digest = sha256_file(copied)
        prune(workspace, session_id, retain if retain is not None else retain_count(), repo)
        return Snapshot(
            ref=ref,
            commit=commit,
            tree=tree,
            artifact_path=str(artifact) if artifact is not None else None,
            artifact_copy=str(copied) if copied is not None else None,
            artifact_digest=digest,
            parent=parent,
        )


def _unchanged(previous: Snapshot, tree: str, parent: str | None, artifact: Path | None) -> bool:
    """Whether ``previous`` already holds this tree, parent and artifact. The artifact
    (a rollout can be megabytes) is hashed only when everything else matches."""
    path = str(artifact) if artifact is not None else None
    if (previous.tree, previous.parent, previous.artifact_path) != (tree, parent, path):
        return False
    live = sha256_file(artifact) if artifact is not None and artifact.is_file() else None
    return live == previous.artifact_digest


def _session_tree(workspace: Path, session_id: str, repo: pygit2.Repository | None) -> str:
    """The worktree's tree through the session's own index file, kept in the git
    directory (``.git/turnkeeper/sessions/<session>/``: never part of the worktree or
    ``git status``) between snapshots, so its stat cache spares ``add -A`` from
    re-hashing unchanged files. Built in this process when ``repo`` is given
    (runtime/workspaces/libgit.py), by git when it is not or libgit2 refuses. A damaged
    index (a crash cannot leave one: both rename it into place) is rebuilt. A ``.git``
    file (a linked worktree) gets a throwaway index each time."""
    index = session_index_file(workspace, session_id)
    if index is None:
        return workspace_tree(workspace)
    env = {"GIT_INDEX_FILE": str(index)}
    for attempt in range(2):
        if not index.is_file():
            index.parent.mkdir(parents=True, exist_ok=True)
            seed_index(workspace, index, env)
        if repo is not None:
            from turnkeeper.runtime.workspaces import libgit  # loaded: repo is its

            try:
                return libgit.session_tree(repo, workspace / ".git" / "index")
            except libgit.REFUSED:
                pass  # what libgit2 refuses (a nested repository, a damaged index): git
        try:
            _drop_newly_ignored(workspace, env)
            git(workspace, "add", "-A", "--", *PATHSPEC, env=env)
            return git(workspace, "write-tree", env=env).stdout.strip()
        except FailedPrecondition:
            if attempt:
                raise
            index.unlink(missing_ok=True)
    raise AssertionError("unreachable")


def _drop_newly_ignored(workspace: Path, env: Mapping[str, str]) -> None:
    """Forget entries of the session index that are ignored now and not tracked by the
    user. ``add -A`` never drops an entry, so a file added to a snapshot while it was
    untracked would otherwise stay in every later snapshot after it became ignored
    (or after the user ran ``git rm --cached`` on it), unlike with a fresh index."""
    listed = git(
        workspace, "ls-files", "-z", "--cached", "--ignored", "--exclude-standard", env=env
    ).stdout
    ignored = [name for name in listed.split("\0") if name]
    if not ignored:
        return
    # The user's index; names as literal paths, not patterns.
    tracked = git(workspace, "--literal-pathspecs", "ls-files", "-z", "--", *ignored).stdout
    keep = {name for name in tracked.split("\0") if name}
    drop = [name for name in ignored if name not in keep]
    if drop:
        git(
            workspace,
            *("--literal-pathspecs", "rm", "-q", "--cached", "--ignore-unmatch", "--", *drop),
            env=env,
        )


def session_index_file(workspace: Path, session_id: str) -> Path | None:
    """The session's index, in its own git directory (runtime/workspaces/libgit.py); one
    an earlier version kept at ``.git/turnkeeper/<session>.index`` is moved there."""
    git_dir = workspace / ".git"
    if not git_dir.is_dir():
        return None
    index = session_git_dir(git_dir, session_id) / "index"
    legacy = git_dir / PRIVATE_NAME / f"{session_id}.index"
    if legacy.is_file() and not index.is_file():
        index.parent.mkdir(parents=True, exist_ok=True)
        os.replace(legacy, index)  # its stat cache goes on serving
    return index


def forget(workspace: Path, session_id: str) -> None:
    """Drop what this process remembers of the session's last snapshot."""
    where = _identity(os.fspath(workspace))
    if where is not None:  # no directory there: nothing captured can be served
        _last.pop((where, session_id))


def snapshot_kept(ref: SnapshotRef, retained: set[str]) -> str:
    """How ``session snapshots`` tells a completed turn's snapshot: ``yes`` (its ref is
    there), ``pruned`` (retention removed it), ``failed`` (it could not be taken: see
    ``snapshot_failed``) or ``none`` (snapshots off)."""
    if ref.snapshot_ref is not None:
        return "yes" if ref.snapshot_ref in retained else "pruned"
    return "failed" if ref.snapshot_failed else "none"


def session_refs(workspace: Path, session_id: str) -> list[tuple[str, str]]:
    """(ref, commit) of the session's snapshots, oldest first."""
    return refs_under(workspace, f"{REF_PREFIX}/{session_id}/")


def refs_under(workspace: Path, prefix: str) -> list[tuple[str, str]]:
    """(ref, commit) of every ref below ``prefix``, in name order; none outside a repository."""
    if not is_repository(workspace):
        return []
    out = git(workspace, "for-each-ref", "--format=%(refname) %(objectname)", prefix).stdout
    pairs = [tuple(line.split(" ", 1)) for line in out.splitlines() if line.strip()]
    return sorted((ref, commit) for ref, commit in pairs)


def prune(
    workspace: Path, session_id: str, retain: int, repo: pygit2.Repository | None = None
) -> list[str]:
    """Drop the session's snapshots beyond the newest ``retain``: refs and copies (the
    refs in this process when ``repo``, the session's libgit2 view, is given)."""
    if repo is not None:
        from turnkeeper.runtime.workspaces import libgit  # loaded: repo is its

        dropped = libgit.prune_refs(repo, f"{REF_PREFIX}/{session_id}/", retain)
    else:
        refs = session_refs(workspace, session_id)
        dropped = [ref for ref, _ in refs[: max(0, len(refs) - retain)]]
        for ref in dropped:
            git(workspace, "update-ref", "-d", ref)
    for ref in dropped:
        shutil.rmtree(copy_dir(workspace, session_id, ref.rsplit("/", 1)[1]), ignore_errors=True)
    return dropped


def remove_all(workspace: Path, session_id: str) -> None:
    """Every snapshot ref and copy of a session (session delete): no orphans left."""
    forget(workspace, session_id)
    git_dir = workspace / ".git"
    if git_dir.is_dir():  # the session's own git directory, its index in it
        shutil.rmtree(session_git_dir(git_dir, session_id), ignore_errors=True)
        (git_dir / PRIVATE_NAME / f"{session_id}.index").unlink(missing_ok=True)
    for ref, _ in session_refs(workspace, session_id):
        git(workspace, "update-ref", "-d", ref)
    shutil.rmtree(workspace / PRIVATE_DIR / "snapshots" / session_id, ignore_errors=True)


# --- where a host keeps its session artifact ------------------------------------------


def artifact_path(
    host_kind: str,
    host_config: JsonMapping,
    handle: str | None,
    workspace: Path,
    reported: str | None = None,
) -> Path | None:
    """The live host session artifact of ``handle``: the path the host reported with its
    result when it did, else where the host says it keeps it (a host that keeps one
    implements ``KeepsSessionArtifact``); None when it has none."""
    if reported:
        return Path(reported)
    if handle is None:
        return None
    try:
        host = load_host(host_kind, split_host_config(dict(host_config)))
        if not isinstance(host, KeepsSessionArtifact):
            return None
        found = host.session_artifact(handle, workspace)
    except TurnkeeperError:  # a kind not installed, a config the host rejects: none
        return None
    return found.resolve() if found is not None else None


# --- what a revert needs ------------------------------------------------------------


def restore_artifact(copy: Path, target: Path, digest: str | None) -> None:
    """Put the host session artifact back in place from the snapshot's copy."""
    if digest is not None and sha256_file(copy) != digest:
        raise FailedPrecondition(
            f"the snapshot's artifact copy {copy} fails its digest", reason="artifact_corrupt"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".turnkeeper-restore")
    shutil.copyfile(copy, tmp)
    os.replace(tmp, target)


def commit_exists(workspace: Path, commit: str) -> bool:
    proc = git(workspace, "cat-file", "-e", f"{commit}^{{commit}}", check=False)
    return proc.returncode == 0
