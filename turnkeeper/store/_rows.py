"""Database rows to records, verifying checksums on the way. Shared by every read."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from turnkeeper.errors import DataLoss
from turnkeeper.store._checksum import (
    created_checksum,
    event_checksum,
    index_checksum,
    projection_checksum,
)
from turnkeeper.store.records import EventRecord, Projection

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_micros(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


def from_micros(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def event_from_row(row: Any) -> EventRecord:
    """``row`` = (stream_id, seq, type, schema_version, payload, recorded_at, checksum)."""
    stream_id, seq, type_, schema_version, payload, recorded_at, checksum = row
    computed = _recomputed(
        row,
        (str, int, str, int, str, int, str),
        lambda: event_checksum(stream_id, seq, type_, schema_version, recorded_at, payload),
    )
    if computed != checksum:
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
        stream_id=stream_id,
        seq=seq,
        type=type_,
        schema_version=schema_version,
        payload=payload,
        recorded_at=from_micros(recorded_at),
        checksum=checksum,
    )


def projection_from_row(row: Any) -> Projection:
    """``row`` = (stream_id, kind, head_seq, schema_version, state, checksum)."""
    stream_id, kind, head_seq, schema_version, state, checksum = row
    computed = _recomputed(
        row,
        (str, str, int, int, str, str),
        lambda: projection_checksum(stream_id, kind, head_seq, schema_version, state),
    )
    if computed != checksum:
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
        stream_id=stream_id,
        kind=kind,
        head_seq=head_seq,
        schema_version=schema_version,
        state=state,
        checksum=checksum,
    )


def _recomputed(row: Any, types: tuple[type, ...], checksum: Callable[[], str]) -> str:
    """The checksum ``row`` should carry, or a mark that can never equal one when a
    column came back with the wrong type (``TypeError``) or as text that cannot be
    encoded (``UnicodeError``, a ``ValueError``): the caller then raises DATA_LOSS."""
    try:
        _types(row, types)
        return checksum()
    except (TypeError, ValueError) as exc:
        return f"<unreadable: {exc}>"


def _types(row: Any, types: tuple[type, ...]) -> None:
    """A damaged record header can make SQLite hand back a column as another type."""
    for value, kind in zip(row, types, strict=True):
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise TypeError(f"{value!r:.40} is not {kind.__name__}")


def index_from_row(entity_id: str, row: Any) -> tuple[str, str]:
    """``row`` = (stream_id, entity_kind, checksum) of ``entity_id``: who owns it."""
    stream_id, entity_kind, checksum = row
    computed = _recomputed(
        row, (str, str, str), lambda: index_checksum(entity_id, stream_id, entity_kind)
    )
    if computed != checksum:
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
    return stream_id, entity_kind


def check_created(stream_id: str, created_at: Any, created_check: Any) -> int:
    """A projection row's creation time (its place in a listing), checked."""
    computed = _recomputed(
        (created_at, created_check), (int, str), lambda: created_checksum(stream_id, created_at)
    )
    if computed != created_check:
        raise DataLoss(
            f"the creation time of stream {stream_id!r} failed its checksum",
            reason="checksum_mismatch",
            details={"stream_id": stream_id, "record": "projection", "field": "created_at"},
        )
    return int(created_at)


def row_seq(stream_id: str, row: Any) -> int:
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
