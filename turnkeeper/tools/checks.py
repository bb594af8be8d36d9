"""Run an evidence command for ``record_evidence``, as the write-back will run it again.

``sh -c COMMAND`` in the workspace, stdin closed, at most :data:`CHECK_TIMEOUT_SECONDS`
(past it, the command's whole process group is killed and the exit code is 124, as GNU
``timeout`` reports it and the write-back records it). The output is read as it comes:
only its digest and its last :data:`KEPT_OUTPUT_BYTES` are kept, so a command that
prints gigabytes costs no memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from turnkeeper.errors import FailedPrecondition, Unavailable
from turnkeeper.kernel.limits import output_tail

CHECK_TIMEOUT_SECONDS: Final = 600.0
TIMEOUT_EXIT_CODE: Final = 124
# Of the output: what is kept to cut the tail from, and the lines the agent is shown.
KEPT_OUTPUT_BYTES: Final = 64 * 1024
TAIL_LINES: Final = 40
# How long the output of a command killed at its timeout is still read.
_DRAIN_SECONDS: Final = 2.0
_READ_BYTES: Final = 64 * 1024


@dataclass(frozen=True)
class CheckRun:
    exit_code: int
    # The output's last lines (at most TAIL_LINES, as the kernel records a tail).
    output_tail: str
    output_digest: str
    timed_out: bool
    ran_at: datetime
    seconds: float


def last_lines(text: str, lines: int = TAIL_LINES) -> str:
    kept = text.rstrip("\n").split("\n")
    return "\n".join(kept[-lines:]) if text.strip() else ""


def _kill_group(pid: int) -> None:
    # A group that is gone already is what killing it was for.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


class _Output:
    """A command's output as it is read: its digest, and its last bytes."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.kept = bytearray()

    def read_until(self, fd: int, deadline: float) -> bool:
        """Read ``fd`` until its end (True) or ``deadline`` (False)."""
        while (left := deadline - time.monotonic()) > 0:  # bounded: the deadline
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, _READ_BYTES)
            if not chunk:
                return True
            self.digest.update(chunk)
            self.kept += chunk
            del self.kept[:-KEPT_OUTPUT_BYTES]
        return False


def _start(command: str, workspace: Path) -> subprocess.Popen[bytes]:
    try:
        # Its own process group, so a timeout ends what it started too (and the pipe
        # closes); stdin closed, so a command that asks for input fails instead of hanging.
        return subprocess.Popen(
            ["sh", "-c", command],
            cwd=workspace,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:  # the workspace is gone, or sh cannot be run
        raise FailedPrecondition(
            f"cannot run the command in {workspace}: {exc.strerror or exc}",
            reason="workspace_unavailable",
            details={"workspace": str(workspace)},
        ) from None


def _wait(proc: subprocess.Popen[bytes], deadline: float) -> int | None:
    """The exit code, or None when the deadline passed first (the group is killed then).
    The end of the output does not mean the shell ended (it may have closed its output)."""
    try:
        return proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
    try:
        proc.wait(timeout=_DRAIN_SECONDS)  # SIGKILL: the shell is gone at once
    except subprocess.TimeoutExpired:
        raise Unavailable(
            f"the command outlived its timeout and SIGKILL (pid {proc.pid})",
            reason="check_unkillable",
        ) from None
    return None


def run_check(command: str, workspace: Path, timeout: float = CHECK_TIMEOUT_SECONDS) -> CheckRun:
    """Run ``command`` with ``sh -c`` in ``workspace``; its exit code and output's end."""
    ran_at = datetime.now(UTC)
    started = time.monotonic()
    deadline = started + timeout
    output = _Output()
    proc = _start(command, workspace)
    assert proc.stdout is not None  # stdout=PIPE
    try:
        ended = output.read_until(proc.stdout.fileno(), deadline)
        if not ended:
            _kill_group(proc.pid)
            # What the killed group printed last is still worth showing; a process that
            # left the group and holds the pipe open is not waited for past the drain.
            output.read_until(proc.stdout.fileno(), time.monotonic() + _DRAIN_SECONDS)
    finally:
        proc.stdout.close()
    exit_code = _wait(proc, deadline) if ended else None
    if not ended:
        _wait(proc, time.monotonic())
    timed_out = exit_code is None
    return CheckRun(
        exit_code=TIMEOUT_EXIT_CODE if exit_code is None else exit_code,
        output_tail=last_lines(output_tail(bytes(output.kept))),
        output_digest=output.digest.hexdigest(),
        timed_out=timed_out,
        ran_at=ran_at,
        seconds=time.monotonic() - started,
    )
