"""A worker: one of several controllers sharing the sessions of one database.

``run --worker`` keeps looking for sessions it may drive — ready or running, of its
own site, with no live lease (new, released, expired, or held by a controller proven
dead) — and drives at most ``max_sessions`` of them at once through the controller.
Claiming a session is the controller's fenced lease append: of two workers reaching
for the same session at once exactly one appends the lease, the other meets the
stream's new head and leaves it. Between scans it waits for a wake-up (LISTEN/NOTIFY
on PostgreSQL) or the poll interval, whichever comes first.

When the database goes away, a turn's writes wait for it (``ride_out_seconds``), so
a restart loses no turn; past that, the session's thread meets ``UNAVAILABLE``: it is
let go here (its lease still names this worker, and nothing was acknowledged that
did not commit), the worker backs off — doubling, up to a bound — and scans again
once the database answers; the session's next claim runs the recovery table, which
finishes or fails whatever its turn had in flight. A worker that dies leaves its
leases to expire (or to be taken over at once where its death is provable), and the
others take its sessions over the same way.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from turnkeeper.errors import Unavailable
from turnkeeper.hosts import process_tree
from turnkeeper.kernel.session import SessionState
from turnkeeper.runtime.control.controller import Controller, RunSummary
from turnkeeper.runtime.control.controller_identity import owner_is_dead
from turnkeeper.runtime.log.streams import OUTAGES
from turnkeeper.runtime.turn.run_progress import RunRecord

RUNNABLE = ("ready", "running")


@dataclass(frozen=True)
class WorkerConfig:
    # The site this worker runs at: it drives sessions of this site and those of none.
    site: str | None = None
    max_sessions: int = 64
    # Seconds between scans when nothing wakes the worker earlier.
    poll_seconds: float = 2.0
    # Stop after this many seconds with nothing driven and nothing to claim (None: never).
    idle_exit_seconds: float | None = None
    # The longest pause after the database failed to answer.
    max_backoff_seconds: float = 10.0
    # How long a turn's write waits for the database to come back before the session
    # is let go (runtime/log/streams.py OUTAGES): a restart shorter than this loses no turn.
    ride_out_seconds: float = 30.0


class Worker:
    def __init__(self, controller: Controller, config: WorkerConfig) -> None:
        self.controller = controller
        self.config = config
        self._store = controller.sessions.store
        self._lock = threading.Lock()
        self._driving: dict[str, threading.Thread] = {}
        self._errors: list[BaseException] = []
        self._unavailable = 0  # database failures in a row (the backoff's exponent)
        self._changed = threading.Event()  # a session thread ended: scan again now
        self._outage = False  # the last scan found the database away
        OUTAGES.budget_seconds = config.ride_out_seconds
        OUTAGES.notice = self._riding_out

    def run(self) -> RunSummary:
        """Drive sessions until stopped (a signal) or idle for ``idle_exit_seconds``."""
        process_tree.become_subreaper()
        summary = RunSummary()
        idle_since = time.monotonic()
        try:
            while not self.controller.stopping:
                pause = self._scan_and_claim(summary)
                busy = bool(self._live())
                # Waiting for the database is not idleness: the work may be all there.
                if busy or pause is None or self._outage:
                    idle_since = time.monotonic()
                elif (
                    self.config.idle_exit_seconds is not None
                    and time.monotonic() - idle_since >= self.config.idle_exit_seconds
                ):
                    self._say("worker_idle", "nothing left to drive; the worker stops")
                    break
                self._wait(pause if pause is not None else self.config.poll_seconds)
        finally:
            self.controller.request_stop()
            for thread in list(self._driving.values()):
                thread.join()
            self.controller.release_all()
        summary.turns = self.controller.turns_started
        if self._errors:
            raise self._errors[0]
        return summary

    # --- scanning -----------------------------------------------------------------------

    def _scan_and_claim(self, summary: RunSummary) -> float | None:
        """Start threads for claimable sessions; the pause before the next scan (None:
        some session was claimable, look again soon)."""
        try:
            sessions = self.controller.sessions.list()
            now = self.controller.sessions.now()
        except Unavailable as down:
            self._outage = True
            return self._backoff(down)
        self._outage = False
        self._unavailable = 0
        live = self._live()
        room = self.config.max_sessions - len(live)
        claimable = [s for s in sessions if s.session_id not in live and self._mine(s, now)]
        for session in claimable[: max(room, 0)]:
            self._start(session.session_id, summary)
        return None if claimable and room > 0 else self.config.poll_seconds

    def _mine(self, session: SessionState, now: object) -> bool:
        """Whether this worker may claim ``session`` now."""
        if session.status not in RUNNABLE:
            return False
        if session.site is not None and session.site != self.config.site:
            return False  # its workspace lives elsewhere
        lease = session.lease
        if lease.owner is None or lease.owner == self.controller.owner:
            return True
        if lease.expires_at is None or lease.expires_at <= now:  # type: ignore[operator]
            return True
        return owner_is_dead(lease.owner)

    def _live(self) -> dict[str, threading.Thread]:
        with self._lock:
            for sid in [s for s, t in self._driving.items() if not t.is_alive()]:
                del self._driving[sid]
            return dict(self._driving)

    # --- driving one session --------------------------------------------------------------

    def _start(self, sid: str, summary: RunSummary) -> None:
        thread = threading.Thread(
            target=self._drive, args=(sid, summary), name=f"session-{sid[:8]}", daemon=True
        )
        with self._lock:
            self._driving[sid] = thread
        thread.start()

    def _drive(self, sid: str, summary: RunSummary) -> None:
        try:
            self.controller.drive_shared(sid, summary)
        except Unavailable as down:
            # Let go here; the lease still names us and the next claim recovers it.
            self.controller.forget(sid)
            self._say(
                "database_unavailable",
                f"session {sid[:8]}: database unavailable ({down.message}); put back",
                session=sid,
            )
            with self._lock:
                self._unavailable += 1
        except BaseException as error:
            with self._lock:
                self._errors.append(error)
            self.controller.request_stop()
        finally:
            self._changed.set()

    # --- waiting ------------------------------------------------------------------------

    def _backoff(self, down: Unavailable) -> float:
        with self._lock:
            self._unavailable += 1
            tries = self._unavailable
        pause = float(min(self.config.max_backoff_seconds, 0.25 * 2 ** min(tries, 10)))
        self._say(
            "database_unavailable",
            f"database unavailable ({down.message}); retrying in {pause:.1f}s",
            wait_seconds=round(pause, 3),
        )
        return pause

    def _wait(self, seconds: float) -> None:
        """Until a wake-up, a session thread's end, a stop, or ``seconds``."""
        deadline = time.monotonic() + seconds
        while not self.controller.stopping and not self._changed.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            # Short waits on the database's wake-ups, so a thread's end is seen soon too.
            if self._store.wait_for_work(min(left, 0.5)):
                break
        self._changed.clear()

    def _riding_out(self, down: Unavailable) -> None:
        self._say(
            "database_unavailable",
            f"database unavailable ({down.message}); turns in flight wait for it "
            f"(up to {self.config.ride_out_seconds:.0f}s)",
        )

    def _say(self, event: str, text: str, **fields: object) -> None:
        self.controller.report(RunRecord("worker", text, None, {"event": event, **fields}))
