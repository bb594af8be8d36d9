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
) -> list[tuple[str, list[SqlParams]]] | None:
    """The batch's statements for :meth:`Dialect.pipelined_commit`, each write
    checked in the statement itself: the projections, then all events in one
    batch, then all index entries. None: the batch cannot be checked in one
    pipeline (a stream it appends to is to be found unchanged by a later request,
    which could not see the append's events yet); it goes statement by statement."""
    steps: list[tuple[str, list[SqlParams]]] = []
    events: list[SqlParams] = []
    index: list[SqlParams] = []
    appended: set[str] = set()
    for req in batch:
        for stream_id, expected in req.checks:
            if stream_id in appended:
                return None
            steps.append((sql["checked_unchanged"], [(stream_id, expected)]))
        appended.update(part.stream_id for part in req.parts)
        for part in req.parts:
            if part.projection is None:
                # The head and kind checked alone: the projection row stays behind.
                row: SqlParams = (
                    part.stream_id, part.kind, part.expected_seq, part.stream_id,
                    part.expected_seq,
                )  # fmt: skip
                steps.append((sql["checked_head"], [row]))
            elif part.expected_seq == 0:
                sv, state, checksum, created_at, created_check = part.projection
                row = (
                    part.stream_id, part.kind, part.new_head, sv, state, checksum,
                    created_at, created_check,
                )  # fmt: skip
                steps.append((sql["checked_insert"], [row]))
            else:
                sv, state, checksum, _, _ = part.projection
                row = (
                    part.new_head, sv, state, checksum, part.stream_id, part.kind,
                    part.expected_seq, part.stream_id, part.expected_seq,
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
            head = _events_head(cur, sql, stream_id)
        if head != expected:
            return moved(stream_id, expected, head)
    return None


def conflict(
    cur: DBAPICursor, sql: Mapping[str, str], pending: Mapping[str, int], part: StreamWrite
) -> TurnkeeperError:
    """Why the head check of ``part`` failed (the failure path only): read on the
    writer's cursor, inside its transaction; ``pending``: the heads the batch wrote so
    far, which the events table does not show yet.

    The stream's head is its events' last seq. Its projection row may be folded to an
    earlier one (an append may leave it behind); one folded to a LATER seq than the
    events hold is damage (``projection_stale``: appending would fork the stream).
    The row is read before the events, so under PostgreSQL's READ COMMITTED an append
    committed between the two reads only moves the events further ahead of it."""
    cur.execute(sql["proj_head"], (part.stream_id,))
    row = cur.fetchone()
    details: JsonDict = {"stream_id": part.stream_id, "expected_seq": part.expected_seq}
    head = pending.get(part.stream_id)
    if head is None:
        head = _events_head(cur, sql, part.stream_id)
    if row is not None and head == part.expected_seq and row[1] != part.kind:
        return InvalidArgument(
            f"stream {part.stream_id!r} is a {row[1]!r} stream, not {part.kind!r}",
            reason="stream_kind_mismatch",
            details={**details, "kind": row[1], "requested_kind": part.kind},
        )
    if row is not None and as_int(row[0]) > head:
        return FailedPrecondition(
            f"stream {part.stream_id!r}: projection head {row[0]} but events run to {head}; "
            "run repair",
            reason="projection_stale",
            details={**details, "seq": head, "projection_head_seq": as_int(row[0])},
        )
    if row is None and head and head == part.expected_seq:
        return FailedPrecondition(
            f"stream {part.stream_id!r} has events up to seq {head} but no projection row; "
            "run verify",
            reason="projection_missing",
            details={**details, "seq": head},
        )
    return moved(part.stream_id, part.expected_seq, head)


def collided(cur: DBAPICursor, sql: Mapping[str, str], part: StreamWrite) -> TurnkeeperError:
    """Why the events of ``part`` collided with stored ones after its head check passed
    (the statement path, one request at a time): another writer committed the same
    seqs meanwhile (PostgreSQL, READ COMMITTED), now visible — a conflict; or the
    events' index hid rows the table holds from the check — damage."""
    head = _events_head(cur, sql, part.stream_id)
    details: JsonDict = {"stream_id": part.stream_id, "expected_seq": part.expected_seq}
    if head != part.expected_seq:
        return StreamConflict(
            f"stream {part.stream_id!r}: expected head {part.expected_seq}, "
            "another writer appended meanwhile",
            reason="stream_conflict",
            details={**details, "actual_seq": head},
        )
    return FailedPrecondition(
        f"stream {part.stream_id!r}: seq {part.expected_seq + 1} is stored though the "
        f"stream's head reads {head}; run verify",
        reason="projection_stale",
        details={**details, "seq": part.expected_seq + 1},
    )


def _events_head(cur: DBAPICursor, sql: Mapping[str, str], stream_id: str) -> int:
    cur.execute(sql["events_head"], (stream_id,))
    found = cur.fetchone()
    return as_int(found[0]) if found and found[0] is not None else 0
