"""record_evidence's command runner: bounded in time and in memory, like the write-back's."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from turnkeeper.errors import FailedPrecondition
from turnkeeper.tools.checks import KEPT_OUTPUT_BYTES, run_check


def test_exit_code_tail_and_digest_of_the_whole_output(tmp_path: Path) -> None:
    run = run_check("seq 1 100000; echo done >&2; exit 7", tmp_path)
    assert (run.exit_code, run.timed_out) == (7, False)
    lines = run.output_tail.splitlines()
    assert len(lines) == 40 and lines[-2:] == ["100000", "done"]
    whole = "".join(f"{n}\n" for n in range(1, 100001)) + "done\n"
    assert len(whole) > KEPT_OUTPUT_BYTES  # the digest covers more than what was kept
    assert run.output_digest == hashlib.sha256(whole.encode()).hexdigest()


def test_it_runs_in_the_workspace_with_stdin_closed(tmp_path: Path) -> None:
    run = run_check("pwd; cat; echo read-nothing", tmp_path)
    assert run.exit_code == 0
    assert run.output_tail.splitlines() == [str(tmp_path), "read-nothing"]


def test_a_timeout_kills_everything_the_command_started(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    started = time.monotonic()
    run = run_check(f"sleep 60 & echo $! > {pids}; echo waiting; sleep 60", tmp_path, timeout=1)
    assert time.monotonic() - started < 10
    assert (run.exit_code, run.timed_out) == (124, True)
    assert run.output_tail == "waiting"
    background = int(pids.read_text())
    deadline = time.monotonic() + 5
    while _alive(background) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(background)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (its parent, the killed shell, is gone: it waits for init) is dead too.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    status = stat.rsplit(")", 1)[1].split()[0]
    return status != "Z"


def test_a_missing_workspace_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FailedPrecondition) as refused:
        run_check("true", tmp_path / "gone")
    assert refused.value.reason == "workspace_unavailable"
