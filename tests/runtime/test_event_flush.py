"""Host events reach the journal within a second, by time as well as by count.

The batcher's rule with a fake clock; the feed's bounded wait on a real thread; and
a real driver, kernels and SQLite store with a host that emits one event and then
stays silent: the event is journaled while the host is still silent.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.usage.project import wait_for
from turnkeeper.errors import NotFound
from turnkeeper.host_reports import HostEvent, ProcessIdentity
from turnkeeper.hosts import Host, HostOutcome, HostStatus, KillReport, TurnRequest, process_tree
from turnkeeper.hosts._events import EventLog
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import NextTurn, plan_next_turn
from turnkeeper.runtime.control.controller import Controller, ControllerConfig
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.turn.driver import TurnResult
from turnkeeper.runtime.turn.event_pump import (
    EVENT_BATCH,
    EVENT_FLUSH_SECONDS,
    TIMED_OUT,
    EventBatcher,
    EventFeed,
    PolledFeed,
    feed_of,
)
from turnkeeper.runtime.turn.planning import goal_view
from turnkeeper.store.base import EventStore
from turnkeeper.vocabulary import TurnKind


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _event(seq: int, kind: str = "output") -> HostEvent:
    return HostEvent(seq=seq, kind=kind, data={"text": f"line {seq}"})


# --- the batcher's rule ---------------------------------------------------------------------


def test_a_quiet_batch_is_due_a_second_after_its_first_event() -> None:
    clock = FakeClock()
    batch = EventBatcher(max_events=100, max_age_seconds=1.0, clock=clock)
    assert batch.wait_seconds() is None  # nothing held: wait for the host as long as it takes
    assert not batch.add(_event(1))
    clock.now += 0.4
    assert not batch.add(_event(2))
    # The time left is the oldest event's, not the newest one's.
    assert batch.wait_seconds() == pytest.approx(0.6)
    clock.now += 0.6
    assert batch.due() and batch.wait_seconds() == 0.0
    assert [e.seq for e in batch.take()] == [1, 2]
    assert batch.wait_seconds() is None and not batch.due() and len(batch) == 0


def test_a_steady_trickle_is_flushed_by_age_on_arrival() -> None:
    clock = FakeClock()
    batch = EventBatcher(max_events=100, max_age_seconds=1.0, clock=clock)
    flushed_at = []
    for seq in range(1, 11):  # one event every 0.3 s: never a pause long enough to time out
        if batch.add(_event(seq)):
            flushed_at.append(seq)
            batch.take()
        clock.now += 0.3
    assert flushed_at == [5, 10]  # events 1 and 6 had waited 1.2 s when 5 and 10 came


def test_a_burst_is_flushed_by_count_and_urgent_events_at_once() -> None:
    clock = FakeClock()
    batch = EventBatcher(max_events=EVENT_BATCH, clock=clock)
    due = [batch.add(_event(seq)) for seq in range(1, EVENT_BATCH + 1)]
    assert due == [False] * (EVENT_BATCH - 1) + [True]
    assert len(batch.take()) == EVENT_BATCH
    assert batch.add(_event(1, "session.bound"))
    batch.take()
    assert batch.add(_event(2, "result"))


# --- the feed: a bounded wait on the host's iterator -----------------------------------------


def test_the_feed_times_out_while_the_host_is_silent_then_ends() -> None:
    release = threading.Event()

    def events() -> Iterator[HostEvent]:
        yield _event(1)
        release.wait(10)
        yield _event(2)

    feed = EventFeed(events(), "t")
    assert feed.next(timeout=None) == _event(1)
    started = time.monotonic()
    assert feed.next(timeout=0.2) is TIMED_OUT
    assert time.monotonic() - started < 2.0
    release.set()
    assert feed.next(timeout=5) == _event(2)
    assert feed.next(timeout=5) is None
    assert feed.next(timeout=5) is None  # stays ended
    assert feed.join()


def test_the_feed_hands_the_iterators_error_to_the_pump() -> None:
    def events() -> Iterator[HostEvent]:
        yield _event(1)
        raise RuntimeError("host stream broke")

    feed = EventFeed(events(), "t")
    assert feed.next(timeout=5) == _event(1)
    with pytest.raises(RuntimeError, match="host stream broke"):
        feed.next(timeout=5)


def test_a_feed_on_a_reused_thread_hands_its_iterators_error_to_the_pump() -> None:
    def fine() -> Iterator[HostEvent]:
        yield _event(1)

    def broken() -> Iterator[HostEvent]:
        yield _event(1)
        raise RuntimeError("host stream broke")

    first = EventFeed(fine(), "t1")
    assert first.next(timeout=5) == _event(1)
    assert first.next(timeout=5) is None
    assert first.join()
    second = EventFeed(broken(), "t2")
    assert second.next(timeout=5) == _event(1)
    with pytest.raises(RuntimeError, match="host stream broke"):
        second.next(timeout=5)
    assert second.join()
    assert second.join()  # joined twice: still ended


def test_joining_a_feed_still_reading_is_bounded() -> None:
    release = threading.Event()

    def slow() -> Iterator[HostEvent]:
        release.wait(5)
        yield _event(1)

    feed = EventFeed(slow(), "t")
    assert not feed.join(timeout=0.05)
    release.set()
    assert feed.next(timeout=5) == _event(1)
    assert feed.join()


def test_a_run_that_waits_for_its_events_itself_is_read_without_a_thread() -> None:
    release = threading.Event()
    request = TurnRequest(
        turn_id="turn-p",
        session_id="s",
        generation=1,
        attempt=1,
        kind=TurnKind.START,
        instructions="",
        workspace=Path("."),
    )
    assert isinstance(feed_of(PolledSilentRun(request, release), 0, "t"), PolledFeed)
    assert isinstance(feed_of(SilentRun(request, release), 0, "t"), EventFeed)
    feed = feed_of(PolledSilentRun(request, release), 0, "t")
    assert [feed.next(timeout=5), feed.next(timeout=5)] == [
        HostEvent(seq=1, kind="session.bound", data={"handle": "silent-1"}),
        HostEvent(seq=2, kind="message", data={"text": "thinking about it"}),
    ]
    assert feed.next(timeout=0.05) is TIMED_OUT
    release.set()
    assert feed.next(timeout=5) == HostEvent(seq=3, kind="result", data={"summary": "done"})
    assert feed.next(timeout=5) is None
    assert feed.next(timeout=5) is None  # stays ended
    assert feed.join()


def test_the_event_log_wait_is_bounded_and_ends_with_the_log() -> None:
    log = EventLog()
    started = time.monotonic()
    assert log.wait_after(0, timeout=0.1) == []
    assert 0.05 < time.monotonic() - started < 2.0
    log.append("output", {"text": "a"})
    log.append("output", {"text": "b"})
    assert [e.seq for e in log.wait_after(0, timeout=0) or []] == [1, 2]
    assert [e.seq for e in log.wait_after(1, timeout=None) or []] == [2]
    late = threading.Timer(0.05, lambda: log.append("output", {"text": "c"}))
    late.start()
    assert [e.seq for e in log.wait_after(2, timeout=5) or []] == [3]  # woken by it
    late.join()
    threading.Timer(0.05, log.close).start()
    assert log.wait_after(3, timeout=None) is None  # woken by the close
    assert [e.seq for e in log.wait_after(2, timeout=None) or []] == [3]  # still readable


# --- a real driver and store ------------------------------------------------------------------


class SilentRun:
    """Emits ``session.bound`` and one line, then says nothing until released."""

    def __init__(self, request: TurnRequest, release: threading.Event) -> None:
        self._request = request
        self._release = release
        self._identity = process_tree.identify(os.getpid(), request.turn_id)

    @property
    def identity(self) -> ProcessIdentity:
        return self._identity

    def events(self, after_seq: int = 0, *, follow: bool = True) -> Iterator[HostEvent]:
        yield HostEvent(seq=1, kind="session.bound", data={"handle": "silent-1"})
        yield HostEvent(seq=2, kind="message", data={"text": "thinking about it"})
        self._release.wait(30)
        yield HostEvent(seq=3, kind="result", data={"summary": "done"})

    def wait(self, timeout: float | None = None) -> HostOutcome:
        return HostOutcome(
            status=HostStatus.SUCCEEDED,
            host_session_handle="silent-1",
            result={"summary": "done"},
            last_seq=3,
        )

    def kill_tree(self) -> KillReport:
        self._release.set()
        return KillReport(turn_id=self._request.turn_id)

    def is_alive(self) -> bool:
        return not self._release.is_set()


class PolledSilentRun(SilentRun):
    """The same run offering the bounded wait itself, as the ``subprocess`` host
    does: the driver reads it on its own thread (a :class:`PolledFeed`)."""

    def next_events(self, after_seq: int, timeout: float | None) -> list[HostEvent] | None:
        first = [
            HostEvent(seq=1, kind="session.bound", data={"handle": "silent-1"}),
            HostEvent(seq=2, kind="message", data={"text": "thinking about it"}),
        ]
        if after_seq < 2:
            return first[after_seq:]
        if after_seq == 2:
            if not self._release.wait(30 if timeout is None else timeout):
                return []
            return [HostEvent(seq=3, kind="result", data={"summary": "done"})]
        return None


class SilentHost:
    kind = "silent"

    def __init__(self, polled: bool = False) -> None:
        self.release = threading.Event()
        self._run = PolledSilentRun if polled else SilentRun

    def start(self, request: TurnRequest) -> SilentRun:
        return self._run(request, self.release)


def _journaled(store: EventStore, sid: str) -> list[tuple[int, str]]:
    from turnkeeper.runtime.services.turn_listing import journaled_events

    found, _ = journaled_events(store, sid)
    return [(e.seq, e.kind) for e in found]


@pytest.mark.parametrize("polled", [False, True], ids=["feed-thread", "polled"])
def test_a_silent_hosts_last_line_is_journaled_while_it_is_silent(
    store: EventStore, tmp_path: Path, polled: bool
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    host = SilentHost(polled)

    def loader(kind: str, config: dict[str, Any]) -> Host:
        if kind != host.kind:
            raise NotFound(f"no host {kind!r}", reason="unknown_host_kind")
        return host

    goals = GoalService(store)
    goals.create(CreateGoal(goal_id="g", title="a quiet goal"))
    goals.submit("g", AddTodo(todo=TodoSpec(todo_id="t0", title="todo 0")))
    sid = SessionService(store).create("g", workspace, host.kind).session_id
    controller = Controller(store, ControllerConfig(host_loader=loader))
    controller.acquire(sid)
    results: list[TurnResult] = []
    try:
        session = controller.sessions.load(sid)
        now = controller.sessions.now()
        plan = plan_next_turn(session, goal_view(goals.load("g"), session, now), now)
        assert isinstance(plan, NextTurn)
        turn = threading.Thread(
            target=lambda: results.append(controller.driver.run_turn(session, plan))
        )
        started = time.monotonic()
        turn.start()
        try:
            wait_for(
                lambda: (2, "message") in _journaled(store, sid),
                timeout=EVENT_FLUSH_SECONDS + 4,
                what="the silent host's line in the journal",
            )
            took = time.monotonic() - started
            # Journaled while the host still says nothing (it has not been released).
            assert not host.release.is_set() and turn.is_alive()
            assert _journaled(store, sid) == [(1, "session.bound"), (2, "message")]
            assert took < EVENT_FLUSH_SECONDS + 3, took
        finally:
            host.release.set()
            turn.join(30)
    finally:
        controller.release(sid)
    assert not turn.is_alive() and results and results[0].succeeded
    assert _journaled(store, sid) == [(1, "session.bound"), (2, "message"), (3, "result")]
