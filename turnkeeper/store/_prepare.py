"""An append's arguments checked and turned into rows with their checksums.

Every backend appends the same rows: the SQL store inserts them, the in-memory
store keeps them (memory.py); both validate the arguments here, so an append a
backend refuses is refused alike by every backend.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

from turnkeeper.errors import InvalidArgument
from turnkeeper.store._checksum import (
    created_checksum,
    event_checksum,
    index_checksum,
    projection_checksum,
)
from turnkeeper.store._rows import EventColumns
from turnkeeper.store.records import HeadCheck, IndexEntry, NewEvent, StreamAppend

if TYPE_CHECKING:
    from turnkeeper.store._writer import AppendRequest, StreamWrite


def prepare_writes(appends: Sequence[StreamAppend]) -> list[StreamWrite]:
    """``append_many``'s parts checked and built, each with :func:`prepare_write`: at
    least one part, no stream twice, one moment for all their events."""
    if not appends:
        raise InvalidArgument("append_many needs at least one part", reason="no_appends")
    recorded_at = time.time_ns() // 1000
    seen: set[str] = set()
    for i, a in enumerate(appends):
        if a.stream_id in seen:
            raise InvalidArgument(
                f"stream {a.stream_id!r} appears twice in one append_many",
                reason="duplicate_stream",
                details={"stream_id": a.stream_id, "part": i},
            )
        seen.add(a.stream_id)
    return [
        prepare_write(
            a.stream_id,
            a.kind,
            a.expected_seq,
            a.events,
            a.projection_state,
            a.projection_schema_version,
            a.index,
            recorded_at,
        )
        for a in appends
    ]


def prepare_checks(
    appends: Sequence[StreamAppend], unchanged: Sequence[HeadCheck]
) -> list[tuple[str, int]]:
    """``append_many``'s head checks as ``(stream id, head)``: each stream once, none
    of them one the call appends to (its own part checks its head already)."""
    appended = {a.stream_id for a in appends}
    checks: list[tuple[str, int]] = []
    for check in unchanged:
        check_id("stream_id", check.stream_id)
        if check.head_seq < 0:
            raise InvalidArgument(
                f"head_seq {check.head_seq} < 0",
                reason="bad_expected_seq",
                details={"stream_id": check.stream_id},
            )
        if check.stream_id in appended or any(s == check.stream_id for s, _ in checks):
            raise InvalidArgument(
                f"stream {check.stream_id!r} appears twice in one append_many",
                reason="duplicate_stream",
                details={"stream_id": check.stream_id},
            )
        checks.append((check.stream_id, check.head_seq))
    return checks


def prepare_write(
    stream_id: str,
    kind: str,
    expected_seq: int,
    events: Sequence[NewEvent],
    projection_state: str | None,
    projection_schema_version: int,
    index: Sequence[IndexEntry],
    recorded_at: int,
) -> StreamWrite:
    """Validate one stream's append and build its rows and checksums (outside the lock)."""
    if not stream_id or not kind:
        raise InvalidArgument("stream_id and kind must be non-empty", reason="empty_id")
    check_id("stream_id", stream_id)
    check_id("kind", kind)
    for entry in index:
        check_id("entity_id", entry.entity_id)
        check_id("entity_kind", entry.entity_kind)
    if expected_seq < 0:
        raise InvalidArgument(
            f"expected_seq {expected_seq} < 0",
            reason="bad_expected_seq",
            details={"stream_id": stream_id},
        )
    if projection_state is None and expected_seq == 0:
        # A stream's first append creates its projection row: its kind and creation
        # time live there, and a reader folds from it.
        raise InvalidArgument(
            "a new stream's first append needs its projection",
            reason="projection_required",
            details={"stream_id": stream_id},
        )
    if not events:
        # A projection change without events would break "projection = fold(events)".
        raise InvalidArgument(
            "an append needs at least one event",
            reason="no_events",
            details={"stream_id": stream_id},
        )
    seq = expected_seq
    try:
        rows: list[EventColumns] = []
        for ev in events:
            seq += 1
            type_, version, payload = ev.type, ev.schema_version, ev.payload
            checksum = event_checksum(
                stream_id, seq, type_, version, recorded_at, payload, strict=True
            )
            rows.append((stream_id, seq, type_, version, payload, recorded_at, checksum))
        projection: tuple[int, str, str, int, str] | None = None
        if projection_state is not None:
            projection = (
                projection_schema_version,
                projection_state,
                projection_checksum(
                    stream_id, kind, seq, projection_schema_version, projection_state, strict=True
                ),
                recorded_at,
                created_checksum(stream_id, recorded_at, strict=True),
            )
        index_rows = [
            (
                e.entity_id,
                stream_id,
                e.entity_kind,
                index_checksum(e.entity_id, stream_id, e.entity_kind, strict=True),
            )
            for e in index
        ]
    except UnicodeEncodeError as exc:
        raise InvalidArgument(
            f"text for stream {stream_id!r} is not valid UTF-8: {exc.reason}",
            reason="bad_text",
            details={"stream_id": stream_id},
        ) from exc
    stream_write, _ = append_types()
    return stream_write(
        stream_id=stream_id,
        kind=kind,
        expected_seq=expected_seq,
        new_head=seq,
        projection=projection,
        events=rows,
        index=index_rows,
    )


@cache
def append_types() -> tuple[type[StreamWrite], type[AppendRequest]]:
    """The append path's records, imported by the first append: a command that only
    reads never imports the writer (see ``SqlEventStore._the_writer``). Imported once: an import
    statement on every append cost more than the rest of preparing its rows."""
    from turnkeeper.store._writer import AppendRequest, StreamWrite

    return StreamWrite, AppendRequest


def check_id(name: str, value: str) -> None:
    """Ids are text without NUL: PostgreSQL cannot store one in a text column, so no
    backend takes one (a lookup of such an id is a caller's error, not a miss)."""
    if "\x00" in value:
        raise InvalidArgument(
            f"{name} must not contain a NUL character", reason="bad_text", details={"field": name}
        )
