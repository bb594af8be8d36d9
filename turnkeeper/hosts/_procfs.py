"""Reading Linux ``/proc``: process status, environment markers, the process table.

Linux only. Without ``/proc`` the readers that need it raise ``FailedPrecondition``
(reason ``process_tracking_unsupported``) instead of guessing.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from turnkeeper.errors import FailedPrecondition
from turnkeeper.hosts.base import MARKER_ENV

PROC = Path("/proc")
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
_DEAD_STATES = frozenset({"Z", "X", "x"})


@dataclass(frozen=True)
class ProcStat:
    pid: int
    state: str
    ppid: int
    pgrp: int
    session: int
    start_time: int

    @property
    def dead(self) -> bool:
        return self.state in _DEAD_STATES


def require_proc() -> None:
    if not (PROC / "self" / "stat").exists():
        raise FailedPrecondition(
            f"process tracking needs Linux /proc (platform {sys.platform!r})",
            reason="process_tracking_unsupported",
        )


@functools.cache
def boot_id() -> str:
    require_proc()
    return (PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()


def read_stat(pid: int) -> ProcStat | None:
    """Parse ``/proc/<pid>/stat``; None if the process is gone."""
    try:
        raw = (PROC / str(pid) / "stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    rest = raw[raw.rindex(b")") + 2 :].split()
    # rest[0] is field 3 (state); field 22 (starttime) is rest[19].
    return ProcStat(
        pid=pid,
        state=rest[0].decode(),
        ppid=int(rest[1]),
        pgrp=int(rest[2]),
        session=int(rest[3]),
        start_time=int(rest[19]),
    )


def read_marker(pid: int) -> str | None:
    """The ``TURNKEEPER_TURN_ID`` in a process's environment, if any and readable."""
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    prefix = MARKER_ENV.encode() + b"="
    for entry in raw.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace")
    return None


def read_cmdline(pid: int) -> str:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")


def process_table() -> dict[int, ProcStat]:
    require_proc()
    table: dict[int, ProcStat] = {}
    for name in os.listdir(PROC):
        if name.isdigit():
            stat = read_stat(int(name))
            if stat is not None:
                table[stat.pid] = stat
    return table
