"""The plain connection pool of the SQLite store (store/_connections.py): bounded in
what it keeps and in what it opens, whatever the number of threads."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
from sqlalchemy import Engine

from turnkeeper.errors import Unavailable
from turnkeeper.store import _connections
from turnkeeper.store._connections import PlainPool
from turnkeeper.store._dialect import DBAPICursor, SqlParams


class FakeConnection:
    def __init__(self) -> None:
        self.closed = False

    def cursor(self) -> DBAPICursor:
        raise NotImplementedError

    def execute(self, sql: str, params: SqlParams = (), /) -> DBAPICursor:
        raise NotImplementedError

    def close(self) -> None:
        self.closed = True


class Opened:
    def __init__(self) -> None:
        self.all: list[FakeConnection] = []

    def __call__(self) -> FakeConnection:
        conn = FakeConnection()
        self.all.append(conn)
        return conn

    def open_now(self) -> Sequence[FakeConnection]:
        return [c for c in self.all if not c.closed]


def no_engine() -> Engine:
    raise AssertionError("no engine is needed here")


def test_idle_connections_are_reused_and_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_connections, "POOL_SIZE", 2)
    opened = Opened()
    pool = PlainPool(opened, no_engine)
    first = pool.raw_connection()
    first.close()
    again = pool.raw_connection()
    assert again.driver_connection is first.driver_connection  # reused, not reopened
    many = [again, *(pool.raw_connection() for _ in range(4))]
    for checkout in many:
        checkout.close()
    assert len(opened.all) == 5
    assert len(opened.open_now()) == 2  # the rest closed as they came back


def test_a_thread_past_the_limit_waits_for_a_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_connections, "MAX_OPEN", 2)
    opened = Opened()
    pool = PlainPool(opened, no_engine)
    held = [pool.raw_connection(), pool.raw_connection()]
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(pool.raw_connection().driver_connection))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not got  # waiting: two are open already
    held[0].close()
    waiter.join(5)
    assert got == [held[0].driver_connection]
    assert len(opened.all) == 2


def test_a_discarded_connection_frees_its_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_connections, "MAX_OPEN", 1)
    monkeypatch.setattr(_connections, "CHECKOUT_TIMEOUT_S", 0.1)
    opened = Opened()
    pool = PlainPool(opened, no_engine)
    broken = pool.raw_connection()
    with pytest.raises(Unavailable) as caught:
        pool.raw_connection()
    assert caught.value.reason == "connections_exhausted"
    broken.invalidate()
    assert opened.all[0].closed
    pool.raw_connection().close()  # a new one, in the freed slot
    assert len(opened.all) == 2


def test_connections_given_back_after_dispose_are_closed() -> None:
    opened = Opened()
    pool = PlainPool(opened, no_engine)
    idle, busy = pool.raw_connection(), pool.raw_connection()
    idle.close()
    pool.dispose()
    assert opened.all[0].closed
    busy.close()  # a read that finished after the store closed
    assert opened.open_now() == []


def test_a_failed_open_frees_its_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_connections, "MAX_OPEN", 1)

    def refuse() -> FakeConnection:
        raise OSError("cannot open")

    pool = PlainPool(refuse, no_engine)
    for _ in range(3):  # each attempt fails alone, none waits for a slot
        with pytest.raises(OSError, match="cannot open"):
            pool.raw_connection()
