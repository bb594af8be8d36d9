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

The thread must outlive the database going away: it is a supervised loop
(turnkeeper/supervision.py), a renewal the database does not take (``UNAVAILABLE``)
or that fails unexpectedly is tried again within ``RETRY_SECONDS`` and marks the
keeper down until one succeeds, and whatever ends its thread, the next hold starts
another. The renewals themselves run on a borrowed thread (hosts/worker_threads.py),
never on the keeper's: a renewal may wait out an outage (runtime/log/streams.py
OUTAGES) or a connection that hangs, and the keeper must still see the lease run out.

Fencing hook: the keeper knows, for each held session, when its lease was last known
renewed (the start of the last renewal that succeeded, or of the acquire). Once
``lease_seconds - fence_margin(lease_seconds)`` pass without one, it calls
``on_lapse(session_id)`` — once, from its own thread — and goes on trying to renew;
a renewal that succeeds again ends the lapse (a later one is told again). What to do
about a lapse (end the session's host before the lease expires) is the caller's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Final

from turnkeeper.errors import TurnkeeperError, Unavailable
from turnkeeper.hosts.worker_threads import TURN_THREADS
from turnkeeper.kernel.session import LeaseToken, RenewLease
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.turn.brackets import Bracket
from turnkeeper.runtime.turn.clock import SYSTEM_CLOCK, Clock

# A lapse is told ``fence_margin(lease)`` before the lease would expire, counted from
# the start of its last renewal: the same margin the host fence keeps.
from turnkeeper.runtime.turn.fencing import LeaseDeadlines, fence_margin
from turnkeeper.supervision import HEALTH, HealthRegistry, LoopHealth, Supervised

log = logging.getLogger(__name__)

# How long a session lease lasts unless renewed (a keeper renews it every third).
LEASE_SECONDS = 120.0
# How long the thread waits for more work before it ends.
IDLE_SECONDS = 1.0
# How soon a renewal that did not happen (the database away, an unexpected error) is
# tried again; never later than the next regular renewal.
RETRY_SECONDS: Final = 1.0
Renew = Callable[[str], bool]
"""Renew the session's lease: True when renewed, False when refused (fenced off, the
store gone, the lease given up: renewing it again cannot succeed). Raises
``UNAVAILABLE`` when the database did not take it (try again soon)."""
Lapse = Callable[[str], None]


def renewing(
    sessions: SessionService,
    token: Callable[[str], LeaseToken],
    lease_seconds: float,
    deadlines: LeaseDeadlines | None = None,
) -> Renew:
    """The renewal of a session's lease under ``token(session_id)``, for ``lease_seconds``
    from now: what every keeper of leases on a session stream does. Each renewal that
    succeeds is confirmed to ``deadlines`` (the host fence's: runtime/turn/fencing.py)."""

    def renew(session_id: str) -> bool:
        # Read before the request leaves: the lease is confirmed from no later.
        sent = deadlines.now() if deadlines is not None else 0.0
        try:
            # The database's clock is read here too: during a restart it may not answer.
            until = sessions.now() + timedelta(seconds=lease_seconds)
            sessions.execute(session_id, RenewLease(lease=token(session_id), expires_at=until))
        except Unavailable:
            raise  # away for now: the keeper tries again, the lease may outlast it
        except (TurnkeeperError, KeyError):
            return False  # fenced off, store gone, lease given up: the holder's writes say so
        if deadlines is not None:
            deadlines.confirmed(session_id, sent)
        return True

    return renew


class LeaseKeeper:
    def __init__(
        self,
        renew: Renew,
        period_seconds: float,
        clock: Clock = SYSTEM_CLOCK,
        *,
        lease_seconds: float | None = None,
        on_lapse: Lapse | None = None,
        registry: HealthRegistry = HEALTH,
    ) -> None:
        """``renew`` every ``period_seconds``; ``lease_seconds`` (default: three
        periods, as every keeper renews) is what a renewal grants, which the lapse is
        judged on; ``on_lapse`` is told of a lapse (see the module docstring). It may
        also be set later, before the first hold."""
        self._renew = renew
        self._period = period_seconds
        self._clock = clock
        self.lease_seconds = lease_seconds if lease_seconds is not None else 3 * period_seconds
        self.on_lapse = on_lapse
        # A lapse is told this long after the last renewal's start.
        self.lapse_after = self.lease_seconds - fence_margin(self.lease_seconds)
        self._retry = min(RETRY_SECONDS, period_seconds)
        self._due: dict[str, float] = {}  # session id -> monotonic time of its next renewal
        self._holds: dict[str, int] = {}  # session id -> how many holders keep it
        # session id -> monotonic time its lease was last known renewed from
        self._renewed: dict[str, float] = {}
        self._lapsed: set[str] = set()  # told of a lapse; no renewal succeeded since
        self._renewing: set[str] = set()  # in the renewal batch running now
        self._idle_since: float | None = None
        # The condition's own lock, taken directly where nothing waits or is told (a
        # hold of a lease already kept: the driver's around every host).
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        # Its health is the process's to show (``registry``: a test's own).
        self._loop = Supervised("lease keeper", self._step, registry=registry)

    def hold(self, session_id: str, since: float | None = None) -> None:
        """Renew ``session_id``'s lease every period until as many :meth:`drop` calls.

        ``since``: when (on this keeper's :meth:`monotonic` clock) the lease was
        granted from — the start of its acquire; default now."""
        with self._lock:
            self._holds[session_id] = self._holds.get(session_id, 0) + 1
            if session_id in self._due:
                return  # renewed already: nothing changes, nothing to wake the thread for
            now = self._clock.monotonic()
            self._due[session_id] = now + self._period
            self._renewed[session_id] = since if since is not None else now
            self._loop.ensure_running()  # none after idling out, or after one died
            self._changed.notify()

    def drop(self, session_id: str) -> None:
        with self._lock:
            left = self._holds.get(session_id, 0) - 1
            if left > 0:
                self._holds[session_id] = left
                return
            self._holds.pop(session_id, None)
            self._forget(session_id)
            if not self._due:
                self._changed.notify()  # nothing left to keep: the thread may idle out

    def renewed(self, session_id: str, since: float) -> None:
        """The lease was renewed (or acquired again) by someone else than this keeper,
        from ``since`` (the start of that write, on :meth:`monotonic`'s clock)."""
        with self._lock:
            if session_id in self._due:
                self._renewed[session_id] = max(self._renewed[session_id], since)
                self._lapsed.discard(session_id)
                self._changed.notify()

    def monotonic(self) -> float:
        """Now, on the clock this keeper judges lapses by."""
        return self._clock.monotonic()

    def held(self) -> list[str]:
        """The sessions being renewed now (a refused renewal removes its session)."""
        with self._changed:
            return list(self._due)

    def running(self) -> bool:
        """Whether the keeper's thread runs now (it ends when idle)."""
        return self._loop.running()

    def health(self) -> LoopHealth:
        """The keeper as ``status`` shows it: up, down since when and why, idle."""
        return self._loop.health()

    def keeping(self, session_id: str) -> Bracket:
        """Renew ``session_id``'s lease every period until the block ends."""
        return Bracket(partial(self.hold, session_id), partial(self.drop, session_id))

    # --- the keeper's thread ----------------------------------------------------------

    def _step(self, loop: Supervised) -> bool:
        """One look at the held leases: tell lapses, start due renewals, or wait for
        the next thing due. False when idle long enough to end the thread."""
        batch: list[str] = []
        with self._changed:
            now = self._clock.monotonic()
            if not self._due:
                self._idle_since = self._idle_since or now
                if now - self._idle_since >= IDLE_SECONDS:
                    self._idle_since = None
                    return False  # the next ``hold`` starts the thread again
                self._clock.wait(self._changed, IDLE_SECONDS - (now - self._idle_since), now)
                return True
            self._idle_since = None
            lapsing = [
                sid
                for sid in self._due
                if sid not in self._lapsed and now - self._renewed[sid] >= self.lapse_after
            ]
            self._lapsed.update(lapsing)
            if not lapsing:
                if not self._renewing:
                    batch = [sid for sid, at in self._due.items() if at <= now]
                    for sid in batch:
                        self._due[sid] = now + self._period
                    self._renewing.update(batch)
                if not batch:
                    self._clock.wait(self._changed, self._next_wake(now) - now, now)
                    return True
        if lapsing:
            self._tell_lapses(lapsing)
            return True
        try:
            TURN_THREADS.run(partial(self._renew_batch, batch, loop), "turnkeeper-lease-renewal")
        except BaseException:
            with self._changed:  # no thread to renew them: due again at once, not stuck
                self._renewing.difference_update(batch)
                for sid in batch:
                    if sid in self._due:
                        self._due[sid] = now
            raise
        return True

    def _next_wake(self, now: float) -> float:
        """When something is next due (the lock held): a renewal not running now, or
        a lapse not told yet. A renewal due while the batch runs waits for its end,
        which wakes the thread."""
        times = [at for at in self._due.values() if at > now]
        times += [
            self._renewed[sid] + self.lapse_after for sid in self._due if sid not in self._lapsed
        ]
        return min(times, default=now + self._period)

    def _tell_lapses(self, lapsing: list[str]) -> None:
        """``on_lapse`` for each session, each told even if another's call raised; the
        first error is raised after, for the supervisor to log."""
        on_lapse = self.on_lapse
        if on_lapse is None:
            return
        failed: Exception | None = None
        for sid in lapsing:
            try:
                on_lapse(sid)
            except Exception as error:
                failed = failed or error
        if failed is not None:
            raise failed

    def _forget(self, session_id: str) -> None:
        """No longer keep the session's lease (the lock held)."""
        self._due.pop(session_id, None)
        self._renewed.pop(session_id, None)
        self._lapsed.discard(session_id)

    # --- the renewals, on a borrowed thread ---------------------------------------------

    def _renew_batch(self, batch: list[str], loop: Supervised) -> None:
        """Renew each session of ``batch`` in turn; whatever happens, the batch ends and
        the keeper's thread is told, so no session waits for a renewal that never ends."""
        failure: BaseException | None = None
        try:
            for sid in batch:
                started = self._clock.monotonic()
                try:
                    renewed = self._renew(sid)
                except Exception as error:
                    failure = error
                    self._after_renewal(sid, started, None)
                else:
                    self._after_renewal(sid, started, renewed)
        finally:
            with self._changed:
                self._renewing.difference_update(batch)
                self._changed.notify()
        if failure is not None:
            loop.fault(failure)  # down until a renewal succeeds (logged there)
        elif batch:
            loop.healthy()

    def _after_renewal(self, sid: str, started: float, renewed: bool | None) -> None:
        """Record how one renewal ended: renewed, refused (False), or not done (None)."""
        with self._changed:
            self._renewing.discard(sid)
            if sid not in self._due:
                pass  # dropped while it was renewed
            elif renewed is None:
                self._due[sid] = min(self._due[sid], self._clock.monotonic() + self._retry)
            elif renewed:
                self._renewed[sid] = max(self._renewed[sid], started)
                self._lapsed.discard(sid)
            else:
                self._forget(sid)  # fenced off: no renewal can succeed any more
            self._changed.notify()
