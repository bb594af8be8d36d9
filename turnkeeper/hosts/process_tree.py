"""Finding and ending every process of a turn. Linux only: everything reads ``/proc``.

Agent CLIs start shell commands in process sessions of their own, so a SIGKILL of
the CLI (or of the control plane) leaves them running and re-parented away from
any tree we know. Two facts let us still find them:

* every host process gets ``TURNKEEPER_TURN_ID=<turn id>`` in its environment, and
  ``/proc/<pid>/environ`` of a ``setsid`` grandchild still carries it;
* a process identity is (pid, start time, boot id), so a recycled pid never passes
  for a process we started.

Safety rule: we only ever signal a process that carries the turn's marker, is the
identified host process, or descends from one of those. Signals go through a pidfd
opened *before* the start time is re-checked, so the pid cannot be recycled between
check and kill.

On platforms without ``/proc`` every query raises ``FailedPrecondition`` with
reason ``process_tracking_unsupported``; :func:`enable_child_subreaper` returns False.
"""

from __future__ import annotations

import logging
import os
import signal
import time

from turnkeeper.errors import InvalidArgument, NotFound
from turnkeeper.hosts._procfs import (
    PROC,
    ProcStat,
    boot_id,
    process_table,
    read_cmdline,
    read_marker,
    read_stat,
    require_proc,
)
from turnkeeper.hosts.base import KilledProcess, KillReport, ProcessIdentity
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


def _check_turn_id(turn_id: str) -> None:
    # An empty or odd marker could match processes that are not a turn's: refuse it.
    if not turn_id.strip() or any(c in turn_id for c in "\0=\n") or turn_id != turn_id.strip():
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


def _signal_exact(pid: int, start_time: int, sig: int) -> bool:
    """Send ``sig`` only if ``pid`` still has ``start_time``; the pidfd closes the race."""
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


def _collect_targets(
    turn_id: str, identity: ProcessIdentity | None, known: dict[int, KilledProcess]
) -> dict[int, KilledProcess]:
    table = process_table()
    protected = _protected_pids(table)
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
    for pid, stat in table.items():
        if not stat.dead and pid not in protected and read_marker(pid) == turn_id:
            add(pid, "marker")
    # Descendants of anything we target are ours even if they scrubbed the marker.
    roots = [p for p in (*known, *new) if p in table]
    for root in roots:
        for pid in list_descendants(root, table):
            add(pid, "descendant")
    return new


def kill_turn_processes(
    turn_id: str, identity: ProcessIdentity | None = None, *, timeout: float = 10.0
) -> KillReport:
    """SIGKILL the host's tree and every process marked with ``turn_id``; wait until gone.

    Targets are first frozen with SIGSTOP and the scan repeated until it finds no
    new ones, so a process cannot fork its way out between scan and kill. A zombie
    counts as gone. Zombies that are adopted orphans of ours are reaped; the host
    process itself is left to the ``Popen`` that spawned it, so its exit status
    (e.g. -9) is not lost.
    """
    _check_turn_id(turn_id)
    require_proc()
    targets: dict[int, KilledProcess] = {}
    for _ in range(50):
        new = _collect_targets(turn_id, identity, targets)
        if not new:
            break
        for t in new.values():
            _signal_exact(t.pid, t.start_time, signal.SIGSTOP)
        targets.update(new)
    for t in targets.values():
        _signal_exact(t.pid, t.start_time, signal.SIGKILL)

    deadline = time.monotonic() + timeout
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
    if pending:
        log.warning("turn %s: processes survived SIGKILL: %s", turn_id, sorted(pending))
    return KillReport(turn_id=turn_id, killed=killed, survivors=sorted(pending))
