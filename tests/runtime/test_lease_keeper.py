"""The driver's one lease-keeper thread: renews while a block runs, stops after it,
drops a session whose renewal is refused, and ends when idle (and starts again)."""

from __future__ import annotations

import threading
import time

import pytest

from turnkeeper.runtime import lease_keeper
from turnkeeper.runtime.lease_keeper import LeaseKeeper


class _Renewals:
    def __init__(self, refuse: frozenset[str] = frozenset()) -> None:
        self.calls: list[str] = []
        self.refuse = refuse
        self.lock = threading.Lock()

    def __call__(self, session_id: str) -> bool:
        with self.lock:
            self.calls.append(session_id)
        return session_id not in self.refuse

    def count(self, session_id: str) -> int:
        with self.lock:
            return self.calls.count(session_id)


def test_renews_every_period_while_kept_and_never_after() -> None:
    renewals = _Renewals()
    keeper = LeaseKeeper(renewals, period_seconds=0.05)
    with keeper.keeping("a"):
        time.sleep(0.4)
    kept = renewals.count("a")
    assert 4 <= kept <= 9  # ~8 periods in 0.4 s; a loaded machine may lose a few
    time.sleep(0.2)
    assert renewals.count("a") == kept


def test_one_thread_serves_several_sessions() -> None:
    renewals = _Renewals()
    keeper = LeaseKeeper(renewals, period_seconds=0.05)
    with keeper.keeping("a"):
        serving = keeper._thread
        assert serving is not None and serving.is_alive()
        with keeper.keeping("b"):
            time.sleep(0.3)
            assert keeper._thread is serving  # no second thread for the second session
    assert renewals.count("a") >= 3 and renewals.count("b") >= 3


def test_a_refused_renewal_drops_the_session() -> None:
    renewals = _Renewals(refuse=frozenset({"fenced"}))
    keeper = LeaseKeeper(renewals, period_seconds=0.05)
    with keeper.keeping("fenced"), keeper.keeping("ok"):
        time.sleep(0.4)
    assert renewals.count("fenced") == 1  # refused once, then no longer tried
    assert renewals.count("ok") >= 4


def test_the_thread_ends_when_idle_and_starts_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lease_keeper, "IDLE_SECONDS", 0.1)
    renewals = _Renewals()
    keeper = LeaseKeeper(renewals, period_seconds=0.05)
    with keeper.keeping("a"):
        time.sleep(0.12)
    deadline = time.monotonic() + 5
    while keeper._thread is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert keeper._thread is None
    with keeper.keeping("b"):
        time.sleep(0.2)
    assert renewals.count("b") >= 2
