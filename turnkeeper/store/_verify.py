"""verify and repair: fold every stream again and compare with its stored projection.

Before the streams, SQLite's own integrity check; after them, the entity index
against the one the events imply (both in _verify_index.py). Each projection's
creation time (the listing order) must be its first event's.

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
from turnkeeper.store._checksum import created_checksum, projection_checksum
from turnkeeper.store._rows import (
    check_contiguous,
    check_created,
    event_from_row,
    projection_from_row,
    row_seq,
    to_micros,
)
from turnkeeper.store._source import AnyRow, RecordSource
from turnkeeper.store._verify_index import ALL_STREAMS, IndexCheck, structure_problems
from turnkeeper.store.records import (
    EventRecord,
    IndexEntry,
    Mismatch,
    MismatchKind,
    Projection,
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

    def __init__(self, reader: RecordSource, stream_id: str, head: int) -> None:
        self._reader = reader
        self._stream_id = stream_id
        self._head = head
        self.verified_through = 0  # every seq <= this was read and passed
        self.problems: dict[int, Mismatch] = {}
        self.first_recorded_at: int | None = None  # event 1's, once read and verified

    def __len__(self) -> int:
        return self._head

    def __iter__(self) -> Iterator[EventRecord]:
        after = 0
        while after < self._head:
            rows = self._chunk(after)
            if not rows:
                self._gap(after + 1, self._head + 1)
            for row in rows:
                seq = self._seq(row)
                if seq != after + 1:
                    self._gap(after + 1, seq)
                yield self._verified(row)
                after = seq
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
        if not rows or self._seq(rows[0]) != seq:
            self._gap(seq, self._seq(rows[0]) if rows else self._head + 1)
        return self._verified(rows[0])

    def _seq(self, row: AnyRow) -> int:
        try:
            return row_seq(self._stream_id, row)
        except DataLoss as exc:
            self._record(self.verified_through + 1, exc.message)
            raise _ViewAbort(exc.message, reason=exc.reason, details=exc.details) from exc

    def _chunk(self, after: int) -> Sequence[AnyRow]:
        try:
            return self._reader.events(self._stream_id, after, self._head, CHUNK)
        except DataLoss as exc:  # a damaged page: no row-level detail to be had
            self._record(after + 1, f"events after seq {after} unreadable: {exc.message}")
            raise _ViewAbort(exc.message, reason=exc.reason, details=exc.details) from exc

    def _verified(self, row: AnyRow) -> EventRecord:
        try:
            record = event_from_row(row)
        except DataLoss as exc:
            self._record(self._seq(row), exc.message)
            raise _ViewAbort(exc.message, reason=exc.reason, details=exc.details) from exc
        if record.seq == 1:
            self.first_recorded_at = to_micros(record.recorded_at)  # the row's recorded_at
        return record

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
                stream_id=self._stream_id,
                kind=MismatchKind.SOURCE_WRITE,
                seq=seq,
                detail=detail,
                damaged=True,
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
                try:
                    seq = self._seq(row)
                except _ViewAbort:
                    return checked  # no order left to scan by; reported once is enough
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
    index: Sequence[IndexEntry] | None = None  # what the events register, when told
    created_at: int | None = None  # the creation time to put back, when it is wrong

    def add(
        self, kind: MismatchKind, detail: str, seq: int | None = None, *, damaged: bool = False
    ) -> None:
        self.mismatches.append(
            Mismatch(stream_id=self.stream_id, kind=kind, seq=seq, detail=detail, damaged=damaged)
        )


def check_stream(reader: RecordSource, folder: ProjectionFolder, stream_id: str) -> StreamCheck:
    try:
        return _check_stream(reader, folder, stream_id)
    except DataLoss as exc:  # a damaged page under this stream's rows: report, go on
        out = StreamCheck(stream_id, repairable=False)
        out.add(MismatchKind.SOURCE_WRITE, f"stream unreadable: {exc.message}", _seq(exc))
        return out


def _fold(
    folder: ProjectionFolder, kind: str, view: StreamView
) -> tuple[str, Sequence[IndexEntry] | None]:
    with_index = getattr(folder, "fold_with_index", None)
    if with_index is None:
        return folder.fold(kind, view), None
    state, entries = with_index(kind, view)
    return str(state), list(entries)


def _check_stream(reader: RecordSource, folder: ProjectionFolder, stream_id: str) -> StreamCheck:
    out = StreamCheck(stream_id)
    # The row first, then the head: an append committed in between only moves the head
    # further past the row's (which may lag it), never behind it.
    out.row = reader.projection(stream_id)
    out.head = reader.events_head(stream_id)
    view = StreamView(reader, stream_id, out.head)
    if out.row is None:
        out.repairable = False  # the kind is unknown, so nothing can fold it
        out.add(MismatchKind.PROJECTION, "events without a projection row", damaged=True)
        out.events_checked = view.scan_rest()
        out.mismatches.extend(view.problems.values())
        return out
    kind = str(out.row[1])
    stored: Projection | None = None
    try:
        stored = projection_from_row(out.row)
    except DataLoss as exc:
        out.add(MismatchKind.PROJECTION, exc.message, _int_or_none(out.row[2]), damaged=True)
    try:
        out.schema_version = folder.projection_schema_version(kind)
        out.state, out.index = _fold(folder, kind, view)
    except _ViewAbort:
        pass  # the view recorded the bad record
    except FailedPrecondition as exc:
        out.add(_fold_kind(exc), f"fold failed: {exc.message}", _seq(exc))
    except TurnkeeperError as exc:
        out.add(MismatchKind.SOURCE_WRITE, f"fold failed: {exc.message}", _seq(exc))
    except Exception as exc:  # a folder that cannot decode an event may raise anything
        out.add(MismatchKind.SOURCE_WRITE, f"fold failed: {exc!r}")
    out.events_checked = view.scan_rest()
    out.mismatches.extend(sorted(view.problems.values(), key=lambda m: m.seq or 0))
    _check_created(reader, out, view.first_recorded_at)
    if out.state is None or any(m.kind is not MismatchKind.PROJECTION for m in out.mismatches):
        out.repairable = False  # the fold is not trustworthy: events are the authority
        out.index = None
        return out
    if stored is None:
        return out  # its fields cannot be trusted; rebuilding it is the whole answer
    stored_head, stored_version = stored.head_seq, stored.schema_version
    if stored_head > out.head:
        # A projection may lag its stream (a reader folds the tail), never lead it.
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
    elif stored_head <= out.head and not folder.same_state(
        kind, stored.state, _fold_to(reader, folder, out, kind, stored_head)
    ):
        out.add(
            MismatchKind.PROJECTION,
            "projection state differs from the fold of its events",
            stored_head,
        )
    return out


def _fold_to(
    reader: RecordSource, folder: ProjectionFolder, out: StreamCheck, kind: str, seq: int
) -> str:
    """The fold of the stream's events up to ``seq``: the whole fold's when ``seq`` is
    the head; a lagging projection's events folded again (their checksums passed the
    whole fold just now, so this fold fails only as that one would have)."""
    assert out.state is not None  # the caller compares only a successful fold
    if seq == out.head:
        return out.state
    return folder.fold(kind, StreamView(reader, out.stream_id, seq))


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _check_created(reader: RecordSource, out: StreamCheck, first_recorded_at: int | None) -> None:
    """The projection's creation time must check out and be its first event's."""
    row = reader.created(out.stream_id)
    if row is None or first_recorded_at is None:
        return  # no row (reported already), or event 1 unreadable (reported already)
    try:
        created_at = check_created(out.stream_id, row[0], row[1])
    except DataLoss as exc:
        out.add(MismatchKind.PROJECTION, exc.message, damaged=True)
        out.created_at = first_recorded_at
        return
    if created_at != first_recorded_at:
        out.add(
            MismatchKind.PROJECTION,
            f"projection created at {created_at}, its first event recorded at {first_recorded_at}",
            damaged=True,
        )
        out.created_at = first_recorded_at


def _seq(exc: TurnkeeperError) -> int | None:
    """The seq a store or fold error names in its details (an int when there is one)."""
    seq = exc.details.get("seq")
    return seq if isinstance(seq, int) else None


def _fold_kind(exc: FailedPrecondition) -> MismatchKind:
    if exc.reason == "unsupported_schema_version":
        return MismatchKind.MIGRATION
    return MismatchKind.SOURCE_WRITE


def _unreadable_id(value: object) -> StreamCheck:
    out = StreamCheck(ALL_STREAMS, repairable=False)
    out.add(MismatchKind.SOURCE_WRITE, f"a stream id reads as {value!r:.60}", damaged=True)
    return out


def _checks(reader: RecordSource, folder: ProjectionFolder) -> Iterator[StreamCheck]:
    after: str | None = None
    try:
        while True:
            page = reader.stream_ids(after, _PAGE)
            for stream_id in page:
                if isinstance(stream_id, str):
                    yield check_stream(reader, folder, stream_id)
                else:  # a damaged record header: the id came back as another type
                    yield _unreadable_id(stream_id)
            named = [i for i in page if isinstance(i, str)]
            if len(page) < _PAGE or not named or named[-1] == after:
                break
            after = named[-1]
        orphans = reader.orphan_stream_ids()
    except DataLoss as exc:  # the tables themselves are unreadable past this point
        out = StreamCheck(ALL_STREAMS, repairable=False)
        out.add(MismatchKind.SOURCE_WRITE, f"cannot enumerate streams: {exc.message}", damaged=True)
        yield out
        return
    for stream_id in orphans:
        if isinstance(stream_id, str):
            yield check_stream(reader, folder, stream_id)
        else:
            yield _unreadable_id(stream_id)


def _tally(index: IndexCheck, check: StreamCheck) -> None:
    if check.index is None:
        index.not_folded(check.stream_id)
    else:
        index.registered(check.stream_id, check.index)


def verify(reader: RecordSource, folder: ProjectionFolder) -> VerifyReport:
    streams = events = 0
    mismatches = structure_problems(reader)
    index = IndexCheck()
    for check in _checks(reader, folder):
        streams += 1
        events += check.events_checked
        mismatches.extend(check.mismatches)
        _tally(index, check)
    mismatches.extend(index.compare(reader))
    return VerifyReport(streams_checked=streams, events_checked=events, mismatches=mismatches)


def repair(reader: RecordSource, folder: ProjectionFolder) -> RepairReport:
    """Rebuild what the events can rebuild: projections (state, head, version and
    creation time) through the fold. Damaged events, the file's structure and the
    entity index are reported, not rewritten."""
    repaired: list[str] = []
    unrepairable = structure_problems(reader)
    index = IndexCheck()
    for check in _checks(reader, folder):
        _tally(index, check)
        if not check.mismatches:
            continue
        if not check.repairable or check.state is None or check.row is None:
            unrepairable.extend(check.mismatches)
            continue
        kind = str(check.row[1])
        checksum = projection_checksum(
            check.stream_id, kind, check.head, check.schema_version, check.state, strict=True
        )
        created = None
        if check.created_at is not None:
            created = (check.created_at, created_checksum(check.stream_id, check.created_at))
        # Conditional on the row and the stream not having moved since the fold.
        if reader.replace_projection(
            check.row, check.head, check.schema_version, check.state, checksum, created
        ):
            repaired.append(check.stream_id)
    unrepairable.extend(index.compare(reader))
    return RepairReport(repaired=repaired, unrepairable=unrepairable, after=verify(reader, folder))
