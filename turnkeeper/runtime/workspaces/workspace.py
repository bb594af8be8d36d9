"""Probing a workspace: facts that are re-read, never replayed.

An old receipt proves the past, not the present: the checkout and its
uncommitted diff are asked of git every time they matter. Asking costs a process
(a few milliseconds), and a turn asks more than once, so the answer for HEAD is
kept with the file stats it depends on — ``.git/HEAD``, the branch's ref file,
``packed-refs`` — and git is asked again as soon as any of them changed (git
replaces each of these files by rename, so every update gives a new inode). A
directory with no ``.git`` at or above it is no repository, without asking.
"""

from __future__ import annotations

import functools
import os
import subprocess
import time
from pathlib import Path

from pydantic import BaseModel

from turnkeeper.memo import Memo

# Environment that changes how git finds a repository: with any of it set, the
# stat shortcuts below would not describe what git does, so git is always asked.
DISCOVERY_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_CEILING_DIRECTORIES", "GIT_COMMON_DIR")

_MAX_SYMREF_HOPS = 5
_Stamp = tuple[tuple[str, int, int, int] | None, ...]

# Owned by :func:`git_revision`, made at import, one per process; anyone may clear it.
# An entry is served only while the workspace's HEAD stamp equals the one it was
# stored with (docs/caches.md).
_revisions: Memo[Path, tuple[_Stamp, str | None]] = Memo(
    "HEAD revision by workspace",
    max_entries=1024,
    invalidation="when HEAD's stamp (HEAD, its ref chain, packed-refs: stats) changes",
)


class WorkspaceProbe(BaseModel):
    path: str
    revision: str | None
    dirty_files: int
    exists: bool


# Never cleared: ``Path(text)`` is a pure function of ``text`` and a Path is
# immutable, so one may be shared. A session's workspace is read as a Path a few times
# a turn and parsing one (~20k instructions) costs ten times the look-up.
@functools.lru_cache(maxsize=1024)
def workspace_path(text: str) -> Path:
    """``Path(text)``, built once per text."""
    return Path(text)


