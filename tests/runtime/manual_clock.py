"""A :class:`turnkeeper.runtime.turn.clock.Clock` whose time passes only when a test says."""

from __future__ import annotations

import threading


class ManualClock:
    """Time that passes only when told to (:meth:`advance`)."""

    def __init__(self, start: float = 1_000.0) -> None:
        self._now = start
        self._lock = threading.Condition()
        self._waiting: set[threading.Condition] = set()

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def wait(self, condition: threading.Condition, timeout: float, since: float) -> None:
        with self._lock:
            if self._now >= since + timeout or self._now != since:
                return  # time moved since the caller looked: it looks again
            self._waiting.add(condition)
            self._lock.notify_all()
        try:
            # Woken by the caller's own notify or by advance(), which cannot notify
            # before this wait releases the condition's lock.
            condition.wait()
        finally:
            with self._lock:
                self._waiting.discard(condition)

    def until_waiting(self, timeout: float = 10.0) -> None:
        """Block until a thread waits on this clock (a bound only for a broken test)."""
        with self._lock:
            assert self._lock.wait_for(lambda: bool(self._waiting), timeout), "nobody waits"

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
            waiting = list(self._waiting)
            self._waiting.clear()
        for condition in waiting:
            with condition:
                condition.notify_all()
