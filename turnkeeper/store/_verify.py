"""verify and repair: fold every stream again and compare with its stored projection.

Streams can hold a million events, so nothing here loads a stream at once:
the folder receives a :class:`StreamView`, a lazy ``Sequence`` that reads
bounded chunks and checks each event's checksum and sequence number as the
fold iterates. Every event is checksummed exactly once per pass; a bad one
aborts that stream's fold (its result could not be trusted) and the rest of
the stream is still scanned so that every bad record is reported.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import overload

from turnkeeper.errors import DataLoss, FailedPrecondition, TurnkeeperError
from turnkeeper.store._checksum import projection_checksum
from turnkeeper.store._reads import AnyRow, Reader
from turnkeeper.store._rows import check_contiguous, event_from_row, projection_from_row
from turnkeeper.store.records import (
    EventRecord,
    Mismatch,
    MismatchKind,
    ProjectionFolder,
    RepairReport,
    VerifyReport,
)

CHUNK = 1000  # events per read; bounds memory whatever the stream size
_PAGE = 500  # stream ids per page


class _ViewAbort(DataLoss):
    """Raised into the folder when the view meets a bad record (already recorded)."""


class StreamView(Sequence[EventRecord]):
    """The events 1..head of one stream, read lazily in chunks and verified as read."""

    def __init__(self, reader: Reader, stream_id: str, head: int) -> None:
        self._reader = reader
        self._stream_id = stream_id
        self._head = head
        self.verified_through = 0  # every seq <= this was read and passed
        self.problems: dict[int, Mismatch] = {}

    def __len__(self) -> int:
        return self._head

    def __iter__(self) -> Iterator[EventRecord]:
        after = 0
        while after < self._head:
            rows = self._chunk(after)
            if not rows:
                self._gap(after + 1, self._head + 1)
            for row in rows:
                if row[1] != after + 1:
                    self._gap(after + 1, row[1])
                yield self._verified(row)
                after = row[1]
                self.verified_through = max(self.verified_through, after)

    @overload
    def __getitem__(self, index: int) -> EventRecord: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[EventRecord]: ...
    def __getitem__(self, index: int | slice) -> EventRecord | Sequence[EventRecord]:
        if isinstance(index, slice):
            return [self[i] for i in range(self._head)[index]]
        seq = range(1, self._head + 1)[index]  # IndexError outside, negatives from the end
        rows = self._reader.events(self._stream_id, seq - 1, seq, 1)
        if not rows or rows[0][1] != seq:
            self._gap(seq, rows[0][1] if rows else self._head + 1)
        return self._verified(rows[0])

    def _chunk(self, after: int) -> Sequence[AnyRow]:
        try:
            return self._reader.events(self._stream_id, after, self._head, CHUNK)
        except DataLoss as exc:  # a damaged page: no row-level detail to be had
            self._record(after + 1, f"events after seq {after} unreadable: {exc.message}")
            raise _ViewAbort(exc.message, reason=exc.reason, details=exc.details) from exc

    def _verified(self, row: AnyRow) -> EventRecord:
        try:
            return event_from_row(row)
        except DataLoss as exc:
            self._record(int(row[1]), exc.message)
            raise _ViewAbort(exc.message, reason=exc.reason, details=exc.details) from exc

    def _gap(self, first_missing: int, next_present: int) -> None:
        try:
            check_contiguous(self._stream_id, first_missing, next_present)
        except DataLoss as exc:
            self._record(first_missing, exc.message)
            raise _ViewAbort(exc.message, reason=exc.reason, details=exc.details) from exc

    def _record(self, seq: int, detail: str) -> None:
        self.problems.setdefault(
            seq,
            Mismatch(
                stream_id=self._stream_id, kind=MismatchKind.SOURCE_WRITE, seq=seq, detail=detail
            ),
        )

    def scan_rest(self) -> int:
        """Check every event the fold did not reach, past bad ones; return events checked."""
        checked = self.verified_through
        after = self.verified_through
        while after < self._head:
            try:
                rows = self._chunk(after)
            except _ViewAbort:
                return checked  # the pages are unreadable; reported once is enough
            if not rows:
                with suppress(_ViewAbort):
                    self._gap(after + 1, self._head + 1)
                break
            for row in rows:
                seq = int(row[1])
                with suppress(_ViewAbort):  # recorded in self.problems; keep scanning
                    if seq != after + 1:
                        self._gap(after + 1, seq)
                with suppress(_ViewAbort):
                    self._verified(row)
                checked += 1
                after = seq
        return checked


@dataclass
class StreamCheck:
    stream_id: str
    events_checked: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    repairable: bool = True  # False once anything the fold cannot fix was found
    row: AnyRow | None = None  # the stored projection row as read
    head: int = 0
    state: str | None = None  # the fold result, when the fold succeeded
    schema_version: int = 0

    def add(self, kind: MismatchKind, detail: str, seq: int | None = None) -> None:
        self.mismatches.append(
            Mismatch(stream_id=self.stream_id, kind=kind, seq=seq, detail=detail)
        )


def check_stream(reader: Reader, folder: ProjectionFolder, stream_id: str) -> StreamCheck:
    try:
        return _check_stream(reader, folder, stream_id)
    except DataLoss as exc:  # a damaged page under this stream's rows: report, go on
        out = StreamCheck(stream_id, repairable=False)
        out.add(
            MismatchKind.SOURCE_WRITE, f"stream unreadable: {exc.message}", exc.details.get("seq")
        )
        return out


def _check_stream(reader: Reader, folder: ProjectionFolder, stream_id: str) -> StreamCheck:
    out = StreamCheck(stream_id)
    out.head = reader.events_head(stream_id)
    out.row = reader.projection(stream_id)
    view = StreamView(reader, stream_id, out.head)
    if out.row is None:
        out.repairable = False  # the kind is unknown, so nothing can fold it
        out.add(MismatchKind.PROJECTION, "events without a projection row")
        out.events_checked = view.scan_rest()
        out.mismatches.extend(view.problems.values())
        return out
    kind = str(out.row[1])
    projection_ok = True
    try:
        projection_from_row(out.row)
    except DataLoss as exc:
        projection_ok = False
        out.add(MismatchKind.PROJECTION, exc.message, out.row[2])
    try:
        out.schema_version = folder.projection_schema_version(kind)
        out.state = folder.fold(kind, view)
    except _ViewAbort:
        pass  # the view recorded the bad record
    except FailedPrecondition as exc:
        out.add(_fold_kind(exc), f"fold failed: {exc.message}", exc.details.get("seq"))
    except TurnkeeperError as exc:
        out.add(MismatchKind.SOURCE_WRITE, f"fold failed: {exc.message}", exc.details.get("seq"))
    except Exception as exc:  # a folder that cannot decode an event may raise anything
        out.add(MismatchKind.SOURCE_WRITE, f"fold failed: {exc!r}")
    out.events_checked = view.scan_rest()
    out.mismatches.extend(sorted(view.problems.values(), key=lambda m: m.seq or 0))
    if out.state is None or any(m.kind is not MismatchKind.PROJECTION for m in out.mismatches):
        out.repairable = False  # the fold is not trustworthy: events are the authority
        return out
    if not projection_ok:
        return out  # its fields cannot be trusted; rebuilding it is the whole answer
    stored_head, stored_version = int(out.row[2]), int(out.row[3])
    if stored_head != out.head:
        out.add(
            MismatchKind.FRESHNESS,
            f"projection head {stored_head} but the stream head is {out.head}",
            stored_head,
        )
    if stored_version != out.schema_version:
        newer = stored_version > out.schema_version
        out.repairable = out.repairable and not newer
        out.add(
            MismatchKind.MIGRATION,
            f"projection schema version {stored_version}, this code folds "
            f"{out.schema_version}" + (" (database newer than code)" if newer else ""),
            stored_head,
        )
    elif stored_head == out.head and not folder.same_state(kind, str(out.row[4]), out.state):
        out.add(
            MismatchKind.PROJECTION,
            "projection state differs from the fold of its events",
            stored_head,
        )
    return out


def _fold_kind(exc: FailedPrecondition) -> MismatchKind:
    if exc.reason == "unsupported_schema_version":
        return MismatchKind.MIGRATION
    return MismatchKind.SOURCE_WRITE


ALL_STREAMS = "*"  # the stream id of a mismatch that no single stream can own


def _checks(reader: Reader, folder: ProjectionFolder) -> Iterator[StreamCheck]:
    after: str | None = None
    try:
        while True:
            page = reader.stream_ids(after, _PAGE)
            for stream_id in page:
                yield check_stream(reader, folder, stream_id)
            if len(page) < _PAGE:
                break
            after = page[-1]
        orphans = reader.orphan_stream_ids()
    except DataLoss as exc:  # the tables themselves are unreadable past this point
        out = StreamCheck(ALL_STREAMS, repairable=False)
        out.add(MismatchKind.SOURCE_WRITE, f"cannot enumerate streams: {exc.message}")
        yield out
        return
    for stream_id in orphans:
        yield check_stream(reader, folder, stream_id)


def verify(reader: Reader, folder: ProjectionFolder) -> VerifyReport:
    streams = events = 0
    mismatches: list[Mismatch] = []
    for check in _checks(reader, folder):
        streams += 1
        events += check.events_checked
        mismatches.extend(check.mismatches)
    return VerifyReport(streams_checked=streams, events_checked=events, mismatches=mismatches)


def repair(reader: Reader, folder: ProjectionFolder) -> RepairReport:
    repaired: list[str] = []
    unrepairable: list[Mismatch] = []
    for check in _checks(reader, folder):
        if not check.mismatches:
            continue
        if not check.repairable or check.state is None or check.row is None:
            unrepairable.extend(check.mismatches)
            continue
        kind = str(check.row[1])
        checksum = projection_checksum(
            check.stream_id, kind, check.head, check.schema_version, check.state, strict=True
        )
        # Conditional on the row and the stream not having moved since the fold.
        if reader.replace_projection(
            check.row, check.head, check.schema_version, check.state, checksum
        ):
            repaired.append(check.stream_id)
    return RepairReport(repaired=repaired, unrepairable=unrepairable, after=verify(reader, folder))
