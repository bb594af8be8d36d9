"""The append path's head checks: how a batch's checked writes are sent in one
pipeline, and why a head check failed, for the writer (_writer.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from turnkeeper.errors import FailedPrecondition, InvalidArgument, StreamConflict, TurnkeeperError
from turnkeeper.json_types import JsonDict
from turnkeeper.store._dialect import DBAPICursor, SqlParams
from turnkeeper.store._reads import as_int

if TYPE_CHECKING:
    from turnkeeper.store._writer import AppendRequest, StreamWrite


def pipeline_steps(
    batch: list[AppendRequest], sql: Mapping[str, str]
) -> list[tuple[str, list[SqlParams]]]:
    """The batch's statements for :meth:`Dialect.pipelined_commit`, each write
    checked in the statement itself: the projections, then all events in one
    batch, then all index entries."""
    steps: list[tuple[str, list[SqlParams]]] = []
    events: list[SqlParams] = []
    index: list[SqlParams] = []
    for req in batch:
        for stream_id, expected in req.checks:
            steps.append((sql["checked_head"], [(stream_id, expected)]))
        for part in req.parts:
            sv, state, checksum, created_at, created_check = part.projection
            if part.expected_seq == 0:
                row: SqlParams = (
                    part.stream_id, part.kind, part.new_head, sv, state, checksum,
                    created_at, created_check,
                )  # fmt: skip
                steps.append((sql["checked_insert"], [row]))
            else:
                row = (
                    part.new_head, sv, state, checksum, part.stream_id, part.expected_seq,
                    part.kind,
                )  # fmt: skip
                steps.append((sql["checked_update"], [row]))
            events += part.events
            index += [entry + entry for entry in part.index]
    steps.append((sql["event"], events))
    if index:
        steps.append((sql["checked_index"], index))
    return steps


def moved(stream_id: str, expected: int, actual: int) -> StreamConflict:
    """A stream an ``append_many`` was to find unchanged at ``expected`` is at ``actual``."""
    return StreamConflict(
        f"stream {stream_id!r}: expected head {expected}, actual {actual}",
        reason="stream_conflict",
        details={"stream_id": stream_id, "expected_seq": expected, "actual_seq": actual},
    )


def check_heads(
    cur: DBAPICursor,
    sql: Mapping[str, str],
    pending: Mapping[str, int],
    checks: Sequence[tuple[str, int]],
) -> TurnkeeperError | None:
    """The first of ``checks`` whose stream moved, as its error; read on the writer's
    cursor inside its transaction, which holds the write lock on SQLite (on
    PostgreSQL a concurrent append to the stream commits before or after this
    transaction, as one checked by a read before the commit would). ``pending``: the
    heads the batch wrote so far, which the events table does not show yet."""
    for stream_id, expected in checks:
        head = pending.get(stream_id)
        if head is None:
            cur.execute(sql["events_head"], (stream_id,))
            found = cur.fetchone()
            head = as_int(found[0]) if found and found[0] is not None else 0
        if head != expected:
            return moved(stream_id, expected, head)
    return None


def conflict(
    cur: DBAPICursor, sql: Mapping[str, str], pending: Mapping[str, int], part: StreamWrite
) -> TurnkeeperError:
    """Why the conditional projection write of ``part`` matched no row (the failure
    path only): read on the writer's cursor, inside its transaction; ``pending``: the
    heads the batch wrote so far, which the events table does not show yet."""
    cur.execute(sql["proj_head"], (part.stream_id,))
    row = cur.fetchone()
    details: JsonDict = {"stream_id": part.stream_id, "expected_seq": part.expected_seq}
    if row is not None and as_int(row[0]) == part.expected_seq and row[1] != part.kind:
        return InvalidArgument(
            f"stream {part.stream_id!r} is a {row[1]!r} stream, not {part.kind!r}",
            reason="stream_kind_mismatch",
            details={**details, "kind": row[1], "requested_kind": part.kind},
        )
    head = pending.get(part.stream_id)
    if head is None:
        cur.execute(sql["events_head"], (part.stream_id,))
        found = cur.fetchone()
        head = as_int(found[0]) if found and found[0] is not None else 0
        if row is not None and as_int(row[0]) != head:
            # Under PostgreSQL's READ COMMITTED each statement sees the latest commit:
            # another writer's append between the two reads moves the events ahead of
            # the projection read first. If the projection moved too, that is what
            # happened — a conflict, not damage (an append always moves both).
            cur.execute(sql["proj_head"], (part.stream_id,))
            again = cur.fetchone()
            if again is None or as_int(again[0]) != as_int(row[0]):
                return StreamConflict(
                    f"stream {part.stream_id!r}: expected head {part.expected_seq}, "
                    f"another writer appended meanwhile",
                    reason="stream_conflict",
                    details={**details, "actual_seq": head},
                )
    if row is not None and as_int(row[0]) != head:
        # Only damage or tampering separates the two; appending would fork the stream.
        return FailedPrecondition(
            f"stream {part.stream_id!r}: projection head {row[0]} but events run to {head}; "
            "run repair",
            reason="projection_stale",
            details={**details, "seq": head, "projection_head_seq": as_int(row[0])},
        )
    return StreamConflict(
        f"stream {part.stream_id!r}: expected head {part.expected_seq}, actual {head}",
        reason="stream_conflict",
        details={**details, "actual_seq": head},
    )
