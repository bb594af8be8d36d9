"""A full disk under ``run``: the typed error, in one line, and no traceback.

The project lives on a small tmpfs of the test's own, filled until only SQLite's
shared-memory file fits: the store opens, and the first write of the run fails with
"database or disk is full". ``run`` exits UNAVAILABLE (9), as it did before the fix;
what the fix changed is stderr, which held two chained tracebacks (sqlite3's error,
then the typed one) from the thread that drove the session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.usage.project import UserProject

RESULT = json.dumps({"kind": "result", "data": {"summary": "done", "todo_done": True}})
# What SQLite needs to open a store in WAL mode: its shared-memory index (32 KiB).
ROOM_LEFT = 32 * 1024


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs mounted for this test alone (unmounted after it)."""
    if not _can_mount():
        pytest.skip("needs root to mount a tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        # Lazy: a process of the test still holding a file there does not keep it.
        subprocess.run(["umount", "--lazy", str(disk)], check=True, capture_output=True)


def _fill(disk: Path, leave: int) -> None:
    """Fill ``disk`` until ``leave`` bytes are free."""
    free = os.statvfs(disk)
    room = free.f_bavail * free.f_frsize
    assert room > leave, room
    with (disk / "filler").open("wb") as filler:
        filler.write(b"\0" * (room - leave))
    free = os.statvfs(disk)
    assert free.f_bavail * free.f_frsize <= leave


def test_run_on_a_full_disk_says_one_typed_error_and_no_traceback(small_disk: Path) -> None:
    project = UserProject(small_disk / "work")
    try:
        agent = project.agent("agent", f"#!/bin/sh\necho '{RESULT}'\n")
        project.tk("goal", "add", "a goal", "--id", "g")
        project.tk("todo", "add", "g", "do it", "--id", "t1")
        config = project.host_config("host", {"command": [str(agent)], "event_format": "jsonl"})
        project.tk("session", "create", "g", "--host", "subprocess", "--host-config", config)
        _fill(small_disk, ROOM_LEFT)

        done = project.tk("run", "--max-turns", "1", expect=9)

        assert "Traceback" not in done.stderr, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("UNAVAILABLE")]
        assert len(errors) == 1, done.stderr
        assert "database or disk is full" in errors[0], done.stderr
    finally:
        project.close()
