"""Running many sessions at once: one thread per session, a bounded number of turns.

Each session is driven by a thread of its own, so its turns stay strictly in order
while every other session's turn runs beside it; the threads spend their time
waiting on hosts and on the store's group commit (which many turns share), not
holding the interpreter. :class:`TurnSlots` bounds how many hosts run at once and
how many turns a run may start in all (``run --max-turns``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from turnkeeper.errors import TurnkeeperError

log = logging.getLogger(__name__)

# How often a thread waiting for a free slot looks whether the run is stopping.
_SLOT_WAIT_SECONDS = 0.5


class TurnSlots:
    """At most ``concurrency`` turns running, at most ``budget`` turns in all.

    A count under one lock, not a semaphore: every turn takes and gives back a slot, and
    a semaphore's acquire with a timeout is a condition's wait dressed up, paid even
    when a slot is free. The condition is waited on, and told, only while no slot is."""

    def __init__(self, concurrency: int, budget: int | None, stop: threading.Event) -> None:
        self._concurrency = concurrency
        self._free = concurrency
        self._budget = budget
        self._started = 0
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self._waiting = 0  # threads waiting for a free slot
        self._stop = stop

    @property
    def started(self) -> int:
        with self._lock:
            return self._started

    def spent(self) -> bool:
        with self._lock:
            return self._budget is not None and self._started >= self._budget

    def take(self) -> bool:
        """Wait for a free slot and count the turn; False if the budget is spent or the
        run is stopping (then nothing was taken)."""
        with self._lock:
            while self._free == 0:
                if self._stop.is_set():
                    return False
                self._waiting += 1
                try:
                    self._freed.wait(_SLOT_WAIT_SECONDS)
                finally:
                    self._waiting -= 1
            if self._stop.is_set() or (self._budget is not None and self._started >= self._budget):
                return False
            self._free -= 1
            self._started += 1
        return True

    def give_back(self) -> None:
        with self._lock:
            if self._free >= self._concurrency:
                raise ValueError("a turn slot given back that was not taken")
            self._free += 1
            if self._waiting:
                self._freed.notify()


@dataclass
class SessionThreads:
    """The threads of one run, and the errors they met (the caller raises the first)."""

    errors: list[BaseException] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run_each(self, session_ids: Sequence[str], drive: Callable[[str], None]) -> None:
        """``drive(session_id)`` for every session, each in its own thread; returns when
        all have ended. The wait is on an event, so a signal handler still runs."""
        if not session_ids:
            return
        left = [len(session_ids)]
        all_done = threading.Event()

        def body(sid: str) -> None:
            try:
                drive(sid)
            except BaseException as error:  # recorded; the first is raised by the caller
                with self._lock:
                    first = not self.errors
                    self.errors.append(error)
                # A SystemExit is the control plane exiting on purpose (a second signal
                # ended the hosts), not a failure to show. A typed error (a full disk,
                # a database away) is said in one line, never as a traceback: the
                # first by the caller that raises it, any other here.
                if isinstance(error, TurnkeeperError):
                    if not first:
                        log.warning("session %s: stopped: %s", sid, error.message)
                elif not isinstance(error, SystemExit):
                    log.exception("session %s: driving it failed", sid)
            finally:
                with self._lock:
                    left[0] -= 1
                    if left[0] == 0:
                        all_done.set()

        for sid in session_ids:
            threading.Thread(
                target=body, args=(sid,), name=f"turnkeeper-session-{sid[:8]}", daemon=True
            ).start()
        all_done.wait()
