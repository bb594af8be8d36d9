"""Reads that answer from checked records only, whatever an index says.

A lookup goes through an index; when a flipped bit damaged the index entry rather
than the row, the row is still there but the lookup misses it, and "not found"
would be a wrong answer given with confidence. So a miss is confirmed against the
table itself (scanning it past its index: a miss is rare on every path that matters,
an unknown id typed by a user), and a listing reads every row of the table and
checks each one, so a row whose indexed column (its kind) is damaged fails its
checksum instead of silently dropping out of the list. A read to the end of a stream
must reach its projection's head.
"""

from __future__ import annotations

from collections.abc import Sequence

from turnkeeper.errors import DataLoss
from turnkeeper.json_types import JsonDict
from turnkeeper.store._reads import Reader
from turnkeeper.store._rows import (
    check_contiguous,
    check_created,
    event_from_row,
    index_from_row,
    projection_from_row,
    row_seq,
)
from turnkeeper.store._source import AnyRow, RecordSource
from turnkeeper.store.records import EventRecord, Projection


def _index_damaged(what: str, details: JsonDict) -> DataLoss:
    return DataLoss(
        f"{what}: the database's index misses a row its table holds (run `turnkeeper verify`)",
        reason="index_damaged",
        details=details,
    )


def confirm_missing_projection(reader: Reader, stream_id: str) -> AnyRow | None:
    """After a projection miss: ``DATA_LOSS`` unless ``stream_id`` truly has no
    projection and no events; the row, when the indexed read finds it now (a writer
    committed the stream's first append between the miss and these checks: events and
    projection commit together, so the indexed read after them must see it)."""
    unindexed = reader.projection_unindexed(stream_id)
    head = reader.events_head(stream_id)
    if not unindexed and not head:
        return None
    again = reader.projection(stream_id)
    if again is not None:
        return again
    if unindexed:
        raise _index_damaged(
            f"stream {stream_id!r}", {"stream_id": stream_id, "record": "projection"}
        )
    raise DataLoss(
        f"stream {stream_id!r} has events up to seq {head} but no projection row "
        "(run `turnkeeper verify`)",
        reason="projection_missing",
        details={"stream_id": stream_id, "record": "projection", "seq": head},
    )


def confirm_missing_entity(reader: Reader, entity_id: str) -> AnyRow | None:
    """After an index miss: ``DATA_LOSS`` when the table holds ``entity_id`` that its
    index still misses; the row, when the index finds it now (a writer committed it
    between the first lookup and the scan: index rows are only ever added, so a row
    the scan saw was committed before it and any later index lookup must find it);
    None when it is truly absent."""
    for row in reader.lookup_unindexed(entity_id):
        index_from_row(entity_id, row[1:])  # a damaged row: its own checksum error
        again = reader.lookup(entity_id)
        if again is not None:
            return again
        raise _index_damaged(f"entity {entity_id!r}", {"entity_id": entity_id, "record": "index"})
    return None


def listed_projections(reader: RecordSource, kinds: Sequence[str]) -> dict[str, list[Projection]]:
    """Every projection of each of ``kinds``, oldest stream first, from one read and one
    check of every row (whatever its kind), each with its tail (the events after its
    ``head_seq``, read by one more query).

    The tails are read first: a projection read after them is folded to the same seq
    or a later one (a stream's events are only ever added), so its tail is the events
    read past its ``head_seq``: none missing in between. Its state plus its tail is
    the stream as of the later of the two reads."""
    tails: dict[str, list[AnyRow]] = {}
    for event in reader.tails(list(kinds)) if kinds else ():
        stream_id = event[0]
        if isinstance(stream_id, str):  # else: the row fails its checksum when folded
            tails.setdefault(stream_id, []).append(event)
    found: dict[str, list[tuple[int, str, Projection]]] = {kind: [] for kind in kinds}
    for row in reader.all_projections():
        projection = projection_from_row(row[:6])
        created_at = check_created(projection.stream_id, row[6], row[7])
        listed = found.get(projection.kind)
        if listed is not None:
            tail = tails.get(projection.stream_id)
            if tail is not None:
                projection = _with_tail(projection, tail)
            listed.append((created_at, projection.stream_id, projection))
    out: dict[str, list[Projection]] = {}
    for kind, listed in found.items():
        listed.sort(key=lambda item: (item[0], item[1]))
        out[kind] = [projection for _, _, projection in listed]
    return out


def _with_tail(projection: Projection, rows: list[AnyRow]) -> Projection:
    """``projection`` with the events after its ``head_seq`` among ``rows`` (read
    before it, perhaps from an earlier ``head_seq``), checked contiguous."""
    stream_id = projection.stream_id
    tail: list[EventRecord] = []
    expected = projection.head_seq + 1
    for row in rows:
        seq = row_seq(stream_id, row)
        if seq < expected:
            continue  # folded into the projection since the tails were read
        check_contiguous(stream_id, expected, seq)
        tail.append(event_from_row(row))
        expected += 1
    return projection.model_copy(update={"tail": tuple(tail)}) if tail else projection


def confirm_stream_end(stream_id: str, last_seq: int, head: object) -> None:
    """``DATA_LOSS`` when a read that ran to the end of the stream stopped short of the
    head its projection had before the read: the events between are there, an index
    entry hid them."""
    if isinstance(head, int) and head > last_seq:
        raise DataLoss(
            f"stream {stream_id!r} is missing events {last_seq + 1}..{head}",
            reason="sequence_gap",
            details={"stream_id": stream_id, "seq": last_seq + 1, "projection_head_seq": head},
        )
