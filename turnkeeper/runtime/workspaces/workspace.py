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
import threading
import time
from pathlib import Path

from pydantic import BaseModel

from turnkeeper.runtime.workspaces.environment import environ_has_any

# Environment that changes how git finds a repository: with any of it set, the
# stat shortcuts below would not describe what git does, so git is always asked.
DISCOVERY_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_CEILING_DIRECTORIES", "GIT_COMMON_DIR")

_MAX_SYMREF_HOPS = 5
_Stamp = tuple[tuple[str, int, int, int] | None, ...]
_revisions: dict[Path, tuple[_Stamp, str | None]] = {}
_revisions_lock = threading.Lock()


class WorkspaceProbe(BaseModel):
    path: str
    revision: str | None
    dirty_files: int
    exists: bool


@functools.lru_cache(maxsize=1024)
def workspace_path(text: str) -> Path:
    """``Path(text)``, built once per text: a session's workspace is read as a Path a
    few times a turn and parsing one costs more than the look-up (a Path is immutable,
    so one may be shared)."""
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
    return environ_has_any(DISCOVERY_ENV)


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


# Whether each file asked for through stat_if_present was there at its last look.
# Bounded: workspaces of sessions long gone drop out.
_was_present: dict[str, bool] = {}
_WAS_PRESENT_MAX = 4096


def stat_if_present(path: str) -> os.stat_result | None:
    """``os.stat(path)``, or None when it is missing (or cannot be stat-ed).

    A file that was there at its last look (HEAD's ref, a repository's exclude file
    and config, the user's ~/.gitconfig) is stat-ed straight away; one that was not
    (``packed-refs``, XDG's git files in most homes) is asked for with :func:`present`
    first, as a stat that fails raises. Only which call comes first: the stat decides."""
    was = _was_present.get(path)
    st: os.stat_result | None = None
    if was or present(path):
        try:
            st = os.stat(path)
        except OSError:
            st = None
    if was is not (st is not None):
        if len(_was_present) >= _WAS_PRESENT_MAX:
            _was_present.clear()
        _was_present[path] = st is not None
    return st


def _stat(path: str) -> tuple[str, int, int, int] | None:
    st = stat_if_present(path)
    return None if st is None else (path, st.st_ino, st.st_mtime_ns, st.st_size)


def _read_ref(path: str) -> str:
    with open(path) as ref:  # as Path.read_text reads it
        return ref.read().strip()


# The text of each ref file last read, by the stat it had: a turn stamps HEAD, and
# opening and decoding two small files cost more than the rest of the stamp. A stat
# vouches for a text only once its mtime and ctime are ``_RACY_NS`` old (as git's
# racily-clean rule): a rewrite in place after that moves ctime, which no tool can
# set back, so an equal stat is the same text.
_RACY_NS = 2_000_000_000
_MAX_KNOWN = 1024
_ref_texts: dict[str, tuple[tuple[int, int, int, int], str]] = {}
# Where ``ref: <name>`` in a git directory points: the Path join normalises the name
# (as it always did), and costs more than the stat it names.
_ref_paths: dict[tuple[str, str], str] = {}
# The files of a git directory that HEAD's value depends on: reftable, HEAD and
# packed-refs, joined once per directory (each join costs about what a stat does).
_head_files: dict[str, tuple[str, str, str]] = {}


def _ref_text(path: str, st: os.stat_result) -> str:
    """The stripped text of ``path``, whose stat (taken before) is ``st``."""
    seen = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    known = _ref_texts.get(path)
    if known is not None and known[0] == seen:
        return known[1]
    text = _read_ref(path)
    if max(st.st_mtime_ns, st.st_ctime_ns) < time.time_ns() - _RACY_NS:
        if len(_ref_texts) >= _MAX_KNOWN:
            _ref_texts.clear()
        _ref_texts[path] = (seen, text)
    return text


def _ref_path(top: str, text: str) -> str:
    key = (top, text)
    known = _ref_paths.get(key)
    if known is None:
        known = str(Path(top) / text[5:].strip())
        if len(_ref_paths) >= _MAX_KNOWN:
            _ref_paths.clear()
        _ref_paths[key] = known
    return known


def _files_of(top: str) -> tuple[str, str, str]:
    known = _head_files.get(top)
    if known is None:
        join = os.path.join
        known = (join(top, "reftable"), join(top, "HEAD"), join(top, "packed-refs"))
        if len(_head_files) >= _MAX_KNOWN:
            _head_files.clear()
        _head_files[top] = known
    return known


def head_stamp(git_dir: str | Path) -> _Stamp | None:
    """What HEAD's value depends on, or None when it cannot be told by stat (a
    ``.git`` file of a worktree or submodule, a reftable, an unreadable HEAD)."""
    # Plain strings: every turn stamps HEAD (for the snapshot's fingerprint) and a Path
    # join costs more than the stat it names. Each string is what str() of the same
    # Path join gives, so a stamp equals the one of a run before.
    top = os.fspath(git_dir)
    reftable, head, packed = _files_of(top)
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
    with _revisions_lock:
        known = _revisions.get(key)
    if known is not None and known[0] == stamp:
        return known[1]
    revision = _git(cwd, "rev-parse", "--verify", "-q", "HEAD")
    if head_stamp(marker) == stamp:  # nothing moved while git answered
        with _revisions_lock:
            _revisions[key] = (stamp, revision)
    return revision


def probe_workspace(path: Path) -> WorkspaceProbe:
    if not path.is_dir():
        return WorkspaceProbe(path=str(path), revision=None, dirty_files=0, exists=False)
    status = _git(path, "status", "--porcelain")
    dirty = len(status.splitlines()) if status else 0
    return WorkspaceProbe(
        path=str(path), revision=git_revision(path), dirty_files=dirty, exists=True
    )