def _git(cwd: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=False
        )
    except (FileNotFoundError, NotADirectoryError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def discovery_overridden() -> bool:
    return any(name in os.environ for name in DISCOVERY_ENV)


def git_marker(cwd: Path) -> Path | None:
    """The nearest ``.git`` (directory or file) at or above ``cwd``, by stat alone."""
    for directory in (cwd, *cwd.parents):
        candidate = directory / ".git"
        if candidate.exists():
            return candidate
    return None


def present(path: str) -> bool:
    """Whether ``path`` exists (a symlink followed), as a stat would find it. Asked
    before a stat of a file that is often missing (``packed-refs``, a reftable, the
    user's global git files): a failed stat raises and catches an OSError, six times
    what this costs; a file missing here and there a moment later is missing still."""
    return os.access(path, os.F_OK)


# Owned by :func:`stat_if_present`, made at import, one per process; anyone may clear
# it. Whether each file asked for was there at its last look: only which call comes
# first (a stat that fails raises, which costs more than ``access``), never the
# answer, which is always the stat's. So an entry is never stale in effect; it is
# rewritten whenever the stat finds otherwise. Workspaces of sessions long gone drop
# out at the bound.
_was_present: Memo[str, bool] = Memo(
    "whether a file was there at its last stat",
    max_entries=4096,
    invalidation="never served as an answer: rewritten whenever the stat differs",
)


def stat_if_present(path: str) -> os.stat_result | None:
    """``os.stat(path)``, or None when it is missing (or cannot be stat-ed).

    A file that was there at its last look (HEAD's ref, a repository's exclude file
    and config, the user's ~/.gitconfig) is stat-ed straight away; one that was not
    (``packed-refs``, XDG's git files in most homes) is asked for with :func:`present`
    first. Only which call comes first: the stat decides."""
    was = _was_present.get(path)
    st: os.stat_result | None = None
    if was or present(path):
        try:
            st = os.stat(path)
        except OSError:
            st = None
    if was is not (st is not None):
        _was_present.put(path, st is not None)
    return st


def _stat(path: str) -> tuple[str, int, int, int] | None:
    st = stat_if_present(path)
    return None if st is None else (path, st.st_ino, st.st_mtime_ns, st.st_size)


def _read_ref(path: str) -> str:
    with open(path) as ref:  # as Path.read_text reads it
        return ref.read().strip()


# Owned by :func:`head_stamp`, made at import, one per process; anyone may clear it.
# The text of each ref file last read, by the stat it had: HEAD is stamped several
# times a turn, and opening and decoding its two small files cost four times the rest
# of the stamp. A stat vouches for a text only once its mtime and ctime are
# ``_RACY_NS`` old (as git's racily-clean rule): a rewrite in place after that moves
# ctime, which no tool can set back, so an equal stat is the same text.
_RACY_NS = 2_000_000_000
_ref_texts: Memo[str, tuple[tuple[int, int, int, int], str]] = Memo(
    "ref file texts by stat",
    max_entries=1024,
    invalidation="when the file's (inode, size, mtime, ctime) differ",
)


def _ref_text(path: str, st: os.stat_result) -> str:
    """The stripped text of ``path``, whose stat (taken before) is ``st``."""
    seen = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    known = _ref_texts.get(path)
    if known is not None and known[0] == seen:
        return known[1]
    text = _read_ref(path)
    if max(st.st_mtime_ns, st.st_ctime_ns) < time.time_ns() - _RACY_NS:
        _ref_texts.put(path, (seen, text))
    return text


# Never cleared: a pure function of its arguments (no file is read). The Path join
# normalises the name, as it always did, and costs more than the stat it names; HEAD
# is stamped 3-4 times a turn.
@functools.lru_cache(maxsize=1024)
def _ref_path(top: str, text: str) -> str:
    """Where ``ref: <name>`` in the git directory ``top`` points (the Path join
    normalises the name)."""
    return str(Path(top) / text[5:].strip())


# Never cleared: a pure function of ``top``. The files of a git directory that HEAD's
# value depends on (reftable, HEAD, packed-refs), joined once per directory: each join
# costs about what a stat does.
@functools.lru_cache(maxsize=1024)
def _head_files(top: str) -> tuple[str, str, str]:
    join = os.path.join
    return join(top, "reftable"), join(top, "HEAD"), join(top, "packed-refs")


def head_stamp(git_dir: str | Path) -> _Stamp | None:
    """What HEAD's value depends on, or None when it cannot be told by stat (a
    ``.git`` file of a worktree or submodule, a reftable, an unreadable HEAD)."""
    # Each string is what str() of the same Path join gives, so a stamp equals the one
    # of a run before.
    top = os.fspath(git_dir)
    reftable, head, packed = _head_files(top)
    if present(reftable):
        return None  # refs in a reftable are not files a stat can watch
    try:
        # A ``.git`` file (not a directory) fails here too: ENOTDIR.
        st = os.stat(head)
        text = _ref_text(head, st)
    except OSError:
        return None
    stamp: list[tuple[str, int, int, int] | None] = [
        (head, st.st_ino, st.st_mtime_ns, st.st_size),
        _stat(packed),
    ]
    # Follow symbolic refs (HEAD -> refs/heads/master -> refs/heads/main, as a branch
    # rename leaves them): a commit rewrites only the last file of the chain.
    for _ in range(_MAX_SYMREF_HOPS):
        if not text.startswith("ref: "):
            break
        target = _ref_path(top, text)
        try:
            target_st = os.stat(target)
        except OSError:
            stamp.append(None)
            break  # packed or not yet born: packed-refs' stat covers it
        stamp.append((target, target_st.st_ino, target_st.st_mtime_ns, target_st.st_size))
        try:
            text = _ref_text(target, target_st)
        except OSError:
            break
    else:
        return None  # a cycle or a very long chain: let git answer
    return tuple(stamp)


def git_revision(cwd: Path) -> str | None:
    """The commit checked out at ``cwd``, or None outside a repository / before a commit."""
    if discovery_overridden():
        return _git(cwd, "rev-parse", "--verify", "-q", "HEAD")
    key = cwd.resolve()
    marker = git_marker(key)
    if marker is None:
        return None
    stamp = head_stamp(marker)
    if stamp is None:
        return _git(cwd, "rev-parse", "--verify", "-q", "HEAD")
    known = _revisions.get(key)
    if known is not None and known[0] == stamp:
        return known[1]
    revision = _git(cwd, "rev-parse", "--verify", "-q", "HEAD")
    if head_stamp(marker) == stamp:  # nothing moved while git answered
        _revisions.put(key, (stamp, revision))
    return revision


def probe_workspace(path: Path) -> WorkspaceProbe:
    if not path.is_dir():
        return WorkspaceProbe(path=str(path), revision=None, dirty_files=0, exists=False)
    status = _git(path, "status", "--porcelain")
    dirty = len(status.splitlines()) if status else 0
    return WorkspaceProbe(
        path=str(path), revision=git_revision(path), dirty_files=dirty, exists=True
    )
