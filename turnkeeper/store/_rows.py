"""Database rows to records, verifying checksums on the way. Shared by every read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from turnkeeper.errors import DataLoss
from turnkeeper.store._checksum import event_checksum, projection_checksum
from turnkeeper.store.records import EventRecord, Projection

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_micros(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


def from_micros(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def event_from_row(row: Any) -> EventRecord:
    """``row`` = (stream_id, seq, type, schema_version, payload, recorded_at, checksum)."""
    stream_id, seq, type_, schema_version, payload, recorded_at, checksum = row
    try:
        computed = event_checksum(stream_id, seq, type_, schema_version, recorded_at, payload)
    except (TypeError, ValueError) as exc:  # a column came back with the wrong type
        computed = f"<unreadable: {exc}>"
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
    try:
        computed = projection_checksum(stream_id, kind, head_seq, schema_version, state)
    except (TypeError, ValueError) as exc:
        computed = f"<unreadable: {exc}>"
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


def check_contiguous(stream_id: str, expected: int, seq: int) -> None:
    if seq != expected:
        raise DataLoss(
            f"stream {stream_id!r} is missing events {expected}..{seq - 1}",
            reason="sequence_gap",
            details={"stream_id": stream_id, "seq": expected, "next_present_seq": seq},
        )
