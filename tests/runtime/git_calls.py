"""Count the git processes the code under test starts, with a real ``git`` on PATH.

A memo's whole point is the git process it does not start, so the tests that check
one put a small shell script named ``git`` first on PATH: it logs its arguments and
execs the real git. Nothing is faked: every call still runs real git on a real
repository. The tests' own git commands use the real binary's full path, so only
the code under test is counted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from turnkeeper.runtime.workspaces.workspace import DISCOVERY_ENV

REAL_GIT = shutil.which("git") or "/usr/bin/git"


def git(repo: Path, *args: str) -> str:
    """Run the real git (never counted) with a fixed identity; its stdout, stripped."""
    proc = subprocess.run(
        [REAL_GIT, "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.stdout.strip()


class GitCalls:
    def __init__(self, log: Path) -> None:
        self.log = log

    def take(self) -> list[str]:
        """The git commands started since the last ``take`` (first word: the verb)."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        self.log.write_text("")
        return lines


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GitCalls:
    # A git environment of the caller's (running inside a hook, say) would point
    # every git call and every repository discovery somewhere else.
    for name in DISCOVERY_ENV:
        monkeypatch.delenv(name, raising=False)
    bin_dir = tmp_path / "counting-bin"
    bin_dir.mkdir()
    log = tmp_path / "git-calls.log"
    script = bin_dir / "git"
    script.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{REAL_GIT}" "$@"\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return GitCalls(log)
