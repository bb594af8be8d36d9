"""Adopting and reaping orphaned descendants (``PR_SET_CHILD_SUBREAPER``).

When an agent CLI dies, its ``setsid`` shell children are re-parented to the
nearest subreaper ancestor instead of init, so the control plane keeps them as
children: they stay in reach and, once dead, are reaped here so no zombies pile up.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading

from turnkeeper.hosts._procfs import process_table, read_marker

log = logging.getLogger(__name__)

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


def reap(pid: int) -> int | None:
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return status if got == pid else None


class _ChildRegistry:
    """Which of our children belong to a ``Popen`` (never reap those) or were adopted.

    ``waitpid(-1)`` would steal exit statuses from every ``subprocess`` user in the
    process, so the reaper only reaps zombies it can attribute to adoption: children
    seen alive carrying a turn marker, or children in another session than ours that
    no host registered (an orphaned ``setsid`` command that died before we saw it).
    """

    def __init__(self) -> None:
        # Re-entrant: a host registers its child while holding it as ``spawn_lock``.
        self.lock = threading.RLock()
        self._owned: set[int] = set()
        self._adopted: set[int] = set()

    def register_owned(self, pid: int) -> None:
        with self.lock:
            self._owned.add(pid)

    def unregister_owned(self, pid: int) -> None:
        with self.lock:
            self._owned.discard(pid)

    def is_owned(self, pid: int) -> bool:
        with self.lock:
            return pid in self._owned

    def reap_orphans(self) -> list[tuple[int, int]]:
        me = os.getpid()
        my_session = os.getsid(0)
        reaped: list[tuple[int, int]] = []
        with self.lock:
            for stat in process_table().values():
                if stat.ppid != me or stat.pid in self._owned:
                    continue
                if not stat.dead:
                    if read_marker(stat.pid) is not None:
                        self._adopted.add(stat.pid)
                    continue
                if stat.pid in self._adopted or stat.session != my_session:
                    status = reap(stat.pid)
                    self._adopted.discard(stat.pid)
                    if status is not None:
                        reaped.append((stat.pid, status))
        return reaped


_REGISTRY = _ChildRegistry()
register_owned_child = _REGISTRY.register_owned
unregister_owned_child = _REGISTRY.unregister_owned
is_owned_child = _REGISTRY.is_owned
reap_orphans = _REGISTRY.reap_orphans
#: Hold while spawning a host so the reaper never sees an unregistered child of ours.
spawn_lock = _REGISTRY.lock


def enable_child_subreaper() -> bool:
    """Make this process adopt orphaned descendants (``PR_SET_CHILD_SUBREAPER``).

    Returns False where that is not available (non-Linux, or prctl refused).
    """
    if not sys.platform.startswith("linux"):
        log.warning("child subreaper unsupported on %s; orphans go to init", sys.platform)
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_CHILD_SUBREAPER) failed: errno %d", ctypes.get_errno())
        return False
    return True


def is_child_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    flag = ctypes.c_int(0)
    if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) != 0:
        return False
    return flag.value != 0


class OrphanReaper:
    """A daemon thread that reaps adopted orphans every ``interval`` seconds."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="turnkeeper-reaper", daemon=True)

    def start(self) -> OrphanReaper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                reap_orphans()
            except Exception:  # a reaper that dies silently would let zombies pile up
                log.exception("orphan reaper pass failed")


_reaper: OrphanReaper | None = None


def become_subreaper(reap_interval: float = 0.5) -> bool:
    """Called once by the driver at start: adopt orphans and keep reaping them."""
    global _reaper  # noqa: PLW0603 - one reaper per process, by design
    if not enable_child_subreaper():
        return False
    if _reaper is None:
        _reaper = OrphanReaper(reap_interval).start()
    return True
