"""Running git for snapshots and reverts.

Every call gets a fixed identity (a snapshot must not depend on, or fail for lack
of, the user's git config) and the workspace's own repository: variables that would
point git at another repository, index or pathspec mode (set, say, when turnkeeper
runs from a git hook) are dropped, the caller's own ``GIT_INDEX_FILE`` put back.

A git child that writes the worktree (:func:`worktree_git`, used by revert) never
outlives the process that started it: on Linux it is started with
``PR_SET_PDEATHSIG`` = SIGKILL, so when a revert is SIGKILLed mid-restore its
``checkout-index`` dies with it instead of writing the worktree on its own for
seconds after. (The signal fires when the *thread* that started the child ends;
every caller waits for its git in that same thread.) The signal is set by
``setpriv --pdeathsig`` exec'd in front of git, not by a ``preexec_fn``: a Python
callable between fork and exec forbids ``vfork``, so every git call would fork the
whole controller (hundreds of threads, its memory) while holding the interpreter,
and may deadlock on a lock another thread held at the fork. Without ``setpriv``
the ``preexec_fn`` is the fallback. Snapshot git calls, which only read the
worktree, run plain.

turnkeeper's files inside a repository live in the git directory, under
``turnkeeper/`` (:func:`private_git_dir`): never part of the worktree, ``git
status`` or a snapshot.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from turnkeeper.errors import FailedPrecondition, Unavailable

IDENTITY = {
    "GIT_AUTHOR_NAME": "turnkeeper",
    "GIT_AUTHOR_EMAIL": "turnkeeper@localhost",
    "GIT_COMMITTER_NAME": "turnkeeper",
    "GIT_COMMITTER_EMAIL": "turnkeeper@localhost",
}
# Where the repository, its index and objects are, and how pathspecs are read: each
# would make git work on something other than the workspace as this code means it.
_DROPPED_ENV = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_LITERAL_PATHSPECS",
    "GIT_GLOB_PATHSPECS",
    "GIT_NOGLOB_PATHSPECS",
    "GIT_ICASE_PATHSPECS",
)
TIMEOUT_S = 120.0
PRIVATE_NAME = "turnkeeper"
SESSIONS_DIR = "sessions"
# Where completed turns' snapshots live (runtime/workspaces/snapshots.py).
SNAPSHOT_REF_PREFIX = "refs/turnkeeper/snapshots"

_PR_SET_PDEATHSIG = 1


# Cached for the process; never cleared: libc's symbols do not change while it runs.
@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl`` (the process's own symbols hold it), resolved in the parent
    before its first fork: the child only calls the function pointer."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


def _die_with_parent(parent: int, prctl: Callable[..., int] | None) -> None:
    """In the child, before exec: SIGKILL when the parent goes; gone already, exit."""
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
    env.update(IDENTITY)
    env.update(extra or {})
    return env


# Cached for the process; never cleared: the system's setpriv (and whether the kernel
# takes --pdeathsig) is taken not to change while it runs.
@functools.cache
def _setpriv() -> str | None:
    found = shutil.which("setpriv")
    if found is None:
        return None
    probe = subprocess.run(
        [found, "--pdeathsig", "KILL", "--", "true"], capture_output=True, check=False
    )
    return found if probe.returncode == 0 else None


def worktree_git(
    cwd: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """:func:`git` for a call that writes the worktree: it dies with its caller."""
    return git(cwd, *args, env=env, check=check, input=input, die_with_caller=True)


def git(
    cwd: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    input: str | None = None,
    die_with_caller: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``git ARGS`` in ``cwd``; FAILED_PRECONDITION (``git_failed``) with git's own
    message when it fails and ``check``, UNAVAILABLE when it outlives its timeout."""
    command = ["git", *args]
    preexec: Callable[[], None] | None = None
    if die_with_caller:
        setpriv = _setpriv()
        if setpriv is not None:
            command = [setpriv, "--pdeathsig", "KILL", "--", *command]
        else:
            preexec = functools.partial(_die_with_parent, os.getpid(), _prctl())
    try:
        proc = subprocess.run(
            command,
            cwd=cwd,
            env=git_env(env),
            capture_output=True,
            text=True,
            # File names are bytes to git: one that is not UTF-8 round-trips intact.
            errors="surrogateescape",
            input=input,
            timeout=TIMEOUT_S,
            check=False,
            preexec_fn=preexec,
        )
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise FailedPrecondition(f"git cannot run in {cwd}: {exc}", reason="no_git") from exc
    except subprocess.TimeoutExpired as exc:
        raise Unavailable(f"git {args[0]} timed out in {cwd}", reason="git_timeout") from exc
    if check and proc.returncode != 0:
        raise FailedPrecondition(
            f"git {' '.join(args[:2])} failed in {cwd}: {proc.stderr.strip()[:500]}",
            reason="git_failed",
        )
    return proc


def git_dir(workspace: Path) -> Path:
    """The workspace's git directory: ``.git`` itself, or where a ``.git`` file (a
    linked worktree) points."""
    dot_git = workspace / ".git"
    if dot_git.is_dir():
        return dot_git
    return Path(git(workspace, "rev-parse", "--absolute-git-dir").stdout.strip())


def session_git_dir(git_dir: Path, session_id: str) -> Path:
    """A session's own git directory inside ``git_dir``: its snapshot index, and the
    ``commondir`` through which libgit2 sees the repository (runtime/workspaces/libgit.py)."""
    return git_dir / PRIVATE_NAME / SESSIONS_DIR / session_id


def private_git_dir(workspace: Path) -> Path:
    """``<git dir>/turnkeeper``: session indexes, revert scratch and what a revert
    preserved."""
    return git_dir(workspace) / PRIVATE_NAME
