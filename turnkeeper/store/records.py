"""The store's contract: what goes into the log and what comes out.

The store knows nothing of goals or sessions. It keeps streams of opaque,
versioned JSON events with contiguous sequence numbers and a checksum each, and
one projection row per stream that the caller computes from those events and
hands over in the same append. ``verify`` and ``repair`` get a
:class:`ProjectionFolder` that knows how to fold a stream kind again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, ConfigDict

# Every record's validator is built when the model is first used, not at import: the
# store is imported by every command, and most use two or three of these models.
_RECORD = ConfigDict(frozen=True, defer_build=True)


class NewEvent(BaseModel):
    """An event about to be appended. ``payload`` is the event's JSON text."""

    model_config = _RECORD

    type: str
    schema_version: int
    payload: str


class EventRecord(BaseModel):
    """An event as stored; its checksum was verified when it was read."""

    model_config = _RECORD

    stream_id: str
    seq: int
    type: str
    schema_version: int
    payload: str
    recorded_at: datetime
    checksum: str


class Projection(BaseModel):
    """The folded state of one stream as of ``head_seq``, as JSON text.

    ``head_seq`` is the seq the state is folded to, which may be below the stream's
    head: a writer may append without rewriting the projection (a large state is
    snapshotted every so many events, not on every append). A listing
    (``list_projections``, ``list_projections_of``) hands each projection over with
    ``tail``: the stream's events after ``head_seq``, checksums verified, so that its
    state is the fold of ``state`` and ``tail`` (runtime/log/codec.py, ``state_of``).
    ``read_projection`` leaves ``tail`` empty: its caller reads the stream after
    ``head_seq`` itself (``read_stream``)."""

    model_config = _RECORD

    stream_id: str
    kind: str
    head_seq: int
    schema_version: int
    state: str
    checksum: str
    tail: tuple[EventRecord, ...] = ()

    @property
    def stream_head(self) -> int:
        """The stream's head as listed: ``head_seq`` plus the tail's events."""
        return self.head_seq + len(self.tail)


class IndexEntry(BaseModel):
    """Maps an entity id (a todo, a gate, ...) to the stream that owns it."""

    model_config = _RECORD

    entity_id: str
    entity_kind: str


class StreamAppend(BaseModel):
    """One stream's part of an :meth:`EventStore.append_many`: the arguments of ``append``."""

    model_config = _RECORD

    stream_id: str
    kind: str
    expected_seq: int
    events: tuple[NewEvent, ...]
    # None: the projection row is left as it is, folded to an earlier seq (a new stream
    # needs one: ``InvalidArgument``).
    projection_state: str | None
    projection_schema_version: int
    index: tuple[IndexEntry, ...] = ()


class HeadCheck(BaseModel):
    """A stream an :meth:`EventStore.append_many` must find still at ``head_seq``,
    writing nothing to it: a decision that the stream needs no events, taken on that
    head, commits with the other streams' parts only if the head has not moved."""

    model_config = _RECORD

    stream_id: str
    head_seq: int


class MismatchKind(StrEnum):
    """How ``verify`` classifies a disagreement between a projection and its log."""

    SOURCE_WRITE = "source_write"  # an event failed its checksum or does not decode
    PROJECTION = "projection"  # the projection differs from the fold of its events
    MIGRATION = "migration"  # a record's schema version is not one this code reads
    # The projection leads the stream head (it may lag: a reader folds the tail).
    FRESHNESS = "freshness"
    INDEX = "index"  # the entity index differs from the one the events imply
    # A workspace snapshot names a turn or sequence the log lacks: acknowledged
    # writes were lost (found by the runtime, runtime/services/workspace_claims.py).
    DATABASE_BEHIND = "database_behind_workspace"


class Mismatch(BaseModel):
    model_config = ConfigDict(defer_build=True)

    stream_id: str
    kind: MismatchKind
    seq: int | None = None
    detail: str
    # True when a stored record is damaged (it failed its checksum, SQLite's own
    # integrity check, or what the log must hold is gone): DATA_LOSS, even when the
    # record is one ``repair`` can rebuild.
    damaged: bool = False


class VerifyReport(BaseModel):
    model_config = ConfigDict(defer_build=True)

    streams_checked: int
    events_checked: int
    mismatches: list[Mismatch]

    @property
    def ok(self) -> bool:
        return not self.mismatches

    @property
    def data_loss(self) -> bool:
        """Whether anything stored was found damaged or lost (not just out of date)."""
        return any(m.kind is MismatchKind.SOURCE_WRITE or m.damaged for m in self.mismatches)


class RepairReport(BaseModel):
    model_config = ConfigDict(defer_build=True)

    repaired: list[str]  # stream ids whose projection was rebuilt
    unrepairable: list[Mismatch]  # source-write failures: events are the authority
    after: VerifyReport


class ProjectionFolder(Protocol):
    """Knows, per stream kind, how to fold events into the projection text."""

    def projection_schema_version(self, kind: str) -> int: ...

    def fold(self, kind: str, events: Sequence[EventRecord]) -> str:
        """Fold a whole stream; raise ``DataLoss``/``FailedPrecondition`` on undecodable events."""
        ...

    def same_state(self, kind: str, a: str, b: str) -> bool:
        """Whether two projection texts describe the same state (ignoring formatting)."""
        ...


class IndexingFolder(ProjectionFolder, Protocol):
    """A folder that also knows which index entries a stream's events register: with
    one, ``verify`` recomputes the whole entity index and compares it row for row."""

    def fold_with_index(
        self, kind: str, events: Sequence[EventRecord]
    ) -> tuple[str, Sequence[IndexEntry]]:
        """The fold (as :meth:`fold`) and every index entry the events register."""
        ...
