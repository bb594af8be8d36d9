"""One thread per turn driver keeps the leases of the sessions whose hosts are running.

A host may run for hours, far longer than a lease; while it runs the driver thread
is busy journaling its events, so another thread renews the session's lease every
third of its length. Starting a thread for each turn cost ~0.16 ms a turn — a
twentieth of a no-op turn — so one thread serves every session of the driver, sleeps
until the earliest renewal is due, and ends after a second with nothing to keep (the
next turn starts it again).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# How long the thread waits for more work before it ends.
IDLE_SECONDS = 1.0

Renew = Callable[[str], bool]  # renew the session's lease; False: fenced off, stop


class LeaseKeeper:
    def __init__(self, renew: Renew, period_seconds: float) -> None:
        self._renew = renew
        self._period = period_seconds
        self._due: dict[str, float] = {}  # session id -> monotonic time of its next renewal
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    @contextmanager
    def keeping(self, session_id: str) -> Iterator[None]:
        """Renew ``session_id``'s lease every period until the block ends."""
        with self._changed:
            self._due[session_id] = time.monotonic() + self._period
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="turnkeeper-lease-keeper", daemon=True
                )
                self._thread.start()
            self._changed.notify()
        try:
            yield
        finally:
            with self._changed:
                self._due.pop(session_id, None)
                self._changed.notify()

    def _run(self) -> None:
        idle_since: float | None = None
        while True:
            with self._changed:
                now = time.monotonic()
                if not self._due:
                    idle_since = idle_since or now
                    if now - idle_since >= IDLE_SECONDS:
                        self._thread = None  # the next ``keeping`` starts a new one
                        return
                    self._changed.wait(IDLE_SECONDS - (now - idle_since))
                    continue
                idle_since = None
                due = [sid for sid, at in self._due.items() if at <= now]
                if not due:
                    self._changed.wait(min(self._due.values()) - now)
                    continue
                for sid in due:
                    self._due[sid] = now + self._period
            # Renew outside the lock: a renewal is a store write.
            for sid in due:
                if not self._renew(sid):
                    with self._changed:
                        self._due.pop(sid, None)
