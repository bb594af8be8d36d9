"""The hosts a turn driver runs now: which turn of which session, since when, and how
to end all of them at once.

Kept apart from the driver (runtime/turn/driver.py), which takes one turn through its
steps: this is the view across every turn in flight that ``run``'s display and a
second SIGINT read (runtime/control/stopping.py), with its own lock, and it knows
nothing of a turn's steps. Once :meth:`RunningHosts.kill_all` has run, the process is
exiting: the driver records no host's end from then on (the host died of our kill, not
of its own failure).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from functools import partial

from turnkeeper.hosts import HostRun
from turnkeeper.runtime.turn.brackets import Bracket

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EndedHosts:
    """What :meth:`RunningHosts.kill_all` did: the turns whose host it ended, and those
    whose host it could not end (a process survived, or ending it raised): the caller
    says so, and the next run's recovery ends what is left by the turn's marker."""

    ended: list[str]
    not_ended: list[str]


@dataclass(frozen=True)
class RunningHost:
    turn_id: str
    session_id: str
    pid: int
    seconds: float


class RunningHosts:
    """The hosts running now, by turn id; thread-safe (each session's turn runs on a
    thread of its own)."""

    def __init__(self) -> None:
        self._running: dict[str, tuple[str, HostRun, float]] = {}
        self._lock = threading.Lock()
        self._exiting = threading.Event()
        self._why: dict[str, str] = {}  # turn id -> why :meth:`end_all` ended its host

    def tracking(self, sid: str, turn_id: str, run: HostRun) -> Bracket:
        """``run`` is listed as turn ``turn_id`` of session ``sid`` while in the block."""
        return Bracket(partial(self._track, sid, turn_id, run), partial(self._untrack, turn_id))

    def _track(self, sid: str, turn_id: str, run: HostRun) -> None:
        with self._lock:
            self._running[turn_id] = (sid, run, time.monotonic())

    def _untrack(self, turn_id: str) -> None:
        with self._lock:
            self._running.pop(turn_id, None)

    def exiting(self) -> bool:
        """Whether :meth:`kill_all` has run: the process exits by its signal soon."""
        return self._exiting.is_set()

    def listed(self) -> list[RunningHost]:
        """The hosts running now: which turn of which session, for how long."""
        now = time.monotonic()
        with self._lock:
            items = list(self._running.items())
        return [
            RunningHost(turn_id=tid, session_id=sid, pid=run.identity.pid, seconds=now - since)
            for tid, (sid, run, since) in items
        ]

    def kill(self, turn_id: str) -> bool:
        """End turn ``turn_id``'s host's whole process tree; whether it is gone (False
        also when no such host runs now)."""
        with self._lock:
            entry = self._running.get(turn_id)
        if entry is None:
            return False
        try:
            return entry[1].kill_tree().complete
        except Exception:  # a host's own error: logged, and the caller's record says so
            log.exception("turn %s: ending the host's process tree failed", turn_id)
            return False

    def end_all(self, why: str) -> EndedHosts:
        """End every running host's whole process tree while the process goes on (a
        graceful stop's bound: runtime/control/stopping.py): each turn is recorded as
        its host ended, the receipt saying ``why`` (:meth:`why_ended`)."""
        with self._lock:
            turn_ids = list(self._running)
            self._why.update(dict.fromkeys(turn_ids, why))
        ended: list[str] = []
        not_ended: list[str] = []
        for turn_id in turn_ids:
            gone = self.kill(turn_id)
            with self._lock:
                finished = turn_id not in self._running  # ended on its own meanwhile
            (ended if gone or finished else not_ended).append(turn_id)
        return EndedHosts(ended, not_ended)

    def why_ended(self, turn_id: str) -> str | None:
        """Why :meth:`end_all` ended turn ``turn_id``'s host (None: it did not); asked
        once, by the driver when the host has ended."""
        with self._lock:
            return self._why.pop(turn_id, None)

    def kill_all(self) -> EndedHosts:
        """End every running host's whole process tree."""
        self._exiting.set()
        with self._lock:
            items = list(self._running.items())
        ended: list[str] = []
        not_ended: list[str] = []
        for turn_id, (_, run, _) in items:
            try:
                complete = run.kill_tree().complete
            # Any host's own error (a plugin's too): one tree that cannot be ended must
            # not spare the others, and the caller names it.
            except Exception:
                log.exception("turn %s: ending the host's process tree failed", turn_id)
                complete = False
            (ended if complete else not_ended).append(turn_id)
        return EndedHosts(ended, not_ended)
