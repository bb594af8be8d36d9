"""How much CPU a turn's process tree used between two looks (Linux ``/proc``).

A host that prints nothing may be hung, or may be running a long build or test suite
in a child process: the driver's silence watch (runtime/turn/silence.py) tells the two
apart by the CPU the host process and its descendants used. Each look walks the tree
from the host process down (``/proc/<pid>/task/*/children``: only the tree's own
processes are read, not the whole process table) and reads each process's
``utime + stime + cutime + cstime``: the children's fields count the CPU of short-lived
processes (a compiler per file) that started and were reaped between two looks.

A process is keyed by (pid, start time), so a recycled pid never counts another's CPU,
and only what each process used since the last look is added up: a process that left
the tree takes nothing back. Not through psutil: its ``children()`` reads the whole
process table at every look, and its start time is not the ticks a key is made of.
"""

from __future__ import annotations

import os
from typing import Final

from turnkeeper.errors import FailedPrecondition
from turnkeeper.host_reports import ProcessIdentity
from turnkeeper.hosts.procfs import boot_id, children_of, read_file

# Clock ticks per second of the times in /proc/<pid>/stat.
CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK")
# The most processes one look reads: a fork bomb must not make a look unbounded.
MAX_TREE_PROCESSES: Final = 4096

_Key = tuple[int, int]  # (pid, start time)


def _cpu_of(pid: int) -> tuple[int, int] | None:
    """(start time, CPU ticks incl. reaped children's) of ``pid``; None once it is gone."""
    try:
        raw = read_file(f"/proc/{pid}/stat")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    if b")" not in raw:  # read as the process ended: nothing left to count
        return None
    # comm (field 2) may hold spaces and parentheses: the fields after the last ')'.
    rest = raw[raw.rindex(b")") + 2 :].split()
    # rest[0] is field 3; utime..cstime are fields 14-17, starttime is field 22.
    ticks = int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])
    return int(rest[19]), ticks


class TreeCpu:
    """The CPU the tree under one identified process used, look by look."""

    def __init__(self, root: ProcessIdentity) -> None:
        self._root = root
        self._seen: dict[_Key, int] = {}

    def _tree(self) -> dict[_Key, int] | None:
        """Ticks of every process of the tree now; None when the root process is not
        this machine's, not visible here, or gone."""
        try:
            if self._root.boot_id != boot_id():
                return None
        except FailedPrecondition:  # no /proc: nothing to measure
            return None
        root = _cpu_of(self._root.pid)
        if root is None or root[0] != self._root.start_time:
            return None
        found: dict[_Key, int] = {(self._root.pid, root[0]): root[1]}
        visited = {self._root.pid}
        frontier = [self._root.pid]
        # Bounded: each pid is visited once, and at most MAX_TREE_PROCESSES of them.
        while frontier and len(visited) < MAX_TREE_PROCESSES:
            pid = frontier.pop()
            for child in children_of(pid):
                if child in visited or len(visited) >= MAX_TREE_PROCESSES:
                    continue
                visited.add(child)
                cpu = _cpu_of(child)
                if cpu is not None:
                    found[(child, cpu[0])] = cpu[1]
                    frontier.append(child)
        return found

    def used_seconds(self) -> float | None:
        """CPU seconds the tree used since the previous call (the first call: since
        each of its processes started); None when the tree cannot be seen."""
        now = self._tree()
        if now is None:
            return None
        seen = self._seen
        used = sum(max(0, ticks - seen.get(key, 0)) for key, ticks in now.items())
        self._seen = now
        return used / CLOCK_TICKS
