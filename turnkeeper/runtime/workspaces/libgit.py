"""A session's snapshot written in this process, through libgit2 (pygit2).

A working turn's snapshot took seven git processes (``add``, ``ls-files``,
``write-tree``, ``commit-tree``, ``update-ref``, ``for-each-ref`` and retention's
``update-ref -d``): some 30 ms of CPU, most of it starting processes. libgit2 does
the same work in this process in about a millisecond, on the same files.

The session's index stays its own. libgit2 reads a repository's index from
``<git dir>/index``, so each session gets a git directory of its own,
``.git/turnkeeper/sessions/<session>/``: a ``commondir`` file naming the
repository's git directory (objects, refs, config and ``info/exclude`` are the
repository's, as for a linked worktree), a ``HEAD`` that names no branch, and the
session's ``index``. git itself never looks there (its linked worktrees live in
``.git/worktrees/``), and the user's index, HEAD and branches are never opened for
writing: the user's index is only read, to tell which of the session's entries the
user tracks.

The brief's ``git status`` is read in this process too, through :func:`open_user`:
the repository as git sees it from the workspace, the user's index included, opened
to be read only (runtime/workspaces/status_lines.py).

What git would do differently is left to git (:func:`open_session` and
:func:`open_user` answer None): a ``.git`` file (a linked worktree), clean/smudge
filter drivers in the config (libgit2 runs none of them), a sparse checkout, a
``core.worktree`` (git's worktree would be that directory, not the workspace),
configuration that git reads from the environment (``GIT_CONFIG_*``), or a HOME other
than the one libgit2 read its global files from when it started. A path libgit2
refuses to add (a repository nested in the workspace, which git adds as a gitlink)
fails the in-process tree, and git's own ``add -A`` builds it instead
(runtime/workspaces/snapshots.py).

Durability is git's default: objects and refs are written without fsync (git 2.39
fsyncs neither loose objects nor refs unless configured to), the commit's objects
before its ref, the ref before the turn's completion is committed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pygit2
from pygit2.enums import ConfigLevel, DeltaStatus, RepositoryOpenFlag

from turnkeeper.errors import FailedPrecondition
from turnkeeper.runtime.workspaces.gitcmd import IDENTITY, PRIVATE_NAME, session_git_dir

__all__ = [
    "REFUSED",
    "GitError",
    "create_snapshot",
    "open_session",
    "open_user",
    "prune_refs",
    "session_repository",
    "session_tree",
    "user_repository",
]

GitError = pygit2.GitError
# What makes the in-process tree give up for git's: libgit2's refusals, and a path
# that is not UTF-8, which pygit2's ignore check cannot take.
REFUSED = (GitError, UnicodeError)
# From the session's git directory to the repository's: sessions/<session>/ -> .git/.
_COMMONDIR = "../../..\n"
# The session's HEAD names a branch that is never created: nothing here follows it.
_HEAD = f"ref: refs/{PRIVATE_NAME}/none\n"
# Everything below the workspace but turnkeeper's directory at its top (libgit2's
# pathspecs: the first that matches decides; a name matches the directory it names).
ADD_PATHSPEC = ["!.turnkeeper", "*"]
_OPEN_FLAGS = RepositoryOpenFlag.NO_SEARCH | RepositoryOpenFlag.BARE
# Set, each would make git read configuration libgit2 does not.
_CONFIG_ENV = (
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
)


def _same_home_as_libgit2() -> bool:
    """Whether libgit2's global and XDG config directories (read from HOME and
    XDG_CONFIG_HOME when it started) are still the ones git would read now."""
    home = os.environ.get("HOME")
    if not home:
        return False
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    paths = pygit2.settings.search_path
    return bool(
        paths[ConfigLevel.GLOBAL] == home and paths[ConfigLevel.XDG] == os.path.join(xdg, "git")
    )


def _git_would_differ(repo: pygit2.Repository) -> bool:
    """Whether the repository's configuration asks for what libgit2 does not do as git
    does: clean/smudge filter drivers, a sparse checkout, a worktree elsewhere."""
    for entry in repo.config:
        name = entry.name.lower()
        if name.startswith("filter.") or name == "core.worktree":
            return True
        if name == "core.sparsecheckout" and entry.value != "false":
            return True
    return False


def _write_once(path: Path, text: str) -> None:
    if path.is_file():
        return
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # a crash never leaves a half-written file for libgit2 to read


@contextmanager
def session_repository(workspace: Path, session_id: str) -> Iterator[pygit2.Repository | None]:
    """:func:`open_session`, its packfiles' maps and descriptors released on the way
    out rather than whenever the object is collected (a fleet holds hundreds)."""
    repo = open_session(workspace, session_id)
    try:
        yield repo
    finally:
        if repo is not None:
            repo.free()


def open_session(workspace: Path, session_id: str) -> pygit2.Repository | None:
    """The workspace's repository as the session's own git directory sees it (its
    index the session's), or None when git must do the work (module docstring)."""
    git_dir = workspace / ".git"
    if not _libgit2_may_serve(git_dir):
        return None
    private = session_git_dir(git_dir, session_id)
    private.mkdir(parents=True, exist_ok=True)
    _write_once(private / "commondir", _COMMONDIR)
    _write_once(private / "HEAD", _HEAD)
    return _open(private, workspace)


@contextmanager
def user_repository(workspace: Path) -> Iterator[pygit2.Repository | None]:
    """:func:`open_user`, released on the way out (as :func:`session_repository`)."""
    repo = open_user(workspace)
    try:
        yield repo
    finally:
        if repo is not None:
            repo.free()


def open_user(workspace: Path) -> pygit2.Repository | None:
    """The workspace's repository as git sees it from the workspace (the user's own
    index and HEAD), to be read only; None when git must do the work, for the same
    reasons as :func:`open_session`."""
    git_dir = workspace / ".git"
    if not _libgit2_may_serve(git_dir):
        return None
    return _open(git_dir, workspace)


def _libgit2_may_serve(git_dir: Path) -> bool:
    """What can be told before opening: a ``.git`` directory (not a linked worktree's
    file), no configuration from the environment, the HOME libgit2 started with."""
    if not git_dir.is_dir() or any(name in os.environ for name in _CONFIG_ENV):
        return False
    return _same_home_as_libgit2()


def _open(git_dir: Path, workspace: Path) -> pygit2.Repository | None:
    """``git_dir`` opened on ``workspace``'s files, or None when its configuration asks
    for what libgit2 does not do as git does."""
    try:
        repo = pygit2.Repository(str(git_dir), _OPEN_FLAGS)
        repo.workdir = str(workspace)
        if _git_would_differ(repo):
            repo.free()
            return None
    except GitError:
        return None  # git's own message will say what is wrong, if anything
    return repo


def session_tree(repo: pygit2.Repository, user_index: Path) -> str:
    """``add -A`` into the session's index and its tree, as git's snapshot does: every
    path matches the worktree, ignored untracked files stay out, and an entry the user
    does not track that is ignored now (``add -A`` keeps every entry it has) is
    dropped. The index is written back for its stat cache; raises one of ``REFUSED``
    when git must build the tree instead."""
    index = repo.index
    index.add_all(ADD_PATHSPEC)
    tree = index.write_tree()
    dropped = _newly_ignored(repo, tree, user_index)
    if dropped:
        for path in dropped:
            index.remove(path)
        tree = index.write_tree()
    index.write()
    return str(tree)


def _newly_ignored(repo: pygit2.Repository, tree: pygit2.Oid, user_index: Path) -> list[str]:
    """The paths in ``tree`` that the user's index does not hold and that are ignored
    now. The tree is compared with the user's index by libgit2, so only what differs
    between them (the uncommitted work) is looked at here."""
    theirs = pygit2.Index(str(user_index)) if user_index.is_file() else pygit2.Index()
    built = repo[tree]
    assert isinstance(built, pygit2.Tree)
    diff = built.diff_to_index(theirs)
    return [
        delta.old_file.path
        for delta in diff.deltas
        if delta.status == DeltaStatus.DELETED and repo.path_is_ignored(delta.old_file.path)
    ]


def create_snapshot(
    repo: pygit2.Repository, tree: str, parent: str | None, message: str, ref: str
) -> str:
    """The snapshot's commit (``tree`` on ``parent``) written, then ``ref`` set to it
    (rewritten when there: a retry of the same turn)."""
    who = pygit2.Signature(IDENTITY["GIT_COMMITTER_NAME"], IDENTITY["GIT_COMMITTER_EMAIL"])
    try:
        parents = [pygit2.Oid(hex=parent)] if parent else []
        commit = repo.create_commit(None, who, who, message, pygit2.Oid(hex=tree), parents)
        repo.references.create(ref, commit, force=True)
    except (GitError, ValueError) as exc:
        raise FailedPrecondition(
            f"cannot write the snapshot {ref}: {exc}", reason="git_failed"
        ) from exc
    return str(commit)


def prune_refs(repo: pygit2.Repository, prefix: str, retain: int) -> list[str]:
    """Delete the refs below ``prefix`` (a session's snapshots) beyond the newest
    ``retain`` by name; the names deleted. No ref outside ``prefix`` is ever named."""
    try:
        names = sorted(name for name in repo.listall_references() if name.startswith(prefix))
        dropped = names[: max(0, len(names) - retain)]
        for name in dropped:
            repo.references.delete(name)
    except (GitError, KeyError) as exc:
        raise FailedPrecondition(
            f"cannot prune the snapshots below {prefix}: {exc}", reason="git_failed"
        ) from exc
    return dropped
