"""Database rows to records, verifying checksums on the way. Shared by every read."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Generic, TypeVar, cast

from turnkeeper.errors import DataLoss
from turnkeeper.store._checksum import (
    created_checksum,
    event_checksum,
    index_checksum,
    projection_checksum,
)
from turnkeeper.store._source import AnyRow
from turnkeeper.store.records import EventRecord, Projection

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# The rows as the schema declares them, once their column types were checked.
# (stream_id, seq, type, schema_version, payload, recorded_at, checksum): also the row
# the append path inserts.
EventColumns = tuple[str, int, str, int, str, int, str]
# (stream_id, kind, head_seq, schema_version, state, checksum)
ProjectionColumns = tuple[str, str, int, int, str, str]
# (entity_id, stream_id, entity_kind, checksum)
IndexColumns = tuple[str, str, str, str]
# (created_at, created_check)
CreatedColumns = tuple[int, str]
_Row = TypeVar("_Row", bound=AnyRow)


class _Columns(Generic[_Row]):
    """The column types of a row, checked when it is read: a damaged record header can
    make SQLite hand back a column as another type."""

    def __init__(self, *types: type) -> None:
        self.types = types

    def check(self, row: AnyRow) -> _Row:
        """``row``, typed; ``TypeError`` naming the first column of another type."""
        for value, kind in zip(row, self.types, strict=True):
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise TypeError(f"{value!r:.40} is not {kind.__name__}")
        return cast(_Row, row)  # each column was checked against _Row's types just now


# A projection's and an index row's checksums cover the columns before the checksum, in
# row order; an event's puts recorded_at before payload (_event_checksum).
_EVENT: _Columns[EventColumns] = _Columns(str, int, str, int, str, int, str)
_PROJECTION: _Columns[ProjectionColumns] = _Columns(str, str, int, int, str, str)
_INDEX: _Columns[IndexColumns] = _Columns(str, str, str, str)
_CREATED: _Columns[CreatedColumns] = _Columns(int, str)


def to_micros(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


def from_micros(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def event_from_row(row: AnyRow) -> EventRecord:
    """``row`` = (stream_id, seq, type, schema_version, payload, recorded_at, checksum)."""
    stream_id, seq, _, _, _, _, checksum = row
    event, computed = _checked(row, _EVENT, _event_checksum)
    if event is None or computed != checksum:
        raise DataLoss(
            f"event {stream_id!r} seq {seq} failed its checksum",
            reason="checksum_mismatch",
            details={
                "stream_id": stream_id,
                "seq": seq,
                "record": "event",
                "stored_checksum": checksum,
                "computed_checksum": computed,
            },
        )
    # Validation is redundant once the checksum matched what append validated.
    return EventRecord.model_construct(
        stream_id=event[0],
        seq=event[1],
        type=event[2],
        schema_version=event[3],
        payload=event[4],
        recorded_at=from_micros(event[5]),
        checksum=event[6],
    )


def _event_checksum(event: EventColumns) -> str:
    stream_id, seq, type_, schema_version, payload, recorded_at, _ = event
    return event_checksum(stream_id, seq, type_, schema_version, recorded_at, payload)


def projection_from_row(row: AnyRow) -> Projection:
    """``row`` = (stream_id, kind, head_seq, schema_version, state, checksum)."""
    stream_id, _, head_seq, _, _, checksum = row
    projection, computed = _checked(row, _PROJECTION, lambda p: projection_checksum(*p[:5]))
    if projection is None or computed != checksum:
        raise DataLoss(
            f"projection of stream {stream_id!r} (head seq {head_seq}) failed its checksum",
            reason="checksum_mismatch",
            details={
                "stream_id": stream_id,
                "seq": head_seq,
                "record": "projection",
                "stored_checksum": checksum,
                "computed_checksum": computed,
            },
        )
    return Projection.model_construct(
        stream_id=projection[0],
        kind=projection[1],
        head_seq=projection[2],
        schema_version=projection[3],
        state=projection[4],
        checksum=projection[5],
    )


def _checked(
    row: AnyRow, columns: _Columns[_Row], checksum: Callable[[_Row], str]
) -> tuple[_Row | None, str]:
    """``row`` typed, and the checksum it should carry; or None, and a mark that can
    never equal a checksum, when a column came back with the wrong type (``TypeError``)
    or as text that cannot be encoded (``UnicodeError``, a ``ValueError``): the caller
    then raises DATA_LOSS."""
    try:
        typed = columns.check(row)
        return typed, checksum(typed)
    except (TypeError, ValueError) as exc:
        return None, f"<unreadable: {exc}>"


def index_from_row(entity_id: object, row: AnyRow) -> tuple[str, str]:
    """``row`` = (stream_id, entity_kind, checksum) of ``entity_id``: who owns it."""
    stream_id, _, checksum = row
    entry, computed = _checked((entity_id, *row), _INDEX, lambda e: index_checksum(*e[:3]))
    if entry is None or computed != checksum:
        raise DataLoss(
            f"the entity index row of {entity_id!r} failed its checksum (run `turnkeeper verify`)",
            reason="checksum_mismatch",
            details={
                "entity_id": entity_id,
                "record": "index",
                "stream_id": stream_id if isinstance(stream_id, str) else None,
                "stored_checksum": checksum,
                "computed_checksum": computed,
            },
        )
    return entry[1], entry[2]


def check_created(stream_id: str, created_at: object, created_check: object) -> int:
    """A projection row's creation time (its place in a listing), checked."""
    created, computed = _checked(
        (created_at, created_check), _CREATED, lambda c: created_checksum(stream_id, c[0])
    )
    if created is None or computed != created_check:
        raise DataLoss(
            f"the creation time of stream {stream_id!r} failed its checksum",
            reason="checksum_mismatch",
            details={"stream_id": stream_id, "record": "projection", "field": "created_at"},
        )
    return created[0]


def row_seq(stream_id: str, row: AnyRow) -> int:
    """The sequence number of an event row; ``DATA_LOSS`` when it is not an integer."""
    seq = row[1]
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise DataLoss(
            f"an event of stream {stream_id!r} has an unreadable sequence number",
            reason="checksum_mismatch",
            details={"stream_id": stream_id, "record": "event", "seq": None},
        )
    return seq


def check_contiguous(stream_id: str, expected: int, seq: int) -> None:
    if seq != expected:
        raise DataLoss(
            f"stream {stream_id!r} is missing events {expected}..{seq - 1}",
            reason="sequence_gap",
            details={"stream_id": stream_id, "seq": expected, "next_present_seq": seq},
        )
