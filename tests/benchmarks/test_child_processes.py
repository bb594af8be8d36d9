"""The real-turn benchmark counts the processes a turn starts from ``strace -ff``
traces (benchmarks/child_processes.py); its ``--smoke`` run leaves the traced runs
out, so the counting is checked here, on a real trace of a real shell and git."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from benchmarks.child_processes import STRACE, count_traces


@pytest.mark.skipif(STRACE is None, reason="strace is not installed")
def test_counts_each_process_by_the_programs_it_ran(tmp_path: Path) -> None:
    # ``; exit 0`` keeps the shell from exec-ing its last command itself; ``exec git``
    # makes a shell that runs git in its own process, as the host's launcher does.
    script = (
        "git -c core.abbrev=7 hash-object --stdin </dev/null >/dev/null; "
        "git --no-pager hash-object --stdin </dev/null >/dev/null; "
        "sh -c 'exec git version >/dev/null'; exit 0"
    )
    assert STRACE is not None
    strace = [STRACE, "-f", "-ff", "-s", "256", "-e", "trace=execve", "-o", str(tmp_path / "trace")]
    subprocess.run(
        [*strace, "sh", "-c", script],
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert count_traces(tmp_path) == {
        "sh": 1,
        "git hash-object": 2,  # -c's value and --no-pager are skipped
        "sh > git version": 1,
    }


def test_no_traces_count_nothing(tmp_path: Path) -> None:
    (tmp_path / "trace.1").write_text('execve("/usr/bin/git", ["git"], 0x0) = -1 ENOENT\n')
    assert count_traces(tmp_path) == {}
