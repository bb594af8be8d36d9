"""The driver's one lease-keeper thread, on a clock the test moves (no sleeps): it
renews once a period while a block runs and never after, serves every session from
one thread, drops a session whose renewal is refused, and ends when idle (and starts
again on the next hold)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.runtime.manual_clock import ManualClock
from turnkeeper.kernel.proposals import CreateGoal
from turnkeeper.runtime.control.controller import Controller, ControllerConfig
from turnkeeper.runtime.control.session_leases import SessionLeases
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.turn import lease_keeper
from turnkeeper.runtime.turn.lease_keeper import LeaseKeeper
from turnkeeper.store import open_store
from turnkeeper.store.base import EventStore

PERIOD = 10.0
BOUND = 10.0  # real seconds a broken keeper may take before the test fails


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


def _idle_out(keeper: LeaseKeeper) -> None:
    """With nothing to keep the thread ends (IDLE_SECONDS is 0 here: it ends at once)."""
    thread = keeper._thread
    assert thread is not None
    thread.join(BOUND)
    assert not thread.is_alive() and keeper._thread is None


@pytest.fixture(autouse=True)
def _no_idle_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lease_keeper, "IDLE_SECONDS", 0.0)


def test_renews_once_a_period_while_kept_and_never_after() -> None:
    clock, renewals = ManualClock(), _Renewals()
    keeper = LeaseKeeper(renewals, PERIOD, clock)
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
    keeper = LeaseKeeper(renewals, PERIOD, clock)
    with keeper.keeping("a"):
        serving = keeper._thread
        assert serving is not None and serving.is_alive()
        with keeper.keeping("b"):
            assert keeper._thread is serving  # no second thread for the second session
            for k in (1, 2, 3):
                clock.until_waiting()
                clock.advance(PERIOD)
                renewals.reach("a", k)
                renewals.reach("b", k)
    assert (renewals.count("a"), renewals.count("b")) == (3, 3)


def test_a_refused_renewal_drops_the_session() -> None:
    clock, renewals = ManualClock(), _Renewals(refuse=frozenset({"fenced"}))
    keeper = LeaseKeeper(renewals, PERIOD, clock)
    with keeper.keeping("fenced"), keeper.keeping("ok"):
        _periods(clock, renewals, "ok", 4)
        assert keeper.held() == ["ok"]
    assert renewals.count("fenced") == 1  # refused once, then no longer tried
    assert renewals.count("ok") == 4


def test_the_thread_ends_when_idle_and_starts_again() -> None:
    clock, renewals = ManualClock(), _Renewals()
    keeper = LeaseKeeper(renewals, PERIOD, clock)
    with keeper.keeping("a"):
        _periods(clock, renewals, "a", 1)
    _idle_out(keeper)
    with keeper.keeping("b"):
        assert keeper._thread is not None and keeper._thread.is_alive()
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
            # The keeper waits on the clock again only once its renewal is written.
            clock.until_waiting()
            assert _renewals(store, sid) == renewed
        later = sessions.load(sid).lease.expires_at
        assert first is not None and later is not None and later > first
        leases.release(sid)
        assert sessions.load(sid).lease.owner is None
        clock.advance(3 * PERIOD)  # nothing held: no renewal after the release
        assert _renewals(store, sid) == 2
    finally:
        store.close()


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
