"""How a turn's host events reach the journal: in batches, by count and by time.

A batch is journaled when it holds ``EVENT_BATCH`` events, when an event that must
be durable at once arrives (the host session handle, the result), or when its
first event has waited ``EVENT_FLUSH_SECONDS``: a host that prints one line and
then thinks for minutes has that line in the journal within a second, while a
chatty host still costs one cheap commit per hundred events, never one per event.

The time bound must hold while the host is silent, so the pump cannot block on
the host's event iterator: :class:`EventFeed` reads the iterator on a thread of its
own into a queue, and the pump waits on the queue no longer than the oldest
unjournaled event may wait (:meth:`EventBatcher.wait_seconds`). A run that offers
that bounded wait itself (``WaitsForEvents``: the ``subprocess`` host's) is read by
a :class:`PolledFeed` on the pump's own thread, with no thread between them. What is journaled at
all stays within the turn's output limits (:class:`CappedEvents`).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, Protocol, cast

from turnkeeper.host_reports import HostEvent
from turnkeeper.hosts.base import HostRun, TurnLimits, WaitsForEvents
from turnkeeper.hosts.output_cap import TRUNCATED_KIND, OutputCap, carries_meaning
from turnkeeper.hosts.worker_threads import TURN_THREADS

# Events per journal commit at most (a chatty host).
EVENT_BATCH: Final = 100
# How long a host event may wait for the journal (a quiet host).
EVENT_FLUSH_SECONDS: Final = 1.0
# Events journaled the moment they arrive: what recovery needs from a turn cut off
# mid-way (the host session to resume) and the agent's own account of the turn.
URGENT_KINDS: Final = frozenset({"session.bound", "result"})
# How long closing a feed waits for its reader after the host's tree was ended.
_READER_JOIN_SECONDS: Final = 5.0


class CappedEvents:
    """The driver's own output cap, so the journal stays within the turn's limits
    whatever a host does with ``TurnRequest.limits`` (see hosts/output_cap.py).

    Journaled events are numbered here, contiguously, because the kernel refuses a
    gap: an event kept after dropped ones gets the next journal seq instead of its
    host seq. A host that honours the limits never has an event dropped here, so
    its events keep their own seqs.
    """

    def __init__(self, limits: TurnLimits, journaled: int = 0) -> None:
        """``journaled``: events of this turn already journaled (a reattached turn)."""
        self._limits = limits
        # Made at the first event (its digest of dropped output included): a turn whose
        # host prints nothing, as many do, needs none.
        self._cap: OutputCap | None = None
        self._seq = journaled

    def admit(self, event: HostEvent) -> HostEvent | None:
        if self._cap is None:
            self._cap = OutputCap(self._limits)
        meaningful = carries_meaning(event.kind, event.data)
        if not self._cap.admit(event.kind, event.data, meaningful=meaningful):
            return None
        self._seq += 1
        return event if event.seq == self._seq else event.model_copy(update={"seq": self._seq})

    def truncation(self) -> HostEvent | None:
        """The ``output.truncated`` event for what this cap dropped (None: nothing)."""
        data = self._cap.truncation() if self._cap is not None else None
        if data is None:
            return None
        self._seq += 1
        return HostEvent(seq=self._seq, kind=TRUNCATED_KIND, data=data)


class EventBatcher:
    """The batch not yet journaled, and when it must be (count, urgency, age).

    Pure bookkeeping with an injected clock, so the flush rule is tested without a
    host or a store."""

    def __init__(
        self,
        *,
        max_events: int = EVENT_BATCH,
        max_age_seconds: float = EVENT_FLUSH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_events = max_events
        self._max_age = max_age_seconds
        self._clock = clock
        self._events: list[HostEvent] = []
        self._first_at: float | None = None

    def __len__(self) -> int:
        return len(self._events)

    def add(self, event: HostEvent) -> bool:
        """Hold ``event``; True when the batch must be journaled now."""
        if not self._events:
            self._first_at = self._clock()
        self._events.append(event)
        return len(self._events) >= self._max_events or event.kind in URGENT_KINDS or self.due()

    def due(self) -> bool:
        """True when the oldest held event has waited its time."""
        return self._first_at is not None and self._clock() - self._first_at >= self._max_age

    def wait_seconds(self) -> float | None:
        """How long the pump may wait for the next event: None (as long as it takes)
        when nothing is held, else what is left of the oldest event's time."""
        if self._first_at is None:
            return None
        return max(0.0, self._max_age - (self._clock() - self._first_at))

    def take(self) -> list[HostEvent]:
        """The held events, oldest first; the batcher is empty afterwards."""
        taken, self._events, self._first_at = self._events, [], None
        return taken


