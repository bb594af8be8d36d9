"""Self-fencing: a controller that cannot renew a session's lease ends that session's
host before the lease runs out, so two hosts never work one workspace at once.

The lease is the only thing that says which controller may drive a session, and a
successor takes a session over once the lease has expired (or at once, where the old
holder is provably dead: runtime/control/controller_identity.py). Fencing tokens keep
the old holder's *writes to the database* out after that, but nothing in the database
can stop its *agent*, which goes on editing the workspace. So the holder fences itself:

* **confirmed until.** Each successful acquire or renewal confirms the lease until
  ``sent + lease_seconds``, where ``sent`` is this machine's clock when the request
  left (the database stamps the expiry at least that late on its own clock).
* **the lapse.** :class:`HostFence` looks at every running host every
  :data:`CHECK_SECONDS`, on a thread of its own that never waits on the database (a
  partition can leave a database call hanging far longer than a lease). A host whose
  session's lease is confirmed for less than the margin (:func:`fence_margin`) more
  has its whole process tree ended, and the turn says why.
* **the takeover.** A successor that cannot prove the old host gone (the holder is on
  another machine, another boot or another PID namespace) takes the session only once
  the lease *and* the margin have passed on the database's clock
  (:func:`takeover_due`), and records the turn as ended by its worker's fencing.

Between the holder's last confirmed renewal and the successor's start there are thus
two margins. The guarantee assumes what every lease does: the clocks of the machines
and of the database advance at nearly the same rate (their *offsets* do not matter:
the expiry and the successor's "now" are both the database's clock, and the holder
measures only elapsed time on its own) and ending a process tree takes less than a
margin. The clock here is ``CLOCK_BOOTTIME``, which also runs while the machine is
suspended: a laptop that slept through its lease finds it lapsed on waking.
docs/postgresql.md states the guarantee for users.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Final

from turnkeeper.runtime.turn.brackets import Bracket
from turnkeeper.runtime.turn.running_hosts import RunningHosts
from turnkeeper.supervision import Supervised

log = logging.getLogger(__name__)

# How often the fence looks at the running hosts (seconds).
CHECK_SECONDS: Final = 0.25
# The margin is a quarter of the lease, at most this long (seconds).
MAX_MARGIN_SECONDS: Final = 10.0


def fence_margin(lease_seconds: float) -> float:
    """How long before its lease runs out a holder ends its hosts, and how long after
    it a successor that cannot prove them gone waits: a quarter of the lease, at most
    :data:`MAX_MARGIN_SECONDS`."""
    return min(MAX_MARGIN_SECONDS, lease_seconds / 4)


def takeover_due(expires_at: datetime, lease_seconds: float) -> datetime:
    """When a successor that cannot prove the holder's hosts gone may take a lease over
    that expires at ``expires_at`` (the database's clock)."""
    return expires_at + timedelta(seconds=fence_margin(lease_seconds))


def boottime() -> float:
    """Seconds since boot, suspend included (time.monotonic stops while suspended)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


Say = Callable[[str, str, str], None]  # (session id, turn id, what happened)


class LeaseDeadlines:
    """Until when each session's lease is confirmed, on :func:`boottime`; thread-safe.

    Written by whoever acquires or renews a lease (runtime/control/session_leases.py,
    runtime/turn/lease_keeper.py), read by :class:`HostFence`.
    """

    def __init__(self, lease_seconds: float, now: Callable[[], float] = boottime) -> None:
        self.lease_seconds = lease_seconds
        self.margin = fence_margin(lease_seconds)
        self.now = now
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def confirmed(self, session_id: str, sent: float) -> None:
        """A renewal (or acquire) sent at ``sent`` (a :attr:`now` reading taken before
        the request left) succeeded."""
        until = sent + self.lease_seconds
        with self._lock:
            if until > self._until.get(session_id, 0.0):
                self._until[session_id] = until

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._until.pop(session_id, None)

    def lapsed(self, session_id: str, now: float) -> float | None:
        """None while the lease is confirmed for more than the margin; else the seconds
        since it was last confirmed (a session never confirmed here has no lease of
        ours to lose: None)."""
        with self._lock:
            until = self._until.get(session_id)
        if until is None or now < until - self.margin:
            return None
        return now - (until - self.lease_seconds)


class HostFence:
    """Ends the hosts of every session whose lease lapsed (see the module docstring).

    One supervised loop per controller while any host runs (:meth:`watching`); each
    check is bounded (the hosts running now), and a check that fails is logged, shown
    in ``status`` and run again: the fence must outlive anything one host does.
    """

    def __init__(self, deadlines: LeaseDeadlines, hosts: RunningHosts, say: Say) -> None:
        self._deadlines = deadlines
        self._hosts = hosts
        self._say = say
        self._fenced: dict[str, str] = {}  # turn id -> why its host was ended
        self._lock = threading.Lock()
        self._watched = 0  # hosts inside :meth:`watching` now
        # A failed check is logged, shown in ``status`` and run again (supervision.py).
        self._loop = Supervised("host fence", self._step)

    def watching(self) -> Bracket:
        """The fence runs while any block of this is open (one around each host run)."""
        return Bracket(self._enter, self._leave)

    def _enter(self) -> None:
        with self._lock:
            self._watched += 1
        self._loop.ensure_running()

    def _leave(self) -> None:
        with self._lock:
            self._watched -= 1

    def take(self, turn_id: str) -> str | None:
        """Why the fence ended turn ``turn_id``'s host (None: it did not); asked once,
        by the driver when the host has ended."""
        with self._lock:
            return self._fenced.pop(turn_id, None)

    def check(self) -> list[str]:
        """End the hosts whose session's lease lapsed; the turns ended."""
        now = self._deadlines.now()
        ended: list[str] = []
        for host in self._hosts.listed():
            since = self._deadlines.lapsed(host.session_id, now)
            if since is None:
                continue
            with self._lock:
                if host.turn_id in self._fenced:
                    continue  # ended already; its tree is going
            why = (
                f"ended by self-fencing: the lease was last confirmed {since:.1f}s ago "
                f"and runs out in under {self._deadlines.margin:g}s"
            )
            with self._lock:
                self._fenced[host.turn_id] = why
            log.warning("turn %s: %s", host.turn_id, why)
            self._hosts.kill(host.turn_id)
            self._say(host.session_id, host.turn_id, why)
            ended.append(host.turn_id)
        return ended

    def _step(self, loop: Supervised) -> bool:
        """One look after :data:`CHECK_SECONDS`; False (the thread idles out, and the
        next host starts it again) once no host is watched."""
        if loop.wait(CHECK_SECONDS):
            return False
        with self._lock:
            if self._watched == 0:
                return False
        self.check()
        return True
