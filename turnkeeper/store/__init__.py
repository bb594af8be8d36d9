"""The durable event store: append-only streams plus one projection row per stream."""

from turnkeeper.store.base import EventStore
from turnkeeper.store.records import (
    EventRecord,
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
    "IndexEntry",
    "Mismatch",
    "MismatchKind",
    "NewEvent",
    "Projection",
    "ProjectionFolder",
    "RepairReport",
    "SqlEventStore",
    "StreamAppend",
    "VerifyReport",
    "open_store",
]
