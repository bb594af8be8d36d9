"""Waking idle workers when there is new work: LISTEN/NOTIFY on PostgreSQL.

A wake-up is only a hint. Workers claim sessions with a fenced lease append, never
because a notification said so, and they poll as well: a notification lost to a
restart, or one that could not be sent, delays a worker by at most its poll interval.
NOTIFY is sent on a connection of its own after the work's commit, never inside the
append transaction, where it would take a global lock and serialise every commit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from contextlib import suppress

import psycopg
from psycopg.conninfo import make_conninfo

CHANNEL = "turnkeeper_work"


class PostgresWakeups:
    def __init__(
        self, conninfo: str, connect_timeout_s: int, options: Mapping[str, int] | None = None
    ) -> None:
        """``options``: further libpq connection parameters (the dialect's TCP timeouts)."""
        self._conninfo = make_conninfo(conninfo, **(options or {}))
        self._timeout = connect_timeout_s
        self._lock = threading.Lock()
        self._notifier: psycopg.Connection[tuple[object, ...]] | None = None
        self._listener: psycopg.Connection[tuple[object, ...]] | None = None
        self.failures = 0  # signals or waits the database did not take (tests, status)

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self._conninfo, autocommit=True, connect_timeout=self._timeout)

    def signal(self) -> None:
        with self._lock:
            try:
                if self._notifier is None or self._notifier.closed:
                    self._notifier = self._connect()
                self._notifier.execute(f"NOTIFY {CHANNEL}")
            except psycopg.Error:
                # Counted, not raised: the work is committed already, and waiters poll.
                self.failures += 1
                _close(self._notifier)
                self._notifier = None

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + max(0.0, timeout_s)
        try:
            if self._listener is None or self._listener.closed:
                self._listener = self._connect()
                self._listener.execute(f"LISTEN {CHANNEL}")
            left = max(0.0, deadline - time.monotonic())
            return any(True for _ in self._listener.notifies(timeout=left, stop_after=1))
        except psycopg.Error:
            self.failures += 1
            _close(self._listener)
            self._listener = None
            time.sleep(max(0.0, deadline - time.monotonic()))  # poll instead
            return False

    def close(self) -> None:
        with self._lock:
            _close(self._notifier)
            self._notifier = None
        _close(self._listener)
        self._listener = None


def _close(conn: psycopg.Connection[tuple[object, ...]] | None) -> None:
    """Close ``conn``, if there is one (the caller then forgets it)."""
    if conn is not None:
        with suppress(psycopg.Error):  # the server may have dropped it already
            conn.close()
