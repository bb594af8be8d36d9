"""The SQL event store: SQLite today, PostgreSQL through the same code later.

Appends go through :class:`~turnkeeper.store._writer.GroupCommitWriter` on a
raw DBAPI connection (the hot path); reads run fixed SQL on pooled DBAPI
connections (_connections.py); the schema is owned by Alembic migrations. On
SQLite, SQLAlchemy and Alembic are imported only to migrate, verify or repair.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from turnkeeper.errors import FailedPrecondition, InvalidArgument
from turnkeeper.store._dialect import DEFAULT_BUSY_TIMEOUT_S, Dialect, dialect_for
from turnkeeper.store._guards import (
    confirm_missing_entity,
    confirm_missing_projection,
    confirm_stream_end,
    listed_projections,
)
from turnkeeper.store._migrate import ensure_schema
from turnkeeper.store._prepare import (
    append_types,
    check_id,
    prepare_checks,
    prepare_write,
    prepare_writes,
)
from turnkeeper.store._reads import Reader
from turnkeeper.store._rows import (
    check_contiguous,
    event_from_row,
    index_from_row,
    projection_from_row,
    row_seq,
)
from turnkeeper.store.base import EventStore
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

if TYPE_CHECKING:
    # Imported by the first append (SqlEventStore._the_writer): a command that only
    # reads never imports the append path.
    from turnkeeper.store._writer import GroupCommitWriter

# How often the offset between this machine's clock and the database's is read again
# (between reads, time on the database's clock is this machine's plus the offset).
CLOCK_RESAMPLE_S = 10.0


class SqlEventStore(EventStore):
    """An :class:`EventStore` on a SQL database. Thread-safe; one instance per process is
    enough (its appends share commits), several processes may open the same database."""

    def __init__(
        self, url_or_path: str | Path, *, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S
    ) -> None:
        self._dialect: Dialect = dialect_for(url_or_path, busy_timeout_s)
        self._connections = self._dialect.connections()
        self._reader = Reader(self._connections, self._dialect)
        self._close_lock = threading.Lock()
        self._closed = False
        self._wakeups = self._dialect.wakeups()
        self._clock_lock = threading.Lock()
        self._offset_us = 0
        self._offset_read_at = -float("inf")
        self._writer: GroupCommitWriter | None = None  # made by the first append
        try:
            with self._reader.errors(operation="open"):
                self._dialect.check_file()
                ensure_schema(self._connections, self._dialect)
        except BaseException:
            self._connections.dispose()
            raise

    @property
    def url(self) -> str:
        return self._dialect.url

    @property
    def writer(self) -> GroupCommitWriter:
        """The append path, exposed for its commit statistics."""
        return self._the_writer()

    def _the_writer(self) -> GroupCommitWriter:
        """The append path, made on first use. A command that only reads (``status``,
        a listing) then neither imports it nor checks a connection out for it: ~0.4%
        of ``status``'s instructions at 1,000 sessions."""
        writer = self._writer
        if writer is None:
            from turnkeeper.store._writer import GroupCommitWriter

            with self._close_lock:  # never made after close() (or twice)
                self._check_open()
                if self._writer is None:
                    with self._reader.errors(operation="open"):
                        self._writer = GroupCommitWriter(
                            self._connections.raw_connection, self._dialect
                        )
                writer = self._writer
        return writer

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
        _, request = append_types()
        self._the_writer().submit(request([part], durable))
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
        _, request = append_types()
        self._the_writer().submit(request(parts, durable, checks))
        return [part.new_head for part in parts]

    # -- reads -------------------------------------------------------------------------

    def head(self, stream_id: str) -> int:
        self._check_open()
        check_id("stream_id", stream_id)
        return self._reader.events_head(stream_id)

    def heads(self, stream_ids: Sequence[str]) -> list[int]:
        self._check_open()
        for stream_id in stream_ids:
            check_id("stream_id", stream_id)
        return self._reader.events_heads(stream_ids)

    def read_stream(
        self, stream_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        self._check_open()
        check_id("stream_id", stream_id)
        if after_seq < 0 or (limit is not None and limit < 0):
            raise InvalidArgument("after_seq and limit must be >= 0", reason="bad_range")
        # Read with the events, as of the same moment: a read to the end of the stream
        # must reach the head its projection had then (written with the same events; a
        # damaged index can end the read early). A stream without a projection row has
        # its events read alone (none, unless the row was lost: verify says so).
        read = self._reader.events_after_head(stream_id, after_seq, limit)
        if read is None:
            head_before: object = None
            rows = self._reader.events(stream_id, after_seq, limit=limit)
        else:
            head_before, rows = read
        out: list[EventRecord] = []
        expected = after_seq + 1
        for row in rows:
            check_contiguous(stream_id, expected, row_seq(stream_id, row))
            out.append(event_from_row(row))
            expected += 1
        if limit is None or len(out) < limit:
            confirm_stream_end(stream_id, expected - 1, head_before)
        return out

    def read_projection(self, stream_id: str) -> Projection | None:
        self._check_open()
        check_id("stream_id", stream_id)
        row = self._reader.projection(stream_id)
        if row is None:
            row = confirm_missing_projection(self._reader, stream_id)
            if row is None:
                return None
        return projection_from_row(row)

    def list_projections(self, kind: str) -> list[Projection]:
        self._check_open()
        check_id("kind", kind)
        return listed_projections(self._reader, (kind,))[kind]

    def list_projections_of(self, kinds: Sequence[str]) -> dict[str, list[Projection]]:
        self._check_open()
        for kind in kinds:
            check_id("kind", kind)
        return listed_projections(self._reader, kinds)

    def lookup(self, entity_id: str) -> tuple[str, str] | None:
        self._check_open()
        check_id("entity_id", entity_id)
        row = self._reader.lookup(entity_id)
        if row is None:
            row = confirm_missing_entity(self._reader, entity_id)
            if row is None:
                return None
        return index_from_row(entity_id, row)

    def lookup_prefix(self, prefix: str, entity_kind: str) -> list[str]:
        self._check_open()
        check_id("prefix", prefix)
        check_id("entity_kind", entity_kind)
        if not prefix:
            raise InvalidArgument("an id prefix must not be empty", reason="empty_id")
        found: list[str] = []
        for row in self._reader.lookup_prefix(prefix):
            entity_id = row[0]
            # Checked before the kind is compared: a damaged row is DATA_LOSS, never a
            # silently shorter list that would make another id look unique.
            _, kind = index_from_row(entity_id, row[1:])
            if kind == entity_kind and isinstance(entity_id, str):  # it is: checked above
                found.append(entity_id)
        return sorted(found)

    # -- integrity ---------------------------------------------------------------------

    # verify and repair are imported by the commands that run them: ~15 ms of import
    # that every other command (status, a turn) would pay for nothing.
    def verify(self, folder: ProjectionFolder) -> VerifyReport:
        from turnkeeper.store import _verify

        self._check_open()
        return _verify.verify(self._reader, folder)

    def repair(self, folder: ProjectionFolder) -> RepairReport:
        from turnkeeper.store import _verify

        self._check_open()
        return _verify.repair(self._reader, folder)

    # -- the database's clock and wake-ups ----------------------------------------------

    def now(self) -> datetime:
        if not self._dialect.own_clock:
            return datetime.now(UTC)
        with self._clock_lock:
            if time.monotonic() - self._offset_read_at > CLOCK_RESAMPLE_S:
                self._offset_us = self._dialect.clock_offset_us(
                    lambda sql: self._reader.driver_rows(sql, (), operation="clock")
                )
                self._offset_read_at = time.monotonic()
            offset = self._offset_us
        return datetime.now(UTC) + timedelta(microseconds=offset)

    def signal_work(self) -> None:
        if self._wakeups is not None:
            self._wakeups.signal()

    def wait_for_work(self, timeout_s: float) -> bool:
        if self._wakeups is None:
            return super().wait_for_work(timeout_s)
        return self._wakeups.wait(timeout_s)

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            writer = self._writer
        try:
            if writer is not None:
                writer.close()  # queued appends commit first
        finally:
            if self._wakeups is not None:
                self._wakeups.close()
            self._connections.dispose()

    def _check_open(self) -> None:
        if self._closed:
            raise FailedPrecondition("the store is closed", reason="store_closed")


def display_url(url: str) -> str:
    """A database URL fit to show: its password, if any, masked."""
    if "://" not in url or "@" not in url.split("://", 1)[1].split("/", 1)[0]:
        return url
    from sqlalchemy.engine.url import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not parseable: show only its scheme
        return url.split("://", 1)[0] + "://…"


def open_store(
    url_or_path: str | Path, *, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S
) -> SqlEventStore:
    """Open (creating or upgrading as needed) the store at a file path or database URL."""
    return SqlEventStore(url_or_path, busy_timeout_s=busy_timeout_s)
