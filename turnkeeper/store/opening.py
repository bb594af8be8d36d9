"""Open any backend of the store by its URL.

``open_store`` (sql.py) opens the SQL backends and returns a
:class:`~turnkeeper.store.sql.SqlEventStore`, with its SQL-only extras (its URL, its
writer's statistics). :func:`open_event_store` opens every backend, the in-memory one
included, behind the backend-neutral :class:`~turnkeeper.store.base.EventStore`.
"""

from __future__ import annotations

from pathlib import Path

from turnkeeper.store._dialect import DEFAULT_BUSY_TIMEOUT_S
from turnkeeper.store.base import EventStore
from turnkeeper.store.sql import open_store

MEMORY_SCHEME = "memory:"


def open_event_store(
    url_or_path: str | Path, *, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S
) -> EventStore:
    """The store at ``url_or_path``: ``memory:`` (a new in-memory database),
    ``memory:NAME`` (this process's in-memory database of that name), or a SQLite file
    path or ``sqlite:///``/``postgresql://`` URL as :func:`open_store` takes them."""
    if isinstance(url_or_path, str) and url_or_path.startswith(MEMORY_SCHEME):
        from turnkeeper.store.memory import open_memory_store

        return open_memory_store(url_or_path)
    return open_store(url_or_path, busy_timeout_s=busy_timeout_s)
