"""Has anything in a workspace changed since the last snapshot? Answered by stat alone.

A snapshot costs several git processes; most turns of a long session change the
workspace, but many do not (a turn that only talks, a no-op host, a retry that
fails early), and for those the last snapshot already holds the workspace. The
fingerprint is a digest of every entry's ``lstat`` below the workspace — path,
mode, inode, size, mtime and ctime — plus what HEAD depends on and the host
artifact's stat. ctime cannot be set back by any tool, so a file rewritten with
its old mtime still changes the digest.

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

from turnkeeper.runtime.workspaces.workspace import discovery_overridden, head_stamp

MAX_ENTRIES = 20_000
RACY_NS = 2_000_000_000
# Never part of a snapshot (.turnkeeper) or not the worktree (.git): skipped at the top.
_SKIPPED_AT_TOP = frozenset({".git", ".turnkeeper"})


# The user's global ignore files, by the (HOME, XDG_CONFIG_HOME) they derive from: the
# last one only (the environment of a running control plane rarely changes, and a
# change is a new key). Building them as Paths cost more than stat-ing them.
_global_sources: dict[tuple[str, str], tuple[str, ...]] = {}
# Every ignore source of a workspace, by its path, with the global ones it was built on.
_sources: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _global_ignore_sources() -> tuple[str, ...]:
    # HOME read once (expanduser reads it twice); without it, expanduser asks pwd.
    home_env = os.environ.get("HOME")
    home_key = home_env if home_env is not None else os.path.expanduser("~")
    key = (home_key, os.environ.get("XDG_CONFIG_HOME") or "")
    known = _global_sources.get(key)
    if known is None:
        home = Path.home()  # raises as before when there is no home to find
        config_home = Path(key[1] or home / ".config")
        ignore, config = config_home / "git" / "ignore", config_home / "git" / "config"
        known = (str(ignore), str(config), str(home / ".gitconfig"))
        _global_sources.clear()
        _global_sources[key] = known
    return known


def _ignore_sources(workspace: str | Path) -> tuple[str, ...]:
    """Files outside the worktree that decide what is ignored (and so what a snapshot
    holds): the repository's exclude file and config, the user's global ones."""
    top = os.fspath(workspace)
    user = _global_ignore_sources()
    known = _sources.get(top)
    if known is not None and known[0] is user:
        return known[1]
    exclude = os.path.join(top, ".git", "info", "exclude")
    sources = (exclude, os.path.join(top, ".git", "config"), *user)
    if len(_sources) >= 1024:
        _sources.clear()  # workspaces of sessions long gone
    _sources[top] = (user, sources)
    return sources


@dataclass(frozen=True)
class Fingerprint:
    digest: str
    trusted: bool  # False when an entry changed too recently for its stat to be proof


def fingerprint(workspace: Path, extra_files: Iterable[Path] = ()) -> Fingerprint | None:
    """The workspace's fingerprint, or None when stat cannot tell (too many entries,
    HEAD not readable by stat, git discovery overridden by the environment)."""
    if discovery_overridden():
        return None
    top = os.fspath(workspace)
    head = head_stamp(os.path.join(top, ".git"))  # the same string as str() of a Path join
    if head is None:
        return None
    started = time.time_ns()
    digest = hashlib.sha256(repr(head).encode())
    newest = 0
    entries = 0
    stack = [(top, "")]
    while stack:
        directory, prefix = stack.pop()
        try:
            with os.scandir(directory) as listing:
                items = sorted(listing, key=lambda e: e.name)
        except OSError:
            return None
        for entry in items:
            if not prefix and entry.name in _SKIPPED_AT_TOP:
                continue
            entries += 1
            if entries > MAX_ENTRIES:
                return None
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                return None
            rel = prefix + entry.name
            digest.update(
                f"{rel}\0{st.st_mode}\0{st.st_ino}\0{st.st_size}\0"
                f"{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode()
            )
            newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
            if stat.S_ISDIR(st.st_mode):
                stack.append((entry.path, rel + "/"))
    for path in (*_ignore_sources(top), *map(os.fspath, extra_files)):
        try:
            st = os.stat(path)
            digest.update(
                f"{path}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}".encode()
            )
            newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
        except OSError:
            digest.update(f"{path}\0missing".encode())
    return Fingerprint(digest=digest.hexdigest(), trusted=newest < started - RACY_NS)
