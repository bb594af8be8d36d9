"""The tables of an in-memory store: the SQL store's rows, in dicts, under one lock.

Rows are kept exactly as the SQL tables hold them (the columns of
``_schema.py``, checksums included), so the in-memory store reads them through the
same decoders (_rows.py: every checksum checked) and verifies and repairs them with
the same code (_verify.py, through :class:`~turnkeeper.store._source.RecordSource`).
An append is checked and written under the lock, all of it or none of it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from turnkeeper.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    TurnkeeperError,
)
from turnkeeper.json_types import JsonDict
from turnkeeper.store._dialect import RowKey
from turnkeeper.store._head_checks import moved
from turnkeeper.store._reads import as_int
from turnkeeper.store._rows import index_from_row
from turnkeeper.store._source import AnyRow

if TYPE_CHECKING:
    from turnkeeper.store._writer import StreamWrite


def _seq(row: AnyRow) -> int:
    """An event row's seq; a row whose seq is not a number sorts first (and then fails
    its checksum when decoded)."""
    seq = row[1]
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else 0


class MemoryDatabase:
    """One in-memory database; every :class:`~turnkeeper.store.memory.MemoryEventStore`
    given it sees the same streams. Thread-safe: every method takes :attr:`lock`.

    The tables are plain attributes so that a test can damage a row the way another
    program would damage a database's, and check that the store notices:

    * ``event_rows``: stream id -> its event rows ``(stream_id, seq, type, schema_version,
      payload, recorded_at, checksum)``, in seq order;
    * ``projection_rows``: stream id -> ``(stream_id, kind, head_seq, schema_version, state,
      checksum, created_at, created_check)``;
    * ``index_rows``: entity id -> ``(row key, entity_id, stream_id, entity_kind, checksum)``.
    """

    first_row_key: RowKey = 0

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.work = threading.Condition(self.lock)  # signal_work / wait_for_work
        self.signals = 0
        self.event_rows: dict[str, list[AnyRow]] = {}
        self.projection_rows: dict[str, AnyRow] = {}
        self.index_rows: dict[str, AnyRow] = {}
        self._next_row_key = 1

    # -- RecordSource: the rows as stored, each read under the lock ---------------------

    def events(
        self, stream_id: str, after_seq: int, upto_seq: int | None = None, limit: int | None = None
    ) -> list[AnyRow]:
        with self.lock:
            rows = self.event_rows.get(stream_id, [])
            if after_seq and not (after_seq <= len(rows) and rows[after_seq - 1][1] == after_seq):
                # Not the usual seq == position + 1 (a row is missing): find the start.
                start = next((i for i, r in enumerate(rows) if _seq(r) > after_seq), len(rows))
            else:
                start = after_seq
            out: list[AnyRow] = []
            for row in rows[start:]:
                if (upto_seq is not None and _seq(row) > upto_seq) or len(out) == limit:
                    break
                out.append(row)
            return out

    def events_head(self, stream_id: str) -> int:
        with self.lock:
            return self._head(stream_id)

    def projection(self, stream_id: str) -> AnyRow | None:
        with self.lock:
            row = self.projection_rows.get(stream_id)
        return None if row is None else row[:6]

    def created(self, stream_id: str) -> AnyRow | None:
        with self.lock:
            row = self.projection_rows.get(stream_id)
        return None if row is None else row[6:8]

    def all_projections(self) -> list[AnyRow]:
        with self.lock:
            return list(self.projection_rows.values())

    def tails(self, kinds: Sequence[str]) -> list[AnyRow]:
        with self.lock:
            out: list[AnyRow] = []
            for stream_id in sorted(self.projection_rows):
                row = self.projection_rows[stream_id]
                if row[1] in kinds:
                    head = row[2]
                    after = head if isinstance(head, int) else 0
                    out += [r for r in self.event_rows.get(stream_id, []) if _seq(r) > after]
            return out

    def stream_ids(self, after: str | None, limit: int) -> list[object]:
        with self.lock:
            ids = sorted(self.projection_rows)
        return list[object]([i for i in ids if after is None or i > after][:limit])

    def orphan_stream_ids(self) -> list[object]:
        with self.lock:
            return list[object](
                sorted(
                    s
                    for s, rows in self.event_rows.items()
                    if rows and s not in self.projection_rows
                )
            )

    def index_page(self, after_rowid: RowKey, limit: int) -> list[AnyRow]:
        with self.lock:
            rows = list(self.index_rows.values())  # in row key order: keys only ever rise
        return [r for r in rows if isinstance(r[0], int) and as_int(after_rowid) < r[0]][:limit]

    def integrity_problems(self) -> list[str]:
        return []  # no file or pages of its own to check: the rows are checked instead

    def replace_projection(
        self,
        old: AnyRow,
        head_seq: int,
        schema_version: int,
        state: str,
        checksum: str,
        created: tuple[int, str] | None = None,
    ) -> bool:
        stream_id = old[0]
        if not isinstance(stream_id, str):
            return False
        with self.lock:
            row = self.projection_rows.get(stream_id)
            if (
                row is None
                or (row[2], row[5]) != (old[2], old[5])
                or self._head(stream_id) != head_seq
            ):
                return False  # the row or its stream moved since the fold: leave it
            kept = row[6:8] if created is None else created
            self.projection_rows[stream_id] = (
                stream_id,
                row[1],
                head_seq,
                schema_version,
                state,
                checksum,
                *kept,
            )
            return True

    # -- appends --------------------------------------------------------------------------

    def commit(self, parts: Sequence[StreamWrite], checks: Sequence[tuple[str, int]] = ()) -> None:
        """Check every head of ``checks`` and every part, then write every part; on a
        failing check or part nothing is written and its typed error is raised
        (``details["part"]``: a part's position, when several)."""
        with self.lock:
            for stream_id, expected in checks:
                head = self._head(stream_id)
                if head != expected:
                    raise moved(stream_id, expected, head)
            claimed: dict[str, tuple[str, str]] = {}  # entity ids this call registers
            for i, part in enumerate(parts):
                try:
                    self._check(part, claimed)
                except TurnkeeperError as error:
                    if len(parts) > 1:
                        error.details["part"] = i
                    raise
            for part in parts:
                self._write(part)

    def _head(self, stream_id: str) -> int:
        rows = self.event_rows.get(stream_id)
        return _seq(rows[-1]) if rows else 0

    def _check(self, part: StreamWrite, claimed: dict[str, tuple[str, str]]) -> None:
        """Why ``part`` cannot be appended (raised), as the SQL store tells it."""
        stream_id, expected = part.stream_id, part.expected_seq
        row = self.projection_rows.get(stream_id)
        # The head is the events'; the projection row may be folded to an earlier seq.
        head = self._head(stream_id)
        details: JsonDict = {"stream_id": stream_id, "expected_seq": expected}
        if row is not None and head == expected and row[1] != part.kind:
            raise InvalidArgument(
                f"stream {stream_id!r} is a {row[1]!r} stream, not {part.kind!r}",
                reason="stream_kind_mismatch",
                details={**details, "kind": str(row[1]), "requested_kind": part.kind},
            )
        projected = 0 if row is None else as_int(row[2])
        if projected > head:
            # A projection folded past the events: only damage does that. Appending
            # would fork the stream.
            raise _stale(stream_id, expected, head, projected)
        if row is None and head and head == expected:
            raise FailedPrecondition(
                f"stream {stream_id!r} has events up to seq {head} but no projection row; "
                "run verify",
                reason="projection_missing",
                details={**details, "seq": head},
            )
        if head != expected or (row is not None and expected == 0):
            raise moved(stream_id, expected, head)
        for entity_id, _stream, entity_kind, _checksum in part.index:
            owner = claimed.get(entity_id)
            if owner is None and entity_id in self.index_rows:
                owner = index_from_row(entity_id, self.index_rows[entity_id][2:])
            if owner is not None and owner != (stream_id, entity_kind):
                raise AlreadyExists(
                    f"entity {entity_id!r} already belongs to stream {owner[0]!r} as {owner[1]!r}",
                    reason="entity_owned",
                    details={
                        "entity_id": entity_id,
                        "stream_id": owner[0],
                        "entity_kind": owner[1],
                        "requested_stream_id": stream_id,
                    },
                )
            claimed[entity_id] = (stream_id, entity_kind)

    def _write(self, part: StreamWrite) -> None:
        if part.projection is not None:  # None: the row stays, folded to an earlier seq
            schema_version, state, checksum, created_at, created_check = part.projection
            old = self.projection_rows.get(part.stream_id)
            # The creation time is the first append's, for good (the listing order).
            created = (created_at, created_check) if old is None else old[6:8]
            self.projection_rows[part.stream_id] = (
                part.stream_id,
                part.kind,
                part.new_head,
                schema_version,
                state,
                checksum,
                *created,
            )
        self.event_rows.setdefault(part.stream_id, []).extend(part.events)
        for entity_id, stream_id, entity_kind, entry_checksum in part.index:
            if entity_id not in self.index_rows:  # else: this stream's already (checked)
                key, self._next_row_key = self._next_row_key, self._next_row_key + 1
                self.index_rows[entity_id] = (
                    key,
                    entity_id,
                    stream_id,
                    entity_kind,
                    entry_checksum,
                )


def _stale(stream_id: str, expected: int, head: int, projected: int) -> FailedPrecondition:
    return FailedPrecondition(
        f"stream {stream_id!r}: projection head {projected} but events run to {head}; run repair",
        reason="projection_stale",
        details={
            "stream_id": stream_id,
            "expected_seq": expected,
            "seq": head,
            "projection_head_seq": projected,
        },
    )
