"""Reading Linux ``/proc``: process status, environment markers, the process table,
our own children; and signalling one exact process.

Linux only. Without ``/proc`` the readers that need it raise ``FailedPrecondition``
(reason ``process_tracking_unsupported``) instead of guessing.

Read by hand, not through psutil: a process's identity is its start time in clock
ticks (field 22 of ``stat``), which psutil gives only as float seconds since the epoch,
and its reads cost 4 to 10 times the instructions of these on paths every turn takes
(its ``children()`` reads every process's ``stat``; the ``children`` files read one's).
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from turnkeeper.errors import FailedPrecondition
from turnkeeper.hosts.base import MARKER_ENV, SESSION_ENV

PROC = Path("/proc")
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
_DEAD_STATES = frozenset({"Z", "X", "x"})
_TURN_ENV_NAMES = frozenset({MARKER_ENV.encode(), SESSION_ENV.encode()})


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


# Set once /proc was found: a mounted /proc does not go away under a running process,
# and every turn asks (twice) before it reads a process's status.
_proc_seen: list[bool] = []


def require_proc() -> None:
    if _proc_seen:
        return
    if os.path.exists(f"{PROC}/self/stat"):
        _proc_seen.append(True)
    else:
        raise FailedPrecondition(
            f"process tracking needs Linux /proc (platform {sys.platform!r})",
            reason="process_tracking_unsupported",
        )


# Cached for the process; never cleared: a machine's boot id does not change until it
# reboots, which ends the process.
@functools.cache
def boot_id() -> str:
    require_proc()
    return (PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()


def read_file(path: str) -> bytes:
    """The whole of a small kernel file (``/proc``, a cgroup's). Read with ``os`` calls,
    not ``open()``: the file objects ``open()`` builds (and its ``isatty`` and ``fstat``
    calls) cost three times the read itself, ~15k instructions, several times a turn.
    Raises as ``open()`` does (``FileNotFoundError``, ``ProcessLookupError``, ...)."""
    fd = os.open(path, os.O_RDONLY)  # not inherited by children (PEP 446)
    try:
        chunks = []
        while chunk := os.read(fd, _READ_SIZE):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


_READ_SIZE = 65536
_PROC_DIR = os.fspath(PROC)


def _read_proc_file(pid: int, name: str) -> bytes:
    # A formatted string, not Path joins: these run several times per turn.
    return read_file(f"{_PROC_DIR}/{pid}/{name}")


# /proc/<pid>/stat is one line of at most ~1 KiB (a 16-byte comm, 52 numbers).
_STAT_READ_SIZE = 4096


def _read_stat_line(pid: int) -> bytes:
    """``/proc/<pid>/stat``, read until its line is complete: one read, not the two
    :func:`read_file` needs to see the end (the kernel hands over the whole line at
    once). Read on at every turn's spawn and end, and for each process ended."""
    fd = os.open(f"{_PROC_DIR}/{pid}/stat", os.O_RDONLY)
    try:
        line = os.read(fd, _STAT_READ_SIZE)
        while line and not line.endswith(b"\n"):
            more = os.read(fd, _STAT_READ_SIZE)
            if not more:
                break
            line += more
        return line
    finally:
        os.close(fd)


def read_stat(pid: int) -> ProcStat | None:
    """Parse ``/proc/<pid>/stat``; None if the process is gone."""
    try:
        raw = _read_stat_line(pid)
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
        raw = _read_proc_file(pid, "environ")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    prefix = MARKER_ENV.encode() + b"="
    for entry in raw.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace")
    return None


def read_turn_env(pid: int) -> tuple[str, str] | None:
    """The ``(TURNKEEPER_SESSION_ID, TURNKEEPER_TURN_ID)`` of a process started for a
    turn, if its environment carries both and is readable."""
    try:
        raw = _read_proc_file(pid, "environ")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    found: dict[bytes, str] = {}
    for entry in raw.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name in _TURN_ENV_NAMES:
            found[name] = value.decode(errors="replace")
    session, turn = found.get(SESSION_ENV.encode()), found.get(MARKER_ENV.encode())
    return (session, turn) if session and turn else None


def read_cmdline(pid: int) -> str:
    try:
        raw = _read_proc_file(pid, "cmdline")
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


def children_of(pid: int) -> list[int]:
    """The children of ``pid`` from ``/proc/<pid>/task/*/children`` ([] once it is gone).

    Where the kernel has no ``children`` files, a table scan answers instead."""
    tasks = PROC / str(pid) / "task"
    try:
        tids = os.listdir(tasks)
    except OSError:
        return []
    found: list[int] = []
    for tid in tids:
        try:
            found.extend(int(p) for p in (tasks / tid / "children").read_text().split())
        except FileNotFoundError:
            if not (tasks / tid).exists():
                continue  # the thread ended meanwhile
            return sorted(p for p, stat in process_table().items() if stat.ppid == pid)
        except OSError:
            continue
    return found


def child_pids() -> list[int]:
    """The pids of this process's children, from ``/proc/self/task/*/children``.

    Much cheaper than a whole process table when only our own children matter (the
    orphans a subreaper adopted). Falls back to a table scan where the kernel has no
    ``children`` files.
    """
    require_proc()
    me = os.getpid()
    tasks = PROC / str(me) / "task"
    if not (tasks / str(me) / "children").exists():
        return sorted(pid for pid, stat in process_table().items() if stat.ppid == me)
    found: set[int] = set()
    for tid in os.listdir(tasks):
        try:
            found.update(int(p) for p in (tasks / tid / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError):
            continue  # that thread ended meanwhile; its children went to another
    return sorted(found)


def signal_exact(pid: int, start_time: int, sig: int) -> bool:
    """Send ``sig`` only if ``pid`` still has ``start_time``; the pidfd closes the race.

    The pidfd is opened *before* the start time is re-checked, so the pid cannot be
    recycled between check and signal.
    """
    fd: int | None = None
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except OSError:
        fd = None  # kernel without pidfd: a best-effort re-check just before kill
    try:
        stat = read_stat(pid)
        if stat is None or stat.start_time != start_time:
            return False
        if fd is not None:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        if fd is not None:
            os.close(fd)
