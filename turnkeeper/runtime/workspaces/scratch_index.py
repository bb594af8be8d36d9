"""The worktree's tree built in a throwaway index file, the user's index untouched.

A snapshot's session index starts as a copy of the user's (:func:`seed_index`); the
tree a check ran on (runtime/workspaces/tested_content.py) and a revert's comparison
(runtime/workspaces/workspace_restore.py) are built in a scratch index of their own,
in the git directory (:func:`scratch_dir`), never in ``/tmp``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from turnkeeper.hosts.workspace_folder import FOLDER_NAME
from turnkeeper.runtime.workspaces.gitcmd import git, private_git_dir

__all__ = ["PATHSPEC", "scratch_dir", "seed_index", "workspace_tree"]

PRIVATE_DIR = FOLDER_NAME
# Everything below the workspace except turnkeeper's private directory at its top.
# The excluded name starts with a wildcard on purpose: git (2.39 at least) reports an
# exclude pathspec whose literal part names an ignored path as "paths are ignored"
# and fails the whole ``add`` — and ``turnkeeper init`` ignores ``.turnkeeper/``.
# (Plain pathspecs: ``*`` matches across ``/``, so the second covers everything below.)
PATHSPEC = (".", f":(exclude,top)[{PRIVATE_DIR[0]}]{PRIVATE_DIR[1:]}",
            f":(exclude,top)[{PRIVATE_DIR[0]}]{PRIVATE_DIR[1:]}/*")  # fmt: skip


def _head(workspace: Path) -> str | None:
    proc = git(workspace, "rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def scratch_dir(workspace: Path, prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary directory in the git directory (``turnkeeper/tmp/``), not ``/tmp``:
    what a killed process leaves there stays inside the repository it belongs to."""
    base = private_git_dir(workspace) / "tmp"
    base.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix=prefix, dir=base)


def workspace_tree(workspace: Path) -> str:
    """The tree of the worktree as it is now (tracked + untracked-not-ignored files), built
    in a throwaway index so the user's index is untouched."""
    with scratch_dir(workspace, "index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        seed_index(workspace, Path(tmp) / "index", env)
        git(workspace, "add", "-A", "--", *PATHSPEC, env=env)
        return git(workspace, "write-tree", env=env).stdout.strip()


def seed_index(workspace: Path, target: Path, env: Mapping[str, str]) -> None:
    """Start the throwaway index from a copy of the user's index (its stat cache spares
    ``git add -A`` from rehashing every file each turn; ``add -A`` then makes every
    path match the worktree, so what the user staged does not leak in), else from HEAD.
    Either way tracked files that match an ignore rule stay in, as git keeps them."""
    user_index = git(workspace, "rev-parse", "--git-path", "index").stdout.strip()
    source = workspace / user_index
    if source.is_file() and _plain_index(workspace, source):
        # copy2 keeps the index's mtime: git's racy-clean check compares file mtimes
        # with it, and a fresh mtime would make a just-modified file look clean.
        shutil.copy2(source, target)
    elif _head(workspace) is not None:
        git(workspace, "read-tree", "HEAD", env=env)


def _plain_index(workspace: Path, index: Path) -> bool:
    """An index safe to copy: not split (its shared part would not follow the copy) and
    with no assume-unchanged / skip-worktree entries (``add -A`` would not look at
    those files, and the snapshot would miss their changes)."""
    if any(index.parent.glob("sharedindex.*")):
        return False
    tags = git(workspace, "--no-optional-locks", "ls-files", "-v", "-z").stdout
    return not any(e and (e[0].islower() or e[0] == "S") for e in tags.split("\0"))
