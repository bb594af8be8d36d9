"""The deliverer: reads the log after each endpoint's cursors, and delivers.

One :meth:`Deliverer.tick` does bounded work: it lists the session and goal streams
(their heads come with the listing), reads each stream an endpoint is behind on (at
most ``max_events`` events of it), derives the notifications the endpoint asked for,
and POSTs them one at a time, in each stream's order. Per endpoint:

* a 2xx answer appends ``notify.delivered`` (the cursor moves past the event);
* a failure appends ``notify.failed`` with the next attempt's time — backing off
  exponentially from ``first_backoff_seconds`` to ``max_backoff_seconds`` — and the
  endpoint waits until then; its next attempt is the same notification, so what a
  receiver gets stays in order; after ``max_attempts`` the notification is given up
  (``notify.gave_up``, counted and shown) and the endpoint goes on to the next;
* events that notify it of nothing move its cursors in memory, written down
  (``notify.scanned``) at most every ``save_scans_seconds``: losing them to a crash
  only means reading those events again.

A crash after a POST was taken and before its record sends it again, with the same
idempotency key (signing.py): delivery is at least once. Two deliverers on one
database (a ``run`` and a ``serve``) may both send one notification, under one key.

:func:`delivering` runs a deliverer as a supervised loop (turnkeeper/supervision.py)
beside a ``run`` or ``serve``, and, as a ``run`` ends, delivers what is due for a
bounded time so that the gate that ended it is not left for the next one.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from turnkeeper.errors import TurnkeeperError
from turnkeeper.notify import outbox
from turnkeeper.notify.derive import GOAL_KIND, SESSION_KIND, Notification, body_of, derive
from turnkeeper.notify.post import Outcome, post
from turnkeeper.notify.records import (
    MAX_ERROR_CHARS,
    Delivered,
    DeliveryFailed,
    Endpoint,
    GaveUp,
    NotifyState,
    Scanned,
)
from turnkeeper.notify.signing import headers, idempotency_key
from turnkeeper.store.base import EventStore
from turnkeeper.store.records import Projection
from turnkeeper.supervision import Supervised, describe_error

log = logging.getLogger(__name__)

Poster = Callable[[str, bytes, dict[str, str]], Outcome]
# How long a ``run`` that ends goes on delivering what is due (the gate that ended it).
DRAIN_SECONDS: Final = 20.0


@dataclass(frozen=True)
class DeliveryPolicy:
    poll_seconds: float = 2.0
    first_backoff_seconds: float = 1.0
    max_backoff_seconds: float = 600.0
    # 1 + 2 + ... + 512 s, then every 10 minutes: about two hours before giving up.
    max_attempts: int = 20
    max_events: int = 1000  # read of one stream in one tick
    max_sends: int = 50  # POSTs in one tick
    save_scans_seconds: float = 60.0

    def backoff(self, failures: int) -> float:
        exponent = max(0, min(failures - 1, 32))
        return float(min(self.max_backoff_seconds, self.first_backoff_seconds * 2.0**exponent))


@dataclass(frozen=True)
class Tick:
    sent: int  # notifications taken
    failed: int  # attempts that failed
    more: bool  # stopped at a bound with work left: tick again now
    due: datetime | None  # the earliest retry an endpoint waits for


@dataclass(frozen=True)
class _Source:
    stream_id: str
    head: int
    projection: Projection


class Deliverer:
    def __init__(
        self,
        store: EventStore,
        policy: DeliveryPolicy | None = None,
        *,
        poster: Poster = post,
    ) -> None:
        self._store = store
        self.policy = policy or DeliveryPolicy()
        self._post = poster
        # (endpoint, stream) -> seq read past in memory, not yet written down.
        self._scanned: dict[tuple[str, str], int] = {}
        self._scans_saved_at = time.monotonic()

    # --- one tick -------------------------------------------------------------------------

    def tick(self) -> Tick:
        state, _ = outbox.load(self._store)
        if not state.endpoints:
            self._scanned.clear()
            return Tick(0, 0, False, None)
        listed = self._store.list_projections_of((GOAL_KIND, SESSION_KIND))
        sources = [
            _Source(p.stream_id, p.stream_head, p)
            for kind in (GOAL_KIND, SESSION_KIND)
            for p in listed[kind]
        ]
        sent = failed = 0
        more = False
        due: datetime | None = None
        now = self._store.now()
        for endpoint in sorted(state.endpoints.values(), key=lambda e: e.endpoint_id):
            failing = endpoint.failing
            if failing is not None and failing.next_attempt_at > now:
                due = failing.next_attempt_at if due is None else min(due, failing.next_attempt_at)
                continue
            budget = self.policy.max_sends - sent
            if budget <= 0:
                more = True
                break
            done, stopped, busy = self._serve_endpoint(endpoint, sources, budget)
            sent += done
            more = more or busy
            if stopped is not None:
                failed += 1
                due = stopped if due is None else min(due, stopped)
        self._forget_removed(state)
        if time.monotonic() - self._scans_saved_at >= self.policy.save_scans_seconds:
            self.save_scans()
        return Tick(sent, failed, more, due)

    def _serve_endpoint(
        self, endpoint: Endpoint, sources: list[_Source], budget: int
    ) -> tuple[int, datetime | None, bool]:
        """Deliver to one endpoint: (sent, the retry time when an attempt failed, whether
        a bound left work for the next tick)."""
        failing = endpoint.failing
        # The notification that failed is tried first, so the endpoint's order holds.
        ordered = sorted(
            sources,
            key=lambda s: (failing is None or s.stream_id != failing.stream_id, s.stream_id),
        )
        sent = 0
        for source in ordered:
            cursor = self._cursor(endpoint, source.stream_id)
            if source.head <= cursor:
                continue
            records = self._store.read_stream(source.stream_id, cursor, self.policy.max_events)
            goal = _goal_of(source)
            for record in records:
                found = None
                if record.recorded_at >= endpoint.added_at:
                    found = derive(record, goal_of_session=goal)
                if found is None or found.event not in endpoint.events:
                    self._scanned[(endpoint.endpoint_id, source.stream_id)] = record.seq
                    continue
                if sent >= budget:
                    return sent, None, True
                retry = self._deliver(endpoint, found)
                if retry is not None:
                    return sent, retry, False
                sent += 1
                self._scanned[(endpoint.endpoint_id, source.stream_id)] = record.seq
            if len(records) >= self.policy.max_events and records[-1].seq < source.head:
                return sent, None, True
        return sent, None, False

    def seconds_until(self, at: datetime) -> float:
        return (at - self._store.now()).total_seconds()

    def _cursor(self, endpoint: Endpoint, stream_id: str) -> int:
        return max(
            endpoint.cursor(stream_id), self._scanned.get((endpoint.endpoint_id, stream_id), 0)
        )

    # --- one notification -----------------------------------------------------------------

    def _deliver(self, endpoint: Endpoint, notification: Notification) -> datetime | None:
        """POST it and record how it went; the time of the next attempt when it failed."""
        key = idempotency_key(endpoint.endpoint_id, notification.stream_id, notification.seq)
        failing = endpoint.failing
        same = failing is not None and (failing.stream_id, failing.seq) == (
            notification.stream_id,
            notification.seq,
        )
        attempt = (failing.failures if failing is not None and same else 0) + 1
        body = json.dumps(
            body_of(notification, key), sort_keys=True, separators=(",", ":")
        ).encode()
        sent_headers = headers(
            secret=endpoint.secret,
            key=key,
            event=notification.event,
            attempt=attempt,
            timestamp=int(time.time()),
            body=body,
        )
        outcome = self._post(endpoint.url, body, sent_headers)
        at = self._store.now()
        where = {
            "endpoint_id": endpoint.endpoint_id,
            "stream_id": notification.stream_id,
            "seq": notification.seq,
            "key": key,
            "at": at,
        }
        if outcome.ok:
            outbox.record(
                self._store,
                Delivered(**where, attempts=attempt, status_code=outcome.status_code or 200),
            )
            return None
        error = outcome.error[:MAX_ERROR_CHARS]
        if attempt >= self.policy.max_attempts:
            log.warning(
                "notification %s to endpoint %s given up after %d attempts: %s",
                key,
                endpoint.endpoint_id,
                attempt,
                error,
            )
            outbox.record(self._store, GaveUp(**where, attempts=attempt, error=error))
            return None
        retry = at + timedelta(seconds=self.policy.backoff(attempt))
        outbox.record(
            self._store,
            DeliveryFailed(**where, attempt=attempt, error=error, next_attempt_at=retry),
        )
        return retry

    # --- cursors read past in memory ------------------------------------------------------

    def save_scans(self) -> None:
        """Write down the cursors read past in memory (one record per endpoint)."""
        self._scans_saved_at = time.monotonic()
        by_endpoint: dict[str, dict[str, int]] = {}
        for (endpoint_id, stream_id), seq in self._scanned.items():
            by_endpoint.setdefault(endpoint_id, {})[stream_id] = seq
        for endpoint_id, cursors in by_endpoint.items():

            def decide(
                state: NotifyState, eid: str = endpoint_id, moved: dict[str, int] = cursors
            ) -> Scanned | None:
                found = state.endpoints.get(eid)
                if found is None:
                    return None
                ahead = {s: q for s, q in moved.items() if q > found.cursor(s)}
                return (
                    Scanned(endpoint_id=eid, cursors=ahead, at=self._store.now()) if ahead else None
                )

            outbox.append(self._store, decide)

    def _forget_removed(self, state: NotifyState) -> None:
        for pair in [p for p in self._scanned if p[0] not in state.endpoints]:
            del self._scanned[pair]

    # --- ticking until done ---------------------------------------------------------------

    def drain(self, seconds: float) -> Tick:
        """Tick until nothing is due or ``seconds`` have passed; waits for retries due
        within that time. The last tick's answer (what is left)."""
        deadline = time.monotonic() + seconds
        while True:
            tick = self.tick()
            left = deadline - time.monotonic()
            if left <= 0 or (not tick.more and tick.due is None):
                return tick
            if tick.more:
                continue
            assert tick.due is not None
            wait = self.seconds_until(tick.due)
            if wait > left:
                return tick
            time.sleep(max(0.0, wait))


