"""Where the store's reads and its writer take their DBAPI connections from.

A small pool of plain driver connections (``sqlite3``'s, psycopg's), made by the
dialect's ``connect``: the store's reads and appends run fixed SQL on the driver's
connection anyway, and a checkout from SQLAlchemy's pool cost ~25 µs of CPU (its
events, its reset on return) on a turn that reads ~8 times; importing SQLAlchemy cost
~130 ms of every command that opened a SQLite store. SQLAlchemy's engine is made only
when something needs it (a migration, verify's integrity check, repair's rewrite),
keeps no pool of its own (``NullPool``) and makes its connections by the same
``connect``: this pool is the one way to each database. A
connection the server dropped is discarded by whoever met it, with the idle rest of
the pool (the reader).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from turnkeeper.errors import Unavailable
from turnkeeper.store._dialect import DBAPIConnection

if TYPE_CHECKING:
    from sqlalchemy import Engine

# As SQLAlchemy's pool had them: connections kept open when idle, how many may be open
# at once (threads past that wait for one), and how long such a thread waits.
POOL_SIZE = 8
MAX_OPEN = 32
CHECKOUT_TIMEOUT_S = 30.0


class PooledConnection(Protocol):
    """A connection checked out of a pool, as SQLAlchemy's pool proxies one."""

    @property
    def driver_connection(self) -> DBAPIConnection: ...

    def close(self) -> None:
        """Give the connection back to its pool."""

    def invalidate(self) -> None:
        """Discard the connection (the database dropped it): it is closed, not pooled."""


class Connections(Protocol):
    def raw_connection(self) -> PooledConnection: ...

    def discard_idle(self) -> None:
        """Close the pooled idle connections (they died with one that failed)."""

    def engine(self) -> Engine:
        """SQLAlchemy's engine on the same database, made on first use."""

    def dispose(self) -> None:
        """Close every idle connection and the engine, if one was made."""


class _LazyEngine:
    """An engine made on first use, once, whichever thread asks first."""

    def __init__(self, make: Callable[[], Engine]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._engine: Engine | None = None

    def get(self) -> Engine:
        with self._lock:
            if self._engine is None:
                self._engine = self._make()
            return self._engine

    def dispose(self) -> None:
        with self._lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.dispose()


class _Checkout:
    """One connection out of a :class:`PlainPool`."""

    __slots__ = ("_pool", "driver_connection")

    def __init__(self, pool: PlainPool, conn: DBAPIConnection) -> None:
        self._pool = pool
        self.driver_connection = conn

    def close(self) -> None:
        self._pool.give_back(self.driver_connection)

    def invalidate(self) -> None:
        self._pool.discard(self.driver_connection)


class PlainPool:
    """A bounded pool of driver connections, each opened by ``connect``: at most
    :data:`POOL_SIZE` kept idle and :data:`MAX_OPEN` open at once, so hundreds of
    threads share a few connections (a connection per thread would hold hundreds of
    page caches)."""

    def __init__(
        self, connect: Callable[[], DBAPIConnection], make_engine: Callable[[], Engine]
    ) -> None:
        self._connect = connect
        self._engine = _LazyEngine(make_engine)
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self._idle: list[DBAPIConnection] = []
        self._open = 0  # idle and checked out
        # Threads waiting for a connection: a connection given back wakes one only when
        # one waits (a turn gives back ~8 a turn, almost never to a waiting thread).
        self._waiting = 0
        self._disposed = False  # connections given back from now on are closed

    def raw_connection(self) -> PooledConnection:
        with self._lock:
            deadline = None
            while not self._idle and self._open >= MAX_OPEN:
                if deadline is None:
                    deadline = time.monotonic() + CHECKOUT_TIMEOUT_S
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Unavailable(
                        f"all {MAX_OPEN} database connections stayed in use for "
                        f"{CHECKOUT_TIMEOUT_S:.0f} s",
                        reason="connections_exhausted",
                    )
                self._waiting += 1
                try:
                    self._freed.wait(left)
                finally:
                    self._waiting -= 1
            if self._idle:
                return _Checkout(self, self._idle.pop())
            self._open += 1  # counted before it is opened, so no other thread passes MAX_OPEN
        try:
            conn = self._connect()
        except BaseException:
            self._release_slot()
            raise
        return _Checkout(self, conn)

    def give_back(self, conn: DBAPIConnection) -> None:
        with self._lock:
            if len(self._idle) < POOL_SIZE and not self._disposed:
                self._idle.append(conn)
                if self._waiting:
                    self._freed.notify()
                return
        self.discard(conn)

    def discard(self, conn: DBAPIConnection) -> None:
        try:
            conn.close()
        finally:
            self._release_slot()

    def _release_slot(self) -> None:
        with self._lock:
            self._open -= 1
            if self._waiting:
                self._freed.notify()

    def discard_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            self.discard(conn)

    def engine(self) -> Engine:
        return self._engine.get()

    def dispose(self) -> None:
        with self._lock:
            self._disposed = True
        try:
            self.discard_idle()
        finally:
            self._engine.dispose()
