"""Background loops that must keep running: supervised, restarted, their health known.

A controller has threads nobody waits on — the lease keeper, the orphan reaper, the
API server's span poller. One that dies silently leaves the process looking healthy
while what it did stops for good: a lease keeper that died in a database restart
cost every later turn longer than the lease. So such a loop is a :class:`Supervised`:
its thread runs a *step* again and again, and

* a step that raises is noticed: logged (its traceback the first time, then once a
  minute while it keeps failing), the loop marked down (since when, with what error),
  and the step run again after a pause that doubles up to ``MAX_BACKOFF_SECONDS``;
* a step may also report a failure it survived (:meth:`Supervised.fault`: a lease
  keeper whose renewals the database refuses runs on, but keeps no lease) and the
  recovery from it (:meth:`Supervised.healthy`);
* a step that returns False ends the loop (nothing left to do: an idle lease keeper);
  :meth:`Supervised.ensure_running` starts it again, and also replaces a thread that
  ended any other way (a ``BaseException`` out of a step).

Every loop whose thread runs, or that is down, is in the process's :data:`HEALTH`,
which tells its listeners of every change: a ``run`` process writes it where
``turnkeeper status`` reads it even while the database is away
(runtime/control/controller_health.py). A leaf module: every layer may use it.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

from turnkeeper.errors import TurnkeeperError

log = logging.getLogger(__name__)

# The pause before a failed step runs again: doubled at each failure in a row, up to
# the bound (a step that fails at once must not spin, nor wait minutes once it can run).
BACKOFF_SECONDS: Final = 0.1
MAX_BACKOFF_SECONDS: Final = 5.0
# While a loop stays down, its failures are logged at most this often.
LOG_EVERY_SECONDS: Final = 60.0

LoopState = Literal["up", "down", "idle", "stopped"]


@dataclass(frozen=True)
class LoopHealth:
    """One supervised loop as it is now.

    ``up``: its thread runs; ``down``: a step failed (or reported a fault) and no step
    has succeeded since; ``idle``: it ended with nothing to do, and starts again when
    there is; ``stopped``: its owner stopped it."""

    name: str
    state: LoopState
    down_since: datetime | None = None  # wall clock: shown to a person
    last_error: str | None = None
    failures: int = 0  # steps that raised or reported a fault, in all
    restarts: int = 0  # times a step ran again after one raised

    def describe(self) -> str:
        """One line for a person: "lease keeper down since 12:00:03 (error: ...)"."""
        if self.state != "down":
            text = f"{self.name} {self.state}"
        else:
            since = f" since {self.down_since:%Y-%m-%d %H:%M:%S}" if self.down_since else ""
            text = f"{self.name} down{since}"
            if self.last_error:
                text += f" (error: {self.last_error})"
        if self.restarts:
            text += f", restarted {self.restarts} time{'s' if self.restarts != 1 else ''}"
        return text

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "state": self.state,
            "down_since": self.down_since.isoformat() if self.down_since else None,
            "last_error": self.last_error,
            "failures": self.failures,
            "restarts": self.restarts,
        }


def describe_error(error: BaseException) -> str:
    """An error as one short line (a typed error's code, reason and message)."""
    if isinstance(error, TurnkeeperError):
        text = f"{error.code.value} ({error.reason}): {error.message}"
    else:
        text = f"{type(error).__name__}: {error}"
    return " ".join(text.split())[:500]


Listener = Callable[[], None]


class HealthRegistry:
    """The process's supervised loops that run or are down, and who listens for changes.

    Held weakly: a running loop is kept alive by its thread, a loop that is down by its
    owner; one whose owner let it go (a command's lease keeper, done) leaves with it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loops: weakref.WeakValueDictionary[int, Supervised] = weakref.WeakValueDictionary()
        self._listeners: dict[int, Listener] = {}
        self._next = 0

    def snapshot(self) -> list[LoopHealth]:
        with self._lock:
            loops = list(self._loops.values())
        return sorted((loop.health() for loop in loops), key=lambda h: h.name)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener()`` after every change (from the changing loop's thread;
        keep it short); returns the unsubscribe."""
        with self._lock:
            key = self._next
            self._next += 1
            self._listeners[key] = listener

        def unsubscribe() -> None:
            with self._lock:
                self._listeners.pop(key, None)

        return unsubscribe

    def track(self, loop: Supervised, tracked: bool) -> None:
        """Count ``loop`` among those shown (its thread runs, or it is down) or not."""
        with self._lock:
            if tracked:
                self._loops[id(loop)] = loop
            else:
                self._loops.pop(id(loop), None)

    def changed(self) -> None:
        """Tell every listener that some loop changed."""
        with self._lock:
            listeners = list(self._listeners.values())
        for listener in listeners:
            try:
                listener()
            except Exception:  # a listener's failure is its own: the loop goes on
                log.exception("a health listener failed")


HEALTH: Final = HealthRegistry()

# One step of a loop, given the loop (for :meth:`Supervised.wait` and friends);
# returns False when the loop has nothing left to do.
Step = Callable[["Supervised"], bool]


class Supervised:
    """A loop that must keep running (see the module docstring)."""

    def __init__(
        self,
        name: str,
        step: Step,
        *,
        registry: HealthRegistry = HEALTH,
        backoff_seconds: float = BACKOFF_SECONDS,
        max_backoff_seconds: float = MAX_BACKOFF_SECONDS,
    ) -> None:
        self.name = name
        self._step = step
        self._registry = registry
        self._backoff = backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Asked to run since the current step began: a step that found nothing to do
        # runs once more instead of ending (see :meth:`_idle_out`).
        self._kicked = False
        self._state: LoopState = "idle"
        self._crashed = False  # the last step raised
        self._faulted = False  # a step reported a fault that no success has cleared
        self._down_since: datetime | None = None
        self._last_error: str | None = None
        self._failures = 0
        self._in_a_row = 0  # steps that raised in a row (the backoff's exponent)
        self._restarts = 0
        self._logged_at = -float("inf")

    # --- the owner's side --------------------------------------------------------------

    def ensure_running(self) -> None:
        """Start the loop's thread unless it runs: the first start, after it idled out,
        or after its thread ended by an error nothing could catch."""
        with self._lock:
            self._kicked = True
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            name = "turnkeeper-" + "-".join(self.name.split())
            thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread = thread
            thread.start()

    def stop(self, timeout: float | None = None) -> bool:
        """Ask the loop to end (a step waiting in :meth:`wait` wakes) and wait for its
        thread; True when it has ended."""
        self._stop.set()
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def running(self) -> bool:
        with self._lock:
            return self._thread is not None and self._thread.is_alive()

    def health(self) -> LoopHealth:
        with self._lock:
            return LoopHealth(
                name=self.name,
                state=self._state,
                down_since=self._down_since,
                last_error=self._last_error,
                failures=self._failures,
                restarts=self._restarts,
            )

    # --- the step's side ---------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless stopped meanwhile; True when the loop is to stop."""
        return self._stop.wait(seconds)

    def fault(self, error: BaseException) -> None:
        """A step met ``error`` and goes on: the loop is down until :meth:`healthy`."""
        with self._lock:
            self._faulted = True
            self._failures += 1
        self._went_down(error, traceback=not isinstance(error, TurnkeeperError))

    def healthy(self) -> None:
        """A step did its work: a fault it reported is over."""
        with self._lock:
            if not self._faulted:
                return
            self._faulted = False
        self._maybe_up()

    # --- the thread ---------------------------------------------------------------------

    def _run(self) -> None:
        me = threading.current_thread()
        with self._lock:
            if self._thread is me:
                self._publish_locked("down" if self._crashed or self._faulted else "up", True)
        self._registry.changed()
        ended: LoopState = "idle"
        try:
            while True:
                if self._stop.is_set():
                    ended = "stopped"
                    break
                with self._lock:
                    self._kicked = False
                try:
                    go_on = self._step(self)
                except Exception as error:
                    self._crash(error)
                    if self._stop.wait(self._pause()):
                        ended = "stopped"
                        break
                    with self._lock:
                        self._restarts += 1
                    continue
                self._step_done()
                if go_on:
                    continue
                if self._stop.is_set():
                    ended = "stopped"
                    break
                if self._idle_out(me):
                    break
        except BaseException as error:
            # Nothing in a step should raise this far (a SystemExit, a KeyboardInterrupt
            # sent to the wrong thread): the thread ends down, and the next
            # ``ensure_running`` replaces it.
            self._crash(error)
            self._ended(me, "down")
            raise
        self._ended(me, ended)

    def _idle_out(self, me: threading.Thread) -> bool:
        """The step found nothing to do: end the thread, unless someone asked the loop
        to run since the step began (their work would wait for a thread that ended).
        Decided under the lock :meth:`ensure_running` takes, so either it sees this
        thread gone and starts another, or this thread sees it asked and runs on."""
        with self._lock:
            if self._kicked and not self._stop.is_set():
                return False
            if self._thread is me:
                self._thread = None
            return True

    def _ended(self, me: threading.Thread, state: LoopState) -> None:
        with self._lock:
            if self._thread is me:
                self._thread = None
            elif self._thread is not None:
                return  # a newer thread runs the loop now: the state is its
            down = self._crashed or self._faulted
            self._publish_locked("down" if down else state, down)
        self._registry.changed()

    def _pause(self) -> float:
        with self._lock:
            exponent = min(self._in_a_row - 1, 32)
        return float(min(self._max_backoff, self._backoff * 2**exponent))

    def _crash(self, error: BaseException) -> None:
        with self._lock:
            self._crashed = True
            self._failures += 1
            self._in_a_row += 1
        # A typed error says what it is (the database away); anything else is a bug.
        self._went_down(error, traceback=not isinstance(error, TurnkeeperError))

    def _step_done(self) -> None:
        with self._lock:
            self._in_a_row = 0
            if not self._crashed:
                return
            self._crashed = False
        self._maybe_up()

    def _went_down(self, error: BaseException, *, traceback: bool) -> None:
        text = describe_error(error)
        now = time.monotonic()
        with self._lock:
            first = self._down_since is None
            if first:
                self._down_since = datetime.now(UTC)
            changed = first or text != self._last_error
            self._last_error = text
            tell = first or now - self._logged_at >= LOG_EVERY_SECONDS
            if tell:
                self._logged_at = now
            failures = self._failures
            if changed:
                self._publish_locked("down", True)
        if tell:
            info = error if traceback and first else None
            log.error("%s failed (%d so far): %s", self.name, failures, text, exc_info=info)
        if changed:
            self._registry.changed()

    def _maybe_up(self) -> None:
        with self._lock:
            if self._crashed or self._faulted or self._down_since is None:
                return
            self._down_since = None
            failures = self._failures
            alive = self._thread is not None and self._thread.is_alive()
            self._publish_locked("up" if alive else "idle", alive)
        log.warning("%s is working again (%d failures so far)", self.name, failures)
        self._registry.changed()

    def _publish_locked(self, state: LoopState, tracked: bool) -> None:
        """Set the state (the loop's lock held); the caller tells the registry's
        listeners once it no longer holds the lock."""
        self._state = state
        self._registry.track(self, tracked)
