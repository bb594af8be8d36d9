"""Adopting, attributing, ending and reaping orphaned descendants (``PR_SET_CHILD_SUBREAPER``).

When a process of a turn dies, its children are re-parented to the nearest
subreaper ancestor instead of init, so the control plane keeps them as children:
they stay in reach and, once dead, are reaped here so no zombies pile up.

The subreaper path of containment (see :mod:`turnkeeper.hosts.containment`): a
process that scrubbed the turn marker (``env -i``) and left the host's tree
(``setsid`` plus its parent's exit) can no longer be found by marker or by descent,
but it is adopted by us. Every adopted orphan — a child of ours that no ``Popen``
owns, in another process session than ours (the control plane's own commands run in
its session) — found while turns are in flight is attributed to the in-flight turns
whose host started no later than the orphan did, and is ended, with its
descendants, when the last of those turns ends. The start time makes this exact for
an orphan adopted between two scans: a turn whose host started after the orphan
cannot have started it. Turns contained by a cgroup are not candidates (their
processes stay in their cgroup), and an orphan inside one of our turn cgroups is
left to that cgroup.

Cost: our children are read from ``/proc/self/task/*/children``, and only while a
turn whose orphans are attributed is in flight; otherwise the reaper thread does one
``waitid(WNOWAIT)`` per interval and scans only when a child has died. The reaper is a
supervised loop: a pass that fails is logged and the next one runs.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import sys
import threading
from dataclasses import dataclass

from turnkeeper.hosts.cgroups import in_our_turn_cgroup
from turnkeeper.hosts.procfs import ProcStat, child_pids, read_marker, read_stat
from turnkeeper.supervision import LoopHealth, Supervised

log = logging.getLogger(__name__)

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


def reap(pid: int) -> int | None:
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return status if got == pid else None


@dataclass
class _Orphan:
    start_time: int
    turns: set[str]  # the in-flight turns it may belong to; ended when the last one ends


class _ChildRegistry:
    """Which of our children belong to a ``Popen`` (never reap those) or were adopted,
    and which turns each adopted orphan may belong to.

    ``waitpid(-1)`` would steal exit statuses from every ``subprocess`` user in the
    process, so the reaper only reaps zombies it can attribute to adoption: children
    seen alive carrying a turn marker or attributed to a turn, or children in another
    session than ours that no host registered (an orphaned ``setsid`` command that
    died before we saw it).
    """

    def __init__(self) -> None:
        # Re-entrant: a host registers its child while holding it as ``spawn_lock``.
        self.lock = threading.RLock()
        self._owned: set[int] = set()
        self._adopted: set[int] = set()
        # turn id -> its host's start time when orphans are attributed to it, None when
        # it is contained otherwise (a cgroup) or we adopt nothing (not a subreaper).
        self._in_flight: dict[str, int | None] = {}
        self._orphans: dict[int, _Orphan] = {}
        self._candidates = 0  # turns in flight that orphans are attributed to
        #: Set while such a turn is in flight: the reaper thread scans only then. A
        #: turn contained otherwise needs no scan: its processes stay in its cgroup and
        #: end with it, and an orphan of its that dies first is in another session
        #: than ours, which the reaper reaps when a dead child shows.
        self.active = threading.Event()

    def register_owned(self, pid: int) -> None:
        with self.lock:
            self._owned.add(pid)

    def unregister_owned(self, pid: int) -> None:
        with self.lock:
            self._owned.discard(pid)

    def is_owned(self, pid: int) -> bool:
        with self.lock:
            return pid in self._owned

    # --- turns in flight --------------------------------------------------------------

    def turn_started(self, turn_id: str, host_start_time: int, *, candidate: bool) -> None:
        """A turn's host runs; with ``candidate`` its orphans are attributed to it."""
        attribute = candidate and is_child_subreaper()
        with self.lock:
            if self._in_flight.get(turn_id) is not None:
                self._candidates -= 1  # started again (a respawn): counted once
            self._in_flight[turn_id] = host_start_time if attribute else None
            if attribute:
                self._candidates += 1
                if not self.active.is_set():  # set() would notify its condition each turn
                    self.active.set()

    def turn_ended(self, turn_id: str, *, end_orphans: bool = True) -> list[tuple[int, int]]:
        """The turn is over: (pid, start time) of the orphans whose last candidate it was.

        A last scan first attributes what was adopted since the previous one. With
        ``end_orphans`` off (a host configured to leave its stragglers) nothing is
        returned and those orphans are simply no longer tracked.
        """
        with self.lock:
            if turn_id not in self._in_flight:
                return []
            if self._in_flight[turn_id] is not None:
                if end_orphans:
                    self._scan()  # while the turn is still a candidate
                self._candidates -= 1
                if not self._candidates:
                    self.active.clear()
            del self._in_flight[turn_id]
            ended: list[tuple[int, int]] = []
            for pid, orphan in list(self._orphans.items()):
                if turn_id not in orphan.turns:
                    continue
                orphan.turns.discard(turn_id)
                if not orphan.turns:
                    del self._orphans[pid]
                    if end_orphans:
                        ended.append((pid, orphan.start_time))
            return ended

    def orphan_turns(self) -> dict[int, set[str]]:
        """pid -> the in-flight turns each attributed orphan may belong to (a copy)."""
        with self.lock:
            return {pid: set(orphan.turns) for pid, orphan in self._orphans.items()}

    # --- scanning ---------------------------------------------------------------------

    def reap_orphans(self) -> list[tuple[int, int]]:
        """Reap dead adopted children, attribute live orphans; (pid, status) reaped."""
        with self.lock:
            return self._scan()

    def _scan(self) -> list[tuple[int, int]]:
        me = os.getpid()
        my_session = os.getsid(0)
        reaped: list[tuple[int, int]] = []
        children = set(child_pids())
        for pid in list(self._orphans):
            if pid not in children:
                del self._orphans[pid]  # ended (and reaped) by someone meanwhile
        for pid in sorted(children):
            stat = read_stat(pid)
            if stat is None or stat.ppid != me or pid in self._owned:
                continue
            if not stat.dead:
                if read_marker(pid) is not None:
                    self._adopted.add(pid)
                if stat.session != my_session:
                    self._attribute(stat)
                continue
            if pid in self._adopted or stat.session != my_session:
                status = reap(pid)
                self._adopted.discard(pid)
                self._orphans.pop(pid, None)
                if status is not None:
                    reaped.append((pid, status))
        return reaped

    def _attribute(self, stat: ProcStat) -> None:
        known = self._orphans.get(stat.pid)
        if known is not None and known.start_time == stat.start_time:
            return
        turns = {
            turn
            for turn, host_start in self._in_flight.items()
            if host_start is not None and host_start <= stat.start_time
        }
        if not turns or in_our_turn_cgroup(stat.pid):
            return  # no candidate (yet); or its turn's cgroup ends it
        self._orphans[stat.pid] = _Orphan(stat.start_time, turns)
        self._adopted.add(stat.pid)


