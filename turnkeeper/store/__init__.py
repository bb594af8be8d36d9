"""The event store: append-only streams plus one projection row per stream.

:class:`EventStore` (base.py) is the contract every backend keeps
(docs/storage.md); :class:`SqlEventStore` keeps it on SQLite and PostgreSQL,
:class:`MemoryEventStore` in memory. ``open_store`` opens the SQL backends,
``open_event_store`` any of them by URL (``memory:`` included).
"""

from turnkeeper.store.base import EventStore
from turnkeeper.store.memory import MemoryEventStore
from turnkeeper.store.opening import open_event_store
from turnkeeper.store.records import (
    EventRecord,
    HeadCheck,
    IndexEntry,
    Mismatch,
    MismatchKind,
    NewEvent,
    Projection,
    ProjectionFolder,
    RepairReport,
    StreamAppend,
    VerifyReport,
)
from turnkeeper.store.sql import SqlEventStore, open_store

__all__ = [
    "EventRecord",
    "EventStore",
    "HeadCheck",
    "IndexEntry",
    "MemoryEventStore",
    "Mismatch",
    "MismatchKind",
    "NewEvent",
    "Projection",
    "ProjectionFolder",
    "RepairReport",
    "SqlEventStore",
    "StreamAppend",
    "VerifyReport",
    "open_event_store",
    "open_store",
]