@dataclass(frozen=True)
class _End:
    """The host's iterator is exhausted (``error`` None) or raised ``error``."""

    error: BaseException | None = None


class _TimedOut:
    """No event came within the wait."""


TIMED_OUT: Final = _TimedOut()


class EventFeed:
    """A host's event iterator read on a thread of its own, so its events can be
    waited for with a bound (:meth:`next`).

    The thread (one of the turns' reused threads, hosts/worker_threads.py) reads
    exactly as long as the iterator, which ends when the host's run ends (or its
    process tree is ended: the driver does so when the pump fails). An error of the
    iterator is handed to the pump, never swallowed."""

    def __init__(self, events: Iterator[HostEvent], name: str) -> None:
        self._events = events
        self._queue: queue.SimpleQueue[HostEvent | _End] = queue.SimpleQueue()
        self._ended = False
        # Held while the reader reads: a lock, not an Event, as :meth:`join` is all
        # that waits on it and a lock is the cheaper of the two to make each turn.
        self._reading = threading.Lock()
        self._reading.acquire()
        TURN_THREADS.run(self._read, f"events-{name}")

    def _read(self) -> None:
        try:
            for event in self._events:
                self._queue.put(event)
        except BaseException as error:  # handed to the pump, which raises it
            self._queue.put(_End(error))
        else:
            self._queue.put(_End())
        finally:
            self._reading.release()

    def next(self, timeout: float | None) -> HostEvent | _TimedOut | None:
        """The next event; ``TIMED_OUT`` when none came within ``timeout`` seconds
        (None: wait as long as the host runs); None once every event was read.
        Raises what the host's iterator raised."""
        if self._ended:
            return None
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return TIMED_OUT
        if isinstance(item, _End):
            self._ended = True
            if item.error is not None:
                raise item.error
            return None
        return item

    def join(self, timeout: float = _READER_JOIN_SECONDS) -> bool:
        """Wait (bounded) for the reader to end; True if it did."""
        if not self._reading.acquire(timeout=timeout):
            return False
        self._reading.release()  # a second join finds it ended too
        return True


class PolledFeed:
    """A run's events waited for on the pump's own thread (``WaitsForEvents``), with
    the same bounded :meth:`next` as :class:`EventFeed` and no thread of its own."""

    def __init__(self, run: WaitsForEvents, after_seq: int) -> None:
        self._run = run
        self._read = after_seq  # the last seq taken from the run
        self._ready: deque[HostEvent] = deque()
        self._ended = False

    def next(self, timeout: float | None) -> HostEvent | _TimedOut | None:
        """As :meth:`EventFeed.next`."""
        if self._ready:
            return self._ready.popleft()
        if self._ended:
            return None
        batch = self._run.next_events(self._read, timeout)
        if batch is None:
            self._ended = True
            return None
        if not batch:
            return TIMED_OUT
        self._read = batch[-1].seq
        self._ready.extend(batch)
        return self._ready.popleft()

    def join(self, timeout: float = _READER_JOIN_SECONDS) -> bool:
        """Nothing to wait for: no thread reads for this feed."""
        return True


class Feed(Protocol):
    def next(self, timeout: float | None) -> HostEvent | _TimedOut | None: ...

    def join(self, timeout: float = _READER_JOIN_SECONDS) -> bool: ...


def feed_of(run: HostRun, after_seq: int, name: str) -> Feed:
    """The feed of ``run``'s events after ``after_seq``: waited for on the caller's
    thread when the run offers a bounded wait, else read on a thread (``name``)."""
    # An attribute look-up, not ``isinstance`` on the protocol: that checks every
    # member by reflection, on every turn.
    if callable(getattr(run, "next_events", None)):
        return PolledFeed(cast(WaitsForEvents, run), after_seq)
    return EventFeed(run.events(after_seq=after_seq), name)