_REGISTRY = _ChildRegistry()
register_owned_child = _REGISTRY.register_owned
unregister_owned_child = _REGISTRY.unregister_owned
is_owned_child = _REGISTRY.is_owned
reap_orphans = _REGISTRY.reap_orphans
turn_started = _REGISTRY.turn_started
turn_ended = _REGISTRY.turn_ended
orphan_turns = _REGISTRY.orphan_turns
#: Hold while spawning a host so the reaper never sees an unregistered child of ours.
spawn_lock = _REGISTRY.lock


def _dead_child_waiting() -> bool:
    """True if some child of ours is a zombie, without reaping it (``WNOWAIT``)."""
    try:
        return os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return False


def enable_child_subreaper() -> bool:
    """Make this process adopt orphaned descendants (``PR_SET_CHILD_SUBREAPER``).

    Returns False where that is not available (non-Linux, or prctl refused).
    """
    if not sys.platform.startswith("linux"):
        log.warning("child subreaper unsupported on %s; orphans go to init", sys.platform)
        return False
    libc = _libc()
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_CHILD_SUBREAPER) failed: errno %d", ctypes.get_errno())
        return False
    return True


# Cached for the process; never cleared: libc's symbols do not change while it runs.
@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def is_child_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    libc = _libc()
    flag = ctypes.c_int(0)
    if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) != 0:
        return False
    return flag.value != 0


class OrphanReaper:
    """A supervised loop (turnkeeper/supervision.py) that attributes and reaps adopted
    orphans every ``interval`` seconds while turns are in flight (see the module
    docstring for when otherwise). A pass that fails is logged and the loop goes on:
    a reaper that died silently would let zombies pile up and orphans outlive turns."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self._loop = Supervised("orphan reaper", self._step)

    def start(self) -> OrphanReaper:
        self._loop.ensure_running()
        return self

    def stop(self) -> None:
        self._loop.stop()

    def health(self) -> LoopHealth:
        return self._loop.health()

    def _step(self, loop: Supervised) -> bool:
        if loop.wait(self.interval):
            return False
        # Scan while turns are in flight (orphans to attribute); otherwise only when a
        # child died and may be an adopted zombie to reap.
        if _REGISTRY.active.is_set() or _dead_child_waiting():
            reap_orphans()
        return True


_reaper: OrphanReaper | None = None


def become_subreaper(reap_interval: float = 0.5) -> bool:
    """Called once by the driver at start: adopt orphans and keep reaping them."""
    global _reaper  # noqa: PLW0603 - one reaper per process, by design
    if not enable_child_subreaper():
        return False
    if _reaper is None:
        _reaper = OrphanReaper(reap_interval).start()
    return True
