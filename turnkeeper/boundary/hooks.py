"""The git pre-commit hook that runs ``turnkeeper scan`` on what is about to be committed.

The hook calls the interpreter that installed it (``python -m turnkeeper.cli.main``),
so it works whether or not ``turnkeeper`` is on the PATH of whoever commits. A hook
that is not turnkeeper's is never replaced: the user is told how to chain ours.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel

from turnkeeper.errors import FailedPrecondition

# The line that makes a hook ours: one carrying it is rewritten, any other left alone.
MARKER = "# turnkeeper pre-commit hook"


class HookStatus(StrEnum):
    INSTALLED = "installed"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    FOREIGN = "foreign"  # another hook is there: left as it was


class HookResult(BaseModel):
    path: str
    status: HookStatus
    message: str


def scan_command() -> str:
    """The shell command that runs this turnkeeper's ``scan``."""
    return f"{shlex.quote(sys.executable)} -m turnkeeper.cli.main scan"


def hook_script() -> str:
    return (
        "#!/bin/sh\n"
        f"{MARKER} (installed by `turnkeeper init --hooks`).\n"
        "# Refuses a commit whose staged files hold credentials, local paths, transcripts,\n"
        "# private links or turnkeeper state; allow a finding in .turnkeeper-allow.toml.\n"
        f"exec {scan_command()}\n"
    )


def hooks_dir(root: Path) -> Path:
    """Where git looks for hooks in the repository at ``root`` (``core.hooksPath`` and
    linked worktrees included); FAILED_PRECONDITION when ``root`` is no git repository."""
    try:
        proc = subprocess.run(
            ["git", "rev-parse", "--git-path", "hooks"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FailedPrecondition(f"git cannot run in {root}: {exc}", reason="no_git") from None
    if proc.returncode != 0:
        raise FailedPrecondition(
            f"{root} is not a git repository: --hooks installs a git pre-commit hook",
            reason="not_a_git_repository",
            details={"directory": str(root)},
        )
    return root / proc.stdout.strip()


def install_pre_commit(root: Path) -> HookResult:
    """Write the pre-commit hook of the repository at ``root`` unless another is there."""
    root = root.resolve()
    directory = hooks_dir(root)
    path = directory / "pre-commit"
    script = hook_script()
    status = HookStatus.INSTALLED
    if path.exists():
        current = path.read_text(errors="replace")
        if MARKER not in current:
            return HookResult(
                path=str(path),
                status=HookStatus.FOREIGN,
                message=f"{path} exists and is not turnkeeper's: left as it is. To chain "
                f"the scan, add this line to it: {scan_command()} || exit 1",
            )
        status = HookStatus.UNCHANGED if current == script else HookStatus.UPDATED
    if status is not HookStatus.UNCHANGED:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".pre-commit.{os.getpid()}.tmp")
        tmp.write_text(script)
        tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        tmp.replace(path)  # never a half-written hook
    verb = {"installed": "installed", "updated": "updated", "unchanged": "already installed"}
    return HookResult(
        path=str(path),
        status=status,
        message=f"pre-commit hook {verb[status.value]}: {path} runs `turnkeeper scan`",
    )
