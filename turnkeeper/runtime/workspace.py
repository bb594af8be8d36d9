"""Probing a workspace: facts that are re-read, never replayed (seed 001).

An old receipt proves the past, not the present: the checkout and its
uncommitted diff are asked of git every time they matter.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from pydantic import BaseModel


class WorkspaceProbe(BaseModel):
    path: str
    revision: str | None
    dirty_files: int
    exists: bool


def _git(cwd: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=False
        )
    except (FileNotFoundError, NotADirectoryError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def git_revision(cwd: Path) -> str | None:
    """The commit checked out at ``cwd``, or None outside a repository / before a commit."""
    return _git(cwd, "rev-parse", "--verify", "-q", "HEAD")


def probe_workspace(path: Path) -> WorkspaceProbe:
    if not path.is_dir():
        return WorkspaceProbe(path=str(path), revision=None, dirty_files=0, exists=False)
    status = _git(path, "status", "--porcelain")
    dirty = len(status.splitlines()) if status else 0
    return WorkspaceProbe(
        path=str(path), revision=git_revision(path), dirty_files=dirty, exists=True
    )
