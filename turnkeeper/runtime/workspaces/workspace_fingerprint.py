"""Has anything in a workspace changed since the last snapshot? Answered by stat alone.

A snapshot costs several git processes; most turns of a long session change the
workspace, but many do not (a turn that only talks, a no-op host, a retry that
fails early), and for those the last snapshot already holds the workspace. The
fingerprint is every entry's ``lstat`` below the workspace — path, mode, inode,
size, mtime and ctime — plus what HEAD depends on, the stat of the files outside
the worktree that decide what is ignored, and the host artifact's stat. ctime
cannot be set back by any tool, so a file rewritten with its old mtime still
changes the fingerprint. The stats are kept as they are (compared whole, no
formatting or hashing of each), except those of a large worktree, which are kept
as one digest.

Like git's "racily clean" rule, a fingerprint taken while some entry changed in
the last ``RACY_NS`` is not trusted (the next write could land in the same clock
tick and leave every stat equal), and a workspace with more than
``MAX_ENTRIES`` entries is not fingerprinted at all: git's own index, with its
untracked cache, is the better judge there.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from turnkeeper.memo import Memo
from turnkeeper.runtime.workspaces.workspace import (
    discovery_overridden,
    head_stamp,
    stat_if_present,
)

MAX_ENTRIES = 20_000
RACY_NS = 2_000_000_000
# A worktree of at most this many entries is keyed by their stats themselves; a larger
# one by a digest of them, so what a session remembers of it stays small.
KEPT_ENTRIES = 256
# Never part of a snapshot (.turnkeeper) or not the worktree (.git): skipped at the top.
_SKIPPED_AT_TOP = frozenset({".git", ".turnkeeper"})

# One entry of the worktree: path below the workspace, mode, inode, size, mtime, ctime.
_Entry = tuple[str, int, int, int, int, int]

# Owned by :func:`_global_ignore_sources`, made at import, one per process; anyone may
# clear it. The user's global ignore files, by the values of HOME and XDG_CONFIG_HOME
# they derive from. The key is the whole rule: another HOME or XDG_CONFIG_HOME is
# another key, so an entry is never stale; only the last one is kept (the environment
# of a running control plane rarely changes). Without HOME nothing is kept (see below).
_global_sources: Memo[tuple[object, ...], tuple[str, ...]] = Memo(
    "the user's global ignore files, by HOME and XDG_CONFIG_HOME",
    max_entries=1,
    invalidation="never while the key holds: another HOME or XDG_CONFIG_HOME is a new key",
)

# Owned by :func:`_outside`, made at import, one per process; anyone may clear it.
# Each workspace's git directory and every ignore source of it, by the workspace's
# path, with the global ones they were built on: invalid when those are no longer the
# very tuple _global_ignore_sources answers (checked by identity before serving).
_sources: Memo[str, tuple[tuple[str, ...], str, tuple[str, ...]]] = Memo(
    "a workspace's git directory and ignore sources, by workspace",
    max_entries=1024,
    invalidation="when the global ignore sources it was built on are not the current ones",
)


def _global_ignore_sources() -> tuple[str, ...]:
    """The user's global ignore files: git's ``ignore`` and ``config`` under
    ``XDG_CONFIG_HOME`` (else ``~/.config``), and ``~/.gitconfig``."""
    raw = (os.environ.get("HOME"), os.environ.get("XDG_CONFIG_HOME"))
    known = _global_sources.get(raw)
    if known is not None:
        return known
    home = Path.home()  # HOME, else the password database's; raises when neither has one
    config_home = Path(raw[1] or home / ".config")
    ignore, config = config_home / "git" / "ignore", config_home / "git" / "config"
    known = (str(ignore), str(config), str(home / ".gitconfig"))
    # Without HOME the home comes from the password database: asked at every call,
    # as git does, so nothing is kept under a key that does not name it.
    if raw[0] is not None:
        _global_sources.put(raw, known)
    return known


def _outside(top: str) -> tuple[str, tuple[str, ...]]:
    """The workspace's git directory, and the files outside the worktree that decide
    what is ignored (and so what a snapshot holds): the repository's exclude file and
    config, the user's global ones."""
    user = _global_ignore_sources()
    known = _sources.get(top)
    if known is not None and known[0] is user:
        return known[1], known[2]
    git_dir = os.path.join(top, ".git")  # the same string as str() of a Path join
    exclude = os.path.join(git_dir, "info", "exclude")
    sources = (exclude, os.path.join(git_dir, "config"), *user)
    _sources.put(top, (user, git_dir, sources))
    return git_dir, sources


@dataclass(frozen=True)
class Fingerprint:
    # Equal for two fingerprints exactly when every stat they were taken from is.
    key: tuple[object, ...]
    trusted: bool  # False when an entry changed too recently for its stat to be proof


def fingerprint(workspace: Path, extra_files: Iterable[Path] = ()) -> Fingerprint | None:
    """The workspace's fingerprint, or None when stat cannot tell (too many entries,
    HEAD not readable by stat, git discovery overridden by the environment)."""
    if discovery_overridden():
        return None
    top = os.fspath(workspace)
    git_dir, sources = _outside(top)
    head = head_stamp(git_dir)
    if head is None:
        return None
    started = time.time_ns()
    walked = _worktree(top)
    if walked is None:
        return None
    entries, newest = walked
    files: list[tuple[str, int, int, int, int] | str] = []
    for path in (*sources, *map(os.fspath, extra_files)):
        st = stat_if_present(path)
        if st is None:
            files.append(path)  # missing (or unreadable): its path alone
            continue
        mtime, ctime = st.st_mtime_ns, st.st_ctime_ns
        files.append((path, st.st_ino, st.st_size, mtime, ctime))
        newest = max(newest, mtime, ctime)
    tree: object = (
        tuple(entries)
        if len(entries) <= KEPT_ENTRIES
        else hashlib.sha256(repr(entries).encode()).digest()
    )
    return Fingerprint(key=(head, tuple(files), tree), trusted=newest < started - RACY_NS)


def _worktree(top: str) -> tuple[list[_Entry], int] | None:
    """Every entry's ``lstat`` below ``top`` in path order, and the newest mtime or
    ctime among them; None when there are too many or a listing or stat fails."""
    entries: list[_Entry] = []
    newest = 0
    stack = [(top, "")]
    is_dir = stat.S_ISDIR
    while stack:
        directory, prefix = stack.pop()
        try:
            with os.scandir(directory) as listing:
                for entry in listing:
                    name = entry.name
                    if not prefix and name in _SKIPPED_AT_TOP:
                        continue
                    if len(entries) >= MAX_ENTRIES:
                        return None
                    st = entry.stat(follow_symlinks=False)
                    rel = prefix + name
                    mode, mtime, ctime = st.st_mode, st.st_mtime_ns, st.st_ctime_ns
                    entries.append((rel, mode, st.st_ino, st.st_size, mtime, ctime))
                    # max() only when it moves: a call per entry costs more.
                    if mtime > newest or ctime > newest:
                        newest = max(mtime, ctime)
                    if is_dir(mode):
                        stack.append((entry.path, rel + "/"))
        except OSError:
            return None
    entries.sort()  # paths are unique: the order of the listings does not matter
    return entries, newest
