"""The driver's one lease-keeper thread, on a clock the test moves (no sleeps): it
renews once a period while a block runs and never after, serves every session from
one thread, drops a session whose renewal is refused, and ends when idle (and starts
again on the next hold).

It outlives what a database restart does to it: a renewal that raises (``UNAVAILABLE``,
the database's clock not answering, anything unexpected) is tried again soon and marks
the keeper down until one succeeds; a thread that dies anyway is replaced by the next
hold. And it tells of a lapse: a held session that went ``lease - margin`` seconds
without a renewal is handed to ``on_lapse`` once, on time, while renewals go on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import cast

import pytest

from tests.runtime.manual_clock import ManualClock
from turnkeeper.errors import Unavailable
from turnkeeper.kernel.proposals import CreateGoal
from turnkeeper.kernel.session import LeaseToken
from turnkeeper.runtime.control.controller import Controller, ControllerConfig
from turnkeeper.runtime.control.session_leases import SessionLeases
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.turn import fencing, lease_keeper
from turnkeeper.runtime.turn.lease_keeper import LeaseKeeper, renewing
from turnkeeper.store import open_store
from turnkeeper.store.base import EventStore
from turnkeeper.supervision import HealthRegistry

PERIOD = 10.0
BOUND = 10.0  # real seconds a broken keeper may take before the test fails


def _keeper_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "turnkeeper-lease-keeper")


class _Renewals:
    def __init__(self, refuse: frozenset[str] = frozenset()) -> None:
        self.calls: list[str] = []
        self.refuse = refuse
        self.changed = threading.Condition()

    def __call__(self, session_id: str) -> bool:
        with self.changed:
            self.calls.append(session_id)
            self.changed.notify_all()
        return session_id not in self.refuse

    def count(self, session_id: str) -> int:
        with self.changed:
            return self.calls.count(session_id)

    def reach(self, session_id: str, n: int) -> None:
        with self.changed:
            done = self.changed.wait_for(lambda: self.calls.count(session_id) >= n, BOUND)
        assert done, (session_id, n, self.calls)


def _periods(clock: ManualClock, renewals: _Renewals, sid: str, n: int) -> None:
    """Let ``n`` periods pass, one at a time, each renewal seen before the next."""
    start = renewals.count(sid)
    for k in range(1, n + 1):
        clock.until_waiting()
        clock.advance(PERIOD)
        renewals.reach(sid, start + k)


def _eventually(check: Callable[[], bool], what: str) -> None:
    """Wait (bounded) for what another thread does: a renewal runs on a thread of its own."""
    deadline = time.monotonic() + BOUND
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.005)


def _advance(keeper: LeaseKeeper, clock: ManualClock, seconds: float) -> None:
    """Move time once the renewals running now have ended (they run on a thread of
    their own, and when one that failed is tried again is counted from its end)."""
    clock.until_waiting()  # the keeper saw the last move (and started what was due)
    _eventually(lambda: not keeper._renewing, "the renewals in flight ended")
    clock.advance(seconds)


def _idle_out(keeper: LeaseKeeper) -> None:
    """With nothing to keep the thread ends (IDLE_SECONDS is 0 here: it ends at once)."""
    _eventually(lambda: not keeper.running(), "the keeper's thread ended")
    assert keeper.health().state == "idle"


@pytest.fixture(autouse=True)
def _no_idle_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lease_keeper, "IDLE_SECONDS", 0.0)


def test_renews_once_a_period_while_kept_and_never_after() -> None:
    clock, renewals = ManualClock(), _Renewals()
    keeper = LeaseKeeper(renewals, PERIOD, clock, registry=HealthRegistry())
    with keeper.keeping("a"):
        clock.until_waiting()
        clock.advance(PERIOD / 2)  # half a period: not due yet
        clock.until_waiting()
        assert renewals.count("a") == 0
        clock.advance(PERIOD / 2)
        renewals.reach("a", 1)
        _periods(clock, renewals, "a", 4)
    _idle_out(keeper)
    clock.advance(10 * PERIOD)
    assert renewals.count("a") == 5


def test_one_thread_serves_several_sessions() -> None:
    clock, renewals = ManualClock(), _Renewals()
    keeper = LeaseKeeper(renewals, PERIOD, clock, registry=HealthRegistry())
    with keeper.keeping("a"):
        assert keeper.running()
        serving = _keeper_threads()
        with keeper.keeping("b"):
            assert _keeper_threads() == serving  # no second thread for the second session
            for k in (1, 2, 3):
                clock.until_waiting()
                clock.advance(PERIOD)
                renewals.reach("a", k)
                renewals.reach("b", k)
    assert (renewals.count("a"), renewals.count("b")) == (3, 3)


def test_a_refused_renewal_drops_the_session() -> None:
    clock, renewals = ManualClock(), _Renewals(refuse=frozenset({"fenced"}))
    keeper = LeaseKeeper(renewals, PERIOD, clock, registry=HealthRegistry())
    with keeper.keeping("fenced"), keeper.keeping("ok"):
        _periods(clock, renewals, "ok", 4)
        assert keeper.held() == ["ok"]
    assert renewals.count("fenced") == 1  # refused once, then no longer tried
    assert renewals.count("ok") == 4


def test_the_thread_ends_when_idle_and_starts_again() -> None:
    clock, renewals = ManualClock(), _Renewals()
    keeper = LeaseKeeper(renewals, PERIOD, clock, registry=HealthRegistry())
    with keeper.keeping("a"):
        _periods(clock, renewals, "a", 1)
    _idle_out(keeper)
    with keeper.keeping("b"):
        assert keeper.running()
        _periods(clock, renewals, "b", 2)
    assert renewals.count("b") == 2


def test_a_one_shot_commands_lease_is_renewed_while_held_and_given_back(tmp_path: Path) -> None:
    """The lease service an operator's command uses alone (``session stop``, ``revert``):
    its own keeper renews the lease once a third of it, on the injected clock, through
    the session stream, and stops when the lease is given back."""
    clock = ManualClock()
    store = open_store(tmp_path / "tk.db")
    try:
        GoalService(store).create(CreateGoal(goal_id="g", title="held by a command"))
        sessions = SessionService(store)
        sid = sessions.create("g", tmp_path, "inprocess").session_id
        leases = SessionLeases(sessions, "ctl:operator:1:1", 30.0, clock=clock)
        leases.acquire(sid)
        first = sessions.load(sid).lease.expires_at
        for renewed in (1, 2):
            clock.until_waiting()
            clock.advance(PERIOD)
            _eventually(partial(_renewed, store, sid, renewed), f"renewal {renewed}")
        later = sessions.load(sid).lease.expires_at
        assert first is not None and later is not None and later > first
        leases.release(sid)
        assert sessions.load(sid).lease.owner is None
        clock.advance(3 * PERIOD)  # nothing held: no renewal after the release
        _idle_out(leases._keeper)
        assert _renewals(store, sid) == 2
    finally:
        store.close()


def _renewed(store: EventStore, sid: str, n: int) -> bool:
    return _renewals(store, sid) == n


def _renewals(store: EventStore, sid: str) -> int:
    events = store.read_stream(f"session:{sid}")
    return sum(1 for e in events if e.type == "session.lease_renewed")


def test_the_controllers_configuration_carries_the_clock(tmp_path: Path) -> None:
    """One clock, injected once: ControllerConfig's reaches the driver's lease keeper."""
    clock = ManualClock()
    store = open_store(tmp_path / "tk.db")
    try:
        controller = Controller(store, ControllerConfig(lease_seconds=30.0, clock=clock))
        assert controller.driver.lease_keeper._clock is clock
        assert controller.driver.lease_keeper._period == 10.0
    finally:
        store.close()


class _Flaky(_Renewals):
    """Renewals that raise ``failure`` while ``failing`` is set."""

    def __init__(self, failure: Exception) -> None:
        super().__init__()
        self.failure = failure
        self.failing = True

    def __call__(self, session_id: str) -> bool:
        super().__call__(session_id)
        if self.failing:
            raise self.failure
        return True


class _Lapses:
    def __init__(self) -> None:
        self.told: list[tuple[str, float]] = []
        self.changed = threading.Condition()

    def __call__(self, session_id: str, clock: ManualClock) -> None:
        with self.changed:
            self.told.append((session_id, clock.monotonic()))
            self.changed.notify_all()

    def reach(self, n: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.told) >= n, BOUND), self.told


@pytest.mark.parametrize(
    "failure",
    [
        Unavailable("the database system is starting up", reason="database_unavailable"),
        RuntimeError("a bug in a renewal"),
    ],
)
def test_a_renewal_that_raises_is_tried_again_and_the_keeper_runs_on(failure: Exception) -> None:
    clock, renewals = ManualClock(), _Flaky(failure)
    keeper = LeaseKeeper(renewals, PERIOD, clock, registry=HealthRegistry())
    retry = lease_keeper.RETRY_SECONDS
    with keeper.keeping("a"):
        _advance(keeper, clock, PERIOD)
        renewals.reach("a", 1)
        _eventually(lambda: keeper.health().state == "down", "the keeper marked down")
        down = keeper.health()
        assert down.last_error is not None and str(failure) in down.last_error
        assert down.down_since is not None
        # Tried again within RETRY_SECONDS, not a whole period later, and again.
        for n in (2, 3):
            _advance(keeper, clock, retry)
            renewals.reach("a", n)
        assert keeper.running() and keeper.held() == ["a"]
        renewals.failing = False
        _advance(keeper, clock, retry)
        renewals.reach("a", 4)
        _eventually(lambda: keeper.health().state == "up", "the keeper up again")
        assert keeper.health().failures == 3
        # Renewed: the next one is a period later again.
        _advance(keeper, clock, PERIOD - 0.5)
        clock.until_waiting()
        assert renewals.count("a") == 4
        clock.advance(0.5)
        renewals.reach("a", 5)


class _AwayClockSessions:
    """A session service whose database clock does not answer (a restart): what
    killed the keeper's thread on main, which read it outside its handling of
    ``UNAVAILABLE``."""

    def __init__(self) -> None:
        self.away = True
        self.renewed = 0

    def now(self) -> datetime:
        if self.away:
            raise Unavailable("the database system is starting up", reason="unavailable")
        return datetime.now(UTC)

    def execute(self, session_id: str, command: object) -> None:
        self.renewed += 1


def test_a_database_clock_that_does_not_answer_does_not_end_the_keeper() -> None:
    clock, sessions = ManualClock(), _AwayClockSessions()
    token = LeaseToken(owner="ctl:x", epoch=1)
    renew = renewing(cast(SessionService, sessions), lambda _: token, 3 * PERIOD)
    with pytest.raises(Unavailable):
        renew("a")  # raised to the keeper, which knows the lease was not renewed
    keeper = LeaseKeeper(renew, PERIOD, clock, registry=HealthRegistry())
    with keeper.keeping("a"):
        clock.until_waiting()
        clock.advance(PERIOD)
        _eventually(lambda: keeper.health().state == "down", "the keeper marked down")
        assert keeper.running() and keeper.held() == ["a"]
        sessions.away = False
        clock.until_waiting()
        clock.advance(lease_keeper.RETRY_SECONDS)
        _eventually(lambda: sessions.renewed == 1, "the renewal once the database is back")
        _eventually(lambda: keeper.health().state == "up", "the keeper up again")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_keeper_thread_is_replaced_by_the_next_hold() -> None:
    clock, renewals = ManualClock(), _Renewals()

    def die(session_id: str) -> None:
        raise SystemExit  # nothing catches it: the keeper's thread ends

    keeper = LeaseKeeper(renewals, PERIOD, clock, registry=HealthRegistry(), on_lapse=die)
    keeper.hold("a")
    clock.until_waiting()
    clock.advance(keeper.lapse_after)
    _eventually(lambda: not keeper.running(), "the keeper's thread died")
    assert keeper.health().state == "down"
    keeper.hold("b")  # on main: the dead thread was kept, and nothing renewed again
    assert keeper.running()
    keeper.on_lapse = None
    clock.until_waiting()
    clock.advance(PERIOD)
    renewals.reach("a", 1)
    renewals.reach("b", 1)
    _eventually(lambda: keeper.health().state == "up", "the new thread up")
    keeper.drop("a")
    keeper.drop("b")


def test_a_lapse_is_told_once_on_time_while_renewals_go_on() -> None:
    """Lease 30 s (three periods), margin min(10, 30/4) = 7.5 s: told 22.5 s after the
    last renewal's start without another, once; a renewal that succeeds again ends the
    lapse, and the next one is told again."""
    clock, renewals, lapses = ManualClock(), _Flaky(Unavailable("away")), _Lapses()
    keeper = LeaseKeeper(
        renewals, PERIOD, clock, registry=HealthRegistry(), on_lapse=lambda sid: lapses(sid, clock)
    )
    retry = lease_keeper.RETRY_SECONDS
    assert keeper.lease_seconds == 3 * PERIOD and keeper.lapse_after == 22.5
    assert fencing.fence_margin(3 * PERIOD) == 7.5
    assert fencing.fence_margin(120.0) == fencing.MAX_MARGIN_SECONDS == 10.0
    held_at = clock.monotonic()
    with keeper.keeping("a"):
        # Renewals fail from the first one on, tried again every RETRY_SECONDS.
        _advance(keeper, clock, PERIOD)
        for _ in range(12):  # to 22 s
            _advance(keeper, clock, retry)
        _advance(keeper, clock, 0)
        assert clock.monotonic() == held_at + 22.0 and lapses.told == []
        _advance(keeper, clock, 0.5)
        lapses.reach(1)
        assert lapses.told == [("a", held_at + 22.5)]
        tries = renewals.count("a")
        for _ in range(3):  # still renewing, not told again
            _advance(keeper, clock, retry)
        _eventually(lambda: renewals.count("a") >= tries + 3, "three more renewals")
        assert len(lapses.told) == 1
        # The database is back: renewed, the lapse is over; the next renewal fails
        # again, and 22.5 s after the last good one's start the next lapse is told.
        renewals.failing = False
        renewed_at = clock.monotonic() + retry
        _advance(keeper, clock, retry)
        renewals.reach("a", tries + 4)
        renewals.failing = True
        _advance(keeper, clock, PERIOD)
        renewals.reach("a", tries + 5)
        _advance(keeper, clock, renewed_at + 22.0 - clock.monotonic())
        _advance(keeper, clock, 0)
        assert len(lapses.told) == 1
        _advance(keeper, clock, 0.5)
        lapses.reach(2)
        assert lapses.told[1] == ("a", renewed_at + 22.5)


def test_a_lapse_is_told_while_a_renewal_hangs() -> None:
    """A renewal may wait on the database far longer than a lease (a partition): it
    runs off the keeper's thread, which tells the lapse on time all the same."""
    clock, lapses = ManualClock(), _Lapses()
    release = threading.Event()
    started = threading.Event()

    def hangs(session_id: str) -> bool:
        started.set()
        release.wait(BOUND)
        return True

    keeper = LeaseKeeper(
        hangs, PERIOD, clock, registry=HealthRegistry(), on_lapse=lambda sid: lapses(sid, clock)
    )
    held_at = clock.monotonic()
    try:
        with keeper.keeping("a"):
            clock.until_waiting()
            clock.advance(PERIOD)
            assert started.wait(BOUND)
            clock.until_waiting()
            clock.advance(held_at + keeper.lapse_after - clock.monotonic())
            lapses.reach(1)
            assert lapses.told == [("a", held_at + keeper.lapse_after)]
    finally:
        release.set()


def test_the_lease_service_makes_its_keeper_judge_its_lease(tmp_path: Path) -> None:
    store = open_store(tmp_path / "tk.db")
    try:
        leases = SessionLeases(SessionService(store), "ctl:operator:1:1", 40.0)
        assert leases._keeper.lease_seconds == 40.0
        assert leases._keeper.lapse_after == 30.0  # margin min(10, 40/4)
    finally:
        store.close()
