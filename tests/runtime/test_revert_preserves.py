"""What a revert overwrites or removes is moved aside first, and named in its result.

The project of test_revert.py: ``t1`` completed with its snapshot, then the crashed
turn changed, added and removed files and grew the host session file. After the
revert every one of those — and the host session file it replaced — is in the
preserve directory in ``.git/turnkeeper/``, with what it held, and ``session revert
--json`` and ``operation show`` list them; a retry killed at each revert step
preserves each exactly once.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.runtime.crash_support import CrashProject
from tests.runtime.test_revert import (
    artifact,
    assert_reverted,
    damage_and_crash,
    project,
    snapshot_of,
)
from turnkeeper.crashpoints import REVERT_POINTS

__all__ = ["project"]  # the fixture, shared with test_revert.py

DAMAGED = ["README", "b.txt", "junk/x.txt"]  # overwritten, overwritten, added


def _preserved(project: CrashProject, paths: list[str]) -> None:
    name = artifact(project).name
    assert sorted(paths) == sorted([*DAMAGED, f"host session file: {name}"])


def test_a_revert_moves_aside_what_it_replaces(project: CrashProject) -> None:
    tree, copy = snapshot_of(project)
    damage_and_crash(project)
    done = project.cli("session", "revert", project.session_id, "--request-id", "r1", "--json")
    preserved = done.json()["preserved"]
    _preserved(project, preserved["paths"])
    assert_reverted(project, tree, copy)
    kept = Path(preserved["directory"])
    assert kept.is_relative_to(project.repo / ".git" / "turnkeeper" / "preserved")
    assert (kept / "files" / "README").read_text() == "overwritten\n"
    assert (kept / "files" / "junk" / "x.txt").read_text() == "x\n"
    grown = (kept / "host-artifact" / artifact(project).name).read_bytes()
    assert grown.startswith(copy) and grown.endswith(b'"partial": tr')
    shown = project.cli("operation", "show", "r1", "--json").json()
    assert shown["preserved"] == preserved


@pytest.mark.parametrize("point", REVERT_POINTS)
def test_a_revert_killed_at_each_step_preserves_once(project: CrashProject, point: str) -> None:
    tree, copy = snapshot_of(project)
    damage_and_crash(project)
    args = ("session", "revert", project.session_id, "--request-id", "r1", "--json")
    assert project.cli(*args, crash_at=point).returncode == -signal.SIGKILL
    retried = project.cli(*args).json()
    assert_reverted(project, tree, copy)
    _preserved(project, retried["preserved"]["paths"])
    kept = Path(retried["preserved"]["directory"])
    assert not (kept / "files.1").exists()  # nothing moved twice
