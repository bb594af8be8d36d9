"""One thread keeps every session lease a controller holds, for as long as it holds it.

A host may run for hours, far longer than a lease, and while one session's turn runs
the controller's other sessions wait their turn: every lease the controller holds must
be renewed meanwhile, or one long turn costs the other sessions their leases and the
controller fences itself off (``lease_expired``). So a lease is *held* from the moment
it is acquired until it is released (:meth:`LeaseKeeper.hold` / :meth:`drop`), and a
block may also keep one for its own duration (:meth:`keeping`, used by the driver
around a running host); holds are counted, so both may overlap.

Starting a thread for each turn cost ~0.16 ms a turn — a twentieth of a no-op turn —
so one thread serves every session, sleeps until the earliest renewal is due
(a third of the lease), and ends after a second with nothing to keep (the next hold
starts it again).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from functools import partial

from turnkeeper.errors import TurnkeeperError, Unavailable
from turnkeeper.kernel.session import LeaseToken, RenewLease
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.turn.brackets import Bracket
from turnkeeper.runtime.turn.clock import SYSTEM_CLOCK, Clock

# How long a session lease lasts unless renewed (a keeper renews it every third).
LEASE_SECONDS = 120.0
# How long the thread waits for more work before it ends.
IDLE_SECONDS = 1.0

Renew = Callable[[str], bool]  # renew the session's lease; False: fenced off, stop


def renewing(
    sessions: SessionService, token: Callable[[str], LeaseToken], lease_seconds: float
) -> Renew:
    """The renewal of a session's lease under ``token(session_id)``, for ``lease_seconds``
    from now: what every keeper of leases on a session stream does."""

    def renew(session_id: str) -> bool:
        until = sessions.now() + timedelta(seconds=lease_seconds)
        try:
            sessions.execute(session_id, RenewLease(lease=token(session_id), expires_at=until))
        except Unavailable:
            return True  # the database is away for now: keep trying, the lease may outlast it
        except (TurnkeeperError, KeyError):
            return False  # fenced off, store gone, lease given up: the holder's writes say so
        return True

    return renew


class LeaseKeeper:
    def __init__(self, renew: Renew, period_seconds: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self._renew = renew
        self._period = period_seconds
        self._clock = clock
        self._due: dict[str, float] = {}  # session id -> monotonic time of its next renewal
        self._holds: dict[str, int] = {}  # session id -> how many holders keep it
        # The condition's own lock, taken directly where nothing waits or is told (a
        # hold of a lease already kept: the driver's around every host).
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None

    def hold(self, session_id: str) -> None:
        """Renew ``session_id``'s lease every period until as many :meth:`drop` calls."""
        with self._lock:
            self._holds[session_id] = self._holds.get(session_id, 0) + 1
            if session_id in self._due:
                return  # renewed already: nothing changes, nothing to wake the thread for
            self._due[session_id] = self._clock.monotonic() + self._period
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="turnkeeper-lease-keeper", daemon=True
                )
                self._thread.start()
            self._changed.notify()

    def drop(self, session_id: str) -> None:
        with self._lock:
            left = self._holds.get(session_id, 0) - 1
            if left > 0:
                self._holds[session_id] = left
                return
            self._holds.pop(session_id, None)
            if self._due.pop(session_id, None) is not None and not self._due:
                self._changed.notify()  # nothing left to keep: the thread may idle out

    def held(self) -> list[str]:
        """The sessions being renewed now (a refused renewal removes its session)."""
        with self._changed:
            return list(self._due)

    def keeping(self, session_id: str) -> Bracket:
        """Renew ``session_id``'s lease every period until the block ends."""
        return Bracket(partial(self.hold, session_id), partial(self.drop, session_id))

    def _run(self) -> None:
        idle_since: float | None = None
        while True:
            with self._changed:
                now = self._clock.monotonic()
                if not self._due:
                    idle_since = idle_since or now
                    if now - idle_since >= IDLE_SECONDS:
                        self._thread = None  # the next ``hold`` starts a new one
                        return
                    self._clock.wait(self._changed, IDLE_SECONDS - (now - idle_since), now)
                    continue
                idle_since = None
                due = [sid for sid, at in self._due.items() if at <= now]
                if not due:
                    self._clock.wait(self._changed, min(self._due.values()) - now, now)
                    continue
                for sid in due:
                    self._due[sid] = now + self._period
            # Renew outside the lock: a renewal is a store write.
            for sid in due:
                if not self._renew(sid):
                    with self._changed:
                        # Fenced off: no renewal can succeed any more, whoever holds it.
                        self._due.pop(sid, None)
