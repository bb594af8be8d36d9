"""Finding and ending every process of a turn. Linux only: everything reads ``/proc``.

Agent CLIs start shell commands in process sessions of their own, so a SIGKILL of
the CLI (or of the control plane) leaves them running and re-parented away from
any tree we know. What still finds them:

* the turn's cgroup, where the machine gives us one (:mod:`turnkeeper.hosts.cgroups`):
  every process the host started is in it, whatever it did to its environment or
  session;
* every host process gets ``TURNKEEPER_TURN_ID=<turn id>`` in its environment, and
  ``/proc/<pid>/environ`` of a ``setsid`` grandchild still carries it;
* orphans the control plane adopted as a child subreaper, attributed to the turns
  they may belong to by start time (:mod:`turnkeeper.hosts.subreaper`);
* a process identity is (pid, start time, boot id), so a recycled pid never passes
  for a process we started.

:func:`kill_turn_processes` is the one way a turn's processes end — at host exit, on
``kill_tree()``, and in restart recovery — and it applies all of the above (see
:mod:`turnkeeper.hosts.containment` for how a turn is contained).

Safety rule: we only ever signal a process that is in the turn's cgroup, carries the
turn's marker, is the identified host process, is an orphan attributed to the turn,
or descends from one of those. Signals go through a pidfd opened *before* the start
time is re-checked, so the pid cannot be recycled between check and kill.

On platforms without ``/proc`` every query raises ``FailedPrecondition`` with
reason ``process_tracking_unsupported``; :func:`enable_child_subreaper` returns False.
The reading is :mod:`turnkeeper.hosts.procfs`'s (why not psutil: there); psutil's
``send_signal`` checks a process's identity and then signals its pid, the race a pidfd
closes.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Container

from turnkeeper.errors import InvalidArgument, NotFound
from turnkeeper.host_reports import ProcessIdentity
from turnkeeper.hosts import cgroups, containment, subreaper
from turnkeeper.hosts.base import KilledProcess, KillReport
from turnkeeper.hosts.procfs import (
    PROC,
    ProcStat,
    boot_id,
    children_of,
    process_table,
    read_cmdline,
    read_marker,
    read_stat,
    read_turn_env,
    require_proc,
    signal_exact,
)
from turnkeeper.hosts.subreaper import (
    OrphanReaper,
    become_subreaper,
    enable_child_subreaper,
    is_child_subreaper,
    is_owned_child,
    reap,
    reap_orphans,
    register_owned_child,
    spawn_lock,
    unregister_owned_child,
)

__all__ = [
    "PROC",
    "OrphanReaper",
    "ProcStat",
    "become_subreaper",
    "boot_id",
    "enable_child_subreaper",
    "find_marked_processes",
    "find_session_processes",
    "identify",
    "is_alive",
    "is_child_subreaper",
    "is_same_process",
    "kill_turn_processes",
    "list_descendants",
    "process_table",
    "read_cmdline",
    "read_marker",
    "read_stat",
    "reap_orphans",
    "register_owned_child",
    "spawn_lock",
    "unregister_owned_child",
]

log = logging.getLogger(__name__)


def identify(pid: int, marker: str) -> ProcessIdentity:
    """The identity of a live process; ``NotFound`` if it is already gone."""
    require_proc()
    stat = read_stat(pid)
    if stat is None:
        raise NotFound(f"process {pid} is gone", reason="process_gone")
    return ProcessIdentity(pid=pid, start_time=stat.start_time, boot_id=boot_id(), marker=marker)


def is_same_process(identity: ProcessIdentity) -> bool:
    """True if the pid still names the process we identified (alive or unreaped)."""
    require_proc()
    if identity.boot_id != boot_id():
        return False
    stat = read_stat(identity.pid)
    return stat is not None and stat.start_time == identity.start_time


def is_alive(identity: ProcessIdentity) -> bool:
    """True if the identified process is still running (not a zombie)."""
    if not is_same_process(identity):
        return False
    stat = read_stat(identity.pid)
    return stat is not None and not stat.dead


def list_descendants(pid: int, table: dict[int, ProcStat] | None = None) -> list[int]:
    """Every live descendant of ``pid`` (children first), from one ``/proc`` scan."""
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for stat in table.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    found: list[int] = []
    frontier = [pid]
    while frontier:
        nxt: list[int] = []
        for parent in frontier:
            for child in children.get(parent, []):
                if child not in found and child != pid:
                    found.append(child)
                    nxt.append(child)
        frontier = nxt
    return found


def find_marked_processes(turn_id: str) -> list[int]:
    """Live processes whose environment carries ``TURNKEEPER_TURN_ID=<turn_id>``.

    This is how a restarted control plane finds survivors of its predecessor and
    ``setsid`` grandchildren whose parent died. Ourselves and our ancestors are
    never reported, even if they happen to carry the marker.
    """
    _check_turn_id(turn_id)
    table = process_table()
    protected = _protected_pids(table)
    return sorted(
        pid
        for pid, stat in table.items()
        if pid not in protected and not stat.dead and read_marker(pid) == turn_id
    )


def find_session_processes(session_id: str) -> dict[str, list[int]]:
    """Live processes started for a turn of ``session_id`` (their environment carries
    ``TURNKEEPER_SESSION_ID`` and ``TURNKEEPER_TURN_ID``), by turn id; one read of
    the process table. Ourselves and our ancestors are never reported."""
    _check_turn_id(session_id)
    table = process_table()
    protected = _protected_pids(table)
    found: dict[str, list[int]] = {}
    for pid, stat in sorted(table.items()):
        if pid in protected or stat.dead:
            continue
        marks = read_turn_env(pid)
        if marks is not None and marks[0] == session_id:
            found.setdefault(marks[1], []).append(pid)
    return found


def _check_turn_id(turn_id: str) -> None:
    # An empty or odd marker could match processes that are not a turn's: refuse it.
    # Plain ``in`` tests, not a generator over the characters: this runs every turn.
    odd = "\0" in turn_id or "=" in turn_id or "\n" in turn_id
    if odd or not turn_id.strip() or turn_id != turn_id.strip():
        raise InvalidArgument(f"not a usable turn marker: {turn_id!r}", reason="bad_turn_marker")


def _protected_pids(table: dict[int, ProcStat]) -> set[int]:
    """Never targets: init, kthreadd and kernel threads, ourselves and our ancestors."""
    protected = {0, 1, 2, os.getpid()}
    protected.update(pid for pid, stat in table.items() if stat.ppid == 2)
    pid = os.getpid()
    while pid in table and table[pid].ppid not in protected:
        pid = table[pid].ppid
        protected.add(pid)
    return protected


class _Lineage:
    """Never targets, found without a whole process table: init, kthreadd, ourselves
    and our ancestors (kernel threads are never a turn's descendants or in its cgroup).

    Read from ``/proc`` on the first question, not before: a turn whose host exited
    and left its cgroup empty asks none, and our ancestors' stats cost a read each."""

    def __init__(self) -> None:
        self._pids: set[int] | None = None

    def __contains__(self, pid: object) -> bool:
        if self._pids is None:
            self._pids = _read_lineage()
        return pid in self._pids


def _read_lineage() -> set[int]:
    protected = {0, 1, 2}
    pid = os.getpid()
    while pid not in protected:
        protected.add(pid)
        stat = read_stat(pid)
        if stat is None:
            break
        pid = stat.ppid
    return protected


def _own_table(identity: ProcessIdentity | None, roots: list[int]) -> dict[int, ProcStat]:
    """The host, the given roots and all their descendants, read through each process's
    ``children`` files: the part of ``/proc`` a turn's own processes live in."""
    table: dict[int, ProcStat] = {}
    frontier = list(roots)
    if identity is not None:
        frontier.append(identity.pid)
    while frontier and len(table) < 100_000:
        pid = frontier.pop()
        if pid in table or (stat := read_stat(pid)) is None:
            continue
        table[pid] = stat
        frontier.extend(children_of(pid))
    return table


def _collect_targets(
    turn_id: str,
    identity: ProcessIdentity | None,
    known: dict[int, KilledProcess],
    orphans: list[tuple[int, int]],
    *,
    search_all: bool = True,
) -> dict[int, KilledProcess]:
    protected: Container[int]
    if search_all:
        table = process_table()
        protected = _protected_pids(table)
    else:
        table = _own_table(identity, [*known, *(pid for pid, _ in orphans)])
        protected = _Lineage()
    new: dict[int, KilledProcess] = {}

    def add(pid: int, reason: str) -> None:
        stat = table.get(pid)
        if stat is None or stat.dead or pid in protected or pid in known or pid in new:
            return
        new[pid] = KilledProcess(
            pid=pid, start_time=stat.start_time, reason=reason, cmdline=read_cmdline(pid)
        )

    if identity is not None and is_same_process(identity):
        add(identity.pid, "identity")
    for pid, start_time in orphans:
        if (stat := table.get(pid)) is not None and stat.start_time == start_time:
            add(pid, "orphan")
    if search_all:  # the marker search needs every process; the own table has no strangers
        for pid, stat in table.items():
            if not stat.dead and pid not in protected and read_marker(pid) == turn_id:
                add(pid, "marker")
    # Descendants of anything we target are ours even if they scrubbed the marker.
    roots = [p for p in (*known, *new) if p in table]
    for root in roots:
        for pid in list_descendants(root, table):
            add(pid, "descendant")
    return new


def _end_cgroup(
    turn_id: str, identity: ProcessIdentity | None, timeout: float
) -> tuple[dict[int, KilledProcess], list[int]]:
    """End the turn's cgroup, if it has one (made here, or left by a crashed control
    plane): what it held, and what survived."""
    cgroup = containment.turn_cgroup(turn_id)
    if cgroup is None:
        return {}, []
    host = identity.pid if identity is not None and is_same_process(identity) else None
    ended = cgroups.end(cgroup, _Lineage(), timeout)
    if ended.removed:
        containment.forget(turn_id)
    else:
        log.warning("turn %s: cgroup %s not removed: %s", turn_id, cgroup.path, ended.problem)
    # The reason names the plainest proof: the host, then the marker, then the cgroup.
    killed = {
        pid: KilledProcess(
            pid=pid,
            start_time=m.stat.start_time,
            reason="identity" if pid == host else "marker" if m.marker == turn_id else "cgroup",
            cmdline=m.cmdline,
        )
        for pid, m in ended.members.items()
    }
    return killed, ended.survivors


def kill_turn_processes(
    turn_id: str,
    identity: ProcessIdentity | None = None,
    *,
    timeout: float = 10.0,
    search_all: bool = True,
) -> KillReport:
    """SIGKILL everything of the turn; wait until it is gone. This ends the turn.

    First the turn's cgroup, if any: frozen, killed as a whole, removed. Then the
    host's tree, every process marked with ``turn_id`` and the adopted orphans whose
    last candidate turn this was (with their descendants): frozen with SIGSTOP, the
    scan repeated until it finds no new ones (so a process cannot fork its way out
    between scan and kill), then SIGKILLed. A zombie counts as gone. Zombies that
    are adopted orphans of ours are reaped; the host process itself is left to the
    ``Popen`` that spawned it, so its exit status (e.g. -9) is not lost.

    ``search_all=False`` (a host that just exited, contained by its cgroup or by the
    subreaper) looks only at the turn's own processes — its cgroup, the host's tree,
    its attributed orphans — instead of reading every process on the machine for the
    marker; restart recovery, which may find anything, searches all.
    """
    _check_turn_id(turn_id)
    require_proc()
    deadline = time.monotonic() + timeout
    targets, survivors = _end_cgroup(turn_id, identity, timeout)
    orphans = subreaper.turn_ended(turn_id)
    frozen: dict[int, KilledProcess] = {}
    # Without the marker search, the search starts from the host, what the cgroup held
    # and the orphans: with none of them (a contained host that exited and left its
    # cgroup empty, every turn's usual end) it finds nothing, and is not made.
    searched = search_all or identity is not None or bool(targets) or bool(orphans)
    for _ in range(50 if searched else 0):
        new = _collect_targets(
            turn_id, identity, {**targets, **frozen}, orphans, search_all=search_all
        )
        if not new:
            break
        for t in new.values():
            signal_exact(t.pid, t.start_time, signal.SIGSTOP)
        frozen.update(new)
    for t in frozen.values():
        signal_exact(t.pid, t.start_time, signal.SIGKILL)
    targets.update(frozen)

    pending = dict(targets)
    while pending:
        for pid, t in list(pending.items()):
            stat = read_stat(pid)
            if stat is None or stat.start_time != t.start_time:
                del pending[pid]
            elif stat.dead:
                # Reap only adopted orphans. The identified host is a child some
                # Popen spawned (ours or the caller's): reaping it would steal the
                # exit status that Popen.wait() reports.
                adopted = t.reason != "identity" and not is_owned_child(pid)
                if stat.ppid == os.getpid() and adopted:
                    reap(pid)
                del pending[pid]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    killed = [t for pid, t in targets.items() if pid not in pending]
    left = sorted({*pending, *survivors})
    if left:
        log.warning("turn %s: processes survived SIGKILL: %s", turn_id, left)
    return KillReport(turn_id=turn_id, killed=killed, survivors=left)