def _goal_of(source: _Source) -> str | None:
    """The goal of a session stream's session (None for a goal stream, or one that
    does not say)."""
    if source.projection.kind != SESSION_KIND:
        return None
    try:
        goal = json.loads(source.projection.state).get("goal_id")
    except (ValueError, AttributeError):
        return None
    return goal if isinstance(goal, str) else None


# --- beside a run or a server --------------------------------------------------------------


def _step(deliverer: Deliverer, loop: Supervised) -> bool:
    tick = deliverer.tick()
    if tick.more:
        return True
    pause = deliverer.policy.poll_seconds
    if tick.due is not None:
        pause = min(pause, max(0.05, deliverer.seconds_until(tick.due)))
    if loop.wait(pause):
        deliverer.save_scans()
        return False
    return True


@contextmanager
def delivering(
    store: EventStore,
    *,
    drain_seconds: float = 0.0,
    note: Callable[[str], None] | None = None,
    hurry: Callable[[], bool] | None = None,
    policy: DeliveryPolicy | None = None,
) -> Iterator[Deliverer]:
    """Deliver notifications in the background while the block runs; when it ends
    without an error, go on delivering what is due for up to ``drain_seconds`` and
    ``note`` what is still waiting (the next ``run`` or ``serve`` delivers it). When
    ``hurry()`` says so as the block ends (a person asked the run to stop), only what
    is due at once is sent: no retry is waited for."""
    deliverer = Deliverer(store, policy)
    loop = Supervised("notifier", lambda supervised: _step(deliverer, supervised))
    loop.ensure_running()
    try:
        yield deliverer
    except BaseException:
        loop.stop(timeout=1.0)
        raise
    # A POST in flight ends within its timeout; the drain must not race the loop.
    if not loop.stop(timeout=15.0) or drain_seconds <= 0:
        return
    try:
        tick = deliverer.drain(0.0 if hurry is not None and hurry() else drain_seconds)
        deliverer.save_scans()
    except TurnkeeperError as error:  # the database away: the outbox keeps them
        if note is not None:
            note(
                f"notifications not delivered now ({describe_error(error)}): "
                "the next run or serve delivers them"
            )
        return
    if note is not None and tick.due is not None:
        note(
            "notifications still waiting for a failing endpoint (`turnkeeper notify list`): "
            "the next run or serve delivers them"
        )
