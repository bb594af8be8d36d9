"""An :class:`~turnkeeper.store.base.EventStore` held in this process's memory.

For embedding and tests: no file, no server, nothing survives the process. It keeps
every guarantee of the contract that makes sense in memory (docs/storage.md): an
append or ``append_many`` is atomic, sequences are gapless, a stale ``expected_seq``
is a ``StreamConflict`` that writes nothing, entity ids have one owner, and every
row carries the SQL store's checksum and is checked on every read, so a damaged row
is ``DATA_LOSS``, never a wrong answer. ``durable`` is accepted and means nothing
here: an acknowledged append lives exactly as long as the database object.

Several stores may share one :class:`MemoryDatabase` (as several SQL stores share a
database): pass it to each, or open the same name with :func:`open_memory_store`.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Sequence

from turnkeeper.errors import DataLoss, FailedPrecondition, InvalidArgument
from turnkeeper.store._guards import confirm_stream_end, listed_projections
from turnkeeper.store._memory_tables import MemoryDatabase
from turnkeeper.store._prepare import check_id, prepare_checks, prepare_write, prepare_writes
from turnkeeper.store._rows import (
    check_contiguous,
    event_from_row,
    index_from_row,
    projection_from_row,
    row_seq,
)
from turnkeeper.store.base import EventStore
from turnkeeper.store.opening import MEMORY_SCHEME as SCHEME
from turnkeeper.store.records import (
    EventRecord,
    HeadCheck,
    IndexEntry,
    NewEvent,
    Projection,
    ProjectionFolder,
    RepairReport,
    StreamAppend,
    VerifyReport,
)

__all__ = ["MemoryDatabase", "MemoryEventStore", "open_memory_store"]


class MemoryEventStore(EventStore):
    """An event store in memory. Thread-safe; every instance given the same
    :class:`MemoryDatabase` sees the same streams (a new one of its own by default)."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.database = MemoryDatabase() if database is None else database
        self._closed = False

    # -- writes ------------------------------------------------------------------------

    def append(
        self,
        stream_id: str,
        kind: str,
        expected_seq: int,
        events: Sequence[NewEvent],
        projection_state: str | None,
        projection_schema_version: int,
        index: Sequence[IndexEntry] = (),
        *,
        durable: bool = True,
    ) -> int:
        part = prepare_write(
            stream_id,
            kind,
            expected_seq,
            events,
            projection_state,
            projection_schema_version,
            index,
            time.time_ns() // 1000,
        )
        self._check_open()
        self.database.commit([part])
        return part.new_head

    def append_many(
        self,
        appends: Sequence[StreamAppend],
        *,
        durable: bool = True,
        unchanged: Sequence[HeadCheck] = (),
    ) -> list[int]:
        parts = prepare_writes(appends)
        checks = prepare_checks(appends, unchanged)
        self._check_open()
        self.database.commit(parts, checks)
        return [part.new_head for part in parts]

    # -- reads -------------------------------------------------------------------------

    def head(self, stream_id: str) -> int:
        self._check_open()
        check_id("stream_id", stream_id)
        return self.database.events_head(stream_id)

    def heads(self, stream_ids: Sequence[str]) -> list[int]:
        self._check_open()
        for stream_id in stream_ids:
            check_id("stream_id", stream_id)
        with self.database.lock:  # all of them as of one moment
            rows = [self.database.event_rows.get(s) for s in stream_ids]
            return [row_seq(s, r[-1]) if r else 0 for s, r in zip(stream_ids, rows, strict=True)]

    def read_stream(
        self, stream_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        self._check_open()
        check_id("stream_id", stream_id)
        if after_seq < 0 or (limit is not None and limit < 0):
            raise InvalidArgument("after_seq and limit must be >= 0", reason="bad_range")
        projection = self.database.projection(stream_id)
        head_before = None if projection is None else projection[2]
        out: list[EventRecord] = []
        expected = after_seq + 1
        for row in self.database.events(stream_id, after_seq, limit=limit):
            check_contiguous(stream_id, expected, row_seq(stream_id, row))
            out.append(event_from_row(row))
            expected += 1
        if limit is None or len(out) < limit:
            confirm_stream_end(stream_id, expected - 1, head_before)
        return out

    def read_projection(self, stream_id: str) -> Projection | None:
        self._check_open()
        check_id("stream_id", stream_id)
        row = self.database.projection(stream_id)
        if row is not None:
            return projection_from_row(row)
        head = self.database.events_head(stream_id)
        if head:
            raise DataLoss(
                f"stream {stream_id!r} has events up to seq {head} but no projection row "
                "(run `turnkeeper verify`)",
                reason="projection_missing",
                details={"stream_id": stream_id, "record": "projection", "seq": head},
            )
        return None

    def list_projections(self, kind: str) -> list[Projection]:
        self._check_open()
        check_id("kind", kind)
        return listed_projections(self.database, (kind,))[kind]

    def list_projections_of(self, kinds: Sequence[str]) -> dict[str, list[Projection]]:
        self._check_open()
        for kind in kinds:
            check_id("kind", kind)
        return listed_projections(self.database, kinds)

    def lookup(self, entity_id: str) -> tuple[str, str] | None:
        self._check_open()
        check_id("entity_id", entity_id)
        with self.database.lock:
            row = self.database.index_rows.get(entity_id)
        return None if row is None else index_from_row(entity_id, row[2:])

    def lookup_prefix(self, prefix: str, entity_kind: str) -> list[str]:
        self._check_open()
        check_id("prefix", prefix)
        check_id("entity_kind", entity_kind)
        if not prefix:
            raise InvalidArgument("an id prefix must not be empty", reason="empty_id")
        with self.database.lock:
            rows = list(self.database.index_rows.items())
        found: list[str] = []
        for entity_id, row in rows:
            if entity_id.startswith(prefix):
                # Checked before the kind is compared: a damaged row is DATA_LOSS, never
                # a silently shorter list that would make another id look unique.
                _, kind = index_from_row(entity_id, row[2:])
                if kind == entity_kind:
                    found.append(entity_id)
        return sorted(found)

    # -- integrity: the SQL store's checks, over the same rows --------------------------

    def verify(self, folder: ProjectionFolder) -> VerifyReport:
        from turnkeeper.store import _verify

        self._check_open()
        return _verify.verify(self.database, folder)

    def repair(self, folder: ProjectionFolder) -> RepairReport:
        from turnkeeper.store import _verify

        self._check_open()
        return _verify.repair(self.database, folder)

    # -- wake-ups between the stores of one database --------------------------------------

    def signal_work(self) -> None:
        with self.database.work:
            self.database.signals += 1
            self.database.work.notify_all()

    def wait_for_work(self, timeout_s: float) -> bool:
        database = self.database
        with database.work:
            seen = database.signals
            return database.work.wait_for(lambda: database.signals != seen, max(0.0, timeout_s))

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Refuse further calls; the database lives on for the stores that share it."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise FailedPrecondition("the store is closed", reason="store_closed")


# Named databases: alive while a store (or anything else) holds them, like SQLite's
# shared in-memory databases, so a program that drops every store frees the memory.
_named: weakref.WeakValueDictionary[str, MemoryDatabase] = weakref.WeakValueDictionary()
_named_lock = threading.Lock()


def open_memory_store(url: str = SCHEME) -> MemoryEventStore:
    """A store on ``memory:`` (a new, private database) or ``memory:NAME`` (the
    database of that name in this process, shared by every store opened on it and
    created by the first; it is freed when no store holds it any more)."""
    if not url.startswith(SCHEME):
        raise InvalidArgument(
            f"an in-memory store's URL starts with {SCHEME!r}: {url!r}", reason="bad_url"
        )
    name = url.removeprefix(SCHEME)
    if not name:
        return MemoryEventStore()
    with _named_lock:
        database = _named.get(name)
        if database is None:
            database = _named[name] = MemoryDatabase()
    return MemoryEventStore(database)
