"""The backend-neutral store interface: the contract every backend keeps.

Two classes implement it: :class:`~turnkeeper.store.sql.SqlEventStore`, one class
over two SQL dialects (SQLite, the embedded default, and PostgreSQL; what differs
between them is a private ``Dialect``), and
:class:`~turnkeeper.store.memory.MemoryEventStore`, in memory. The contract tests
(tests/store/conformance) run against each of them; docs/storage.md describes the
contract and how to add a backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Self

from turnkeeper.store.records import (
    EventRecord,
    HeadCheck,
    IndexEntry,
    NewEvent,
    Projection,
    ProjectionFolder,
    RepairReport,
    StreamAppend,
    VerifyReport,
)


class EventStore(ABC):
    """An append-only log of streams plus one projection row per stream.

    Guarantees every implementation must keep (the contract tests check them):

    * ``append`` is atomic: the events, the projection and the index entries are
      written together or not at all. A durable backend returns only after they are
      durable (fsync'd; concurrent appends may share one commit, group commit); the
      in-memory one keeps them as long as its database object lives.
    * Sequence numbers of a stream are 1, 2, 3, ... with no gaps.
    * A projection row's ``head_seq`` is at most the stream's head, and its state is
      the fold of the events up to ``head_seq`` (an append may leave it behind).
    * ``append`` with ``expected_seq`` other than the current head raises
      :class:`turnkeeper.errors.StreamConflict` and writes nothing.
    * ``append_many`` is atomic across its streams: every part is written at once,
      or nothing of the call is written.
    * An entity id of the index belongs to one stream; a claim by another raises
      :class:`turnkeeper.errors.AlreadyExists` and writes nothing.
    * Every read checks checksums; a bad record raises
      :class:`turnkeeper.errors.DataLoss` naming stream and sequence, never a wrong
      answer. ``verify`` reports every bad record; ``repair`` rebuilds projections.
    * Ids never contain NUL (``InvalidArgument``), on every backend alike.
    * A closed store refuses every call with ``FailedPrecondition`` (``store_closed``).
    """

    @abstractmethod
    def append(
        self,
        stream_id: str,
        kind: str,
        expected_seq: int,
        events: Sequence[NewEvent],
        projection_state: str | None,
        projection_schema_version: int,
        index: Sequence[IndexEntry] = (),
        *,
        durable: bool = True,
    ) -> int:
        """Append ``events`` after ``expected_seq`` (0 for a new stream); return the new head.

        ``expected_seq`` is checked against the stream's events, not its projection row.
        ``projection_state`` is the state folded to the new head, written as the
        stream's projection; None leaves the projection row as it is, folded to an
        earlier seq (readers fold the events after it). A new stream needs one
        (``InvalidArgument``).

        ``durable=False`` may return before the commit reaches the disk (it still
        survives a crash of this process, not of the machine). It is for records
        whose loss the recovery table covers, such as a host's event stream; a
        later durable commit makes every earlier one durable too.
        """

    @abstractmethod
    def append_many(
        self,
        appends: Sequence[StreamAppend],
        *,
        durable: bool = True,
        unchanged: Sequence[HeadCheck] = (),
    ) -> list[int]:
        """Append to several streams at once, all or nothing; return each stream's new head.

        ``unchanged``: streams the commit must find at the given heads, writing nothing
        to them; one that moved fails the call as a ``StreamConflict`` (the check of a
        decision that its stream needed nothing, made in the commit itself rather than
        by a read before it). A stream may not be both appended to and checked.

        Each part is checked like an ``append`` (head, stream kind, index
        ownership). When any part fails, nothing of the whole call is written and
        that part's typed error is raised (``StreamConflict``, ``AlreadyExists``,
        ...) with ``details["stream_id"]`` naming its stream (for an index
        collision, the owning stream; ``requested_stream_id`` is the part's) and,
        when the call has several parts, ``details["part"]`` its position. Two
        parts naming the same stream, or no parts, raise ``InvalidArgument``.
        ``durable`` is as for ``append``; ``append`` is the one-part case.
        """

    @abstractmethod
    def head(self, stream_id: str) -> int:
        """The last sequence number of the stream, 0 when it does not exist."""

    def heads(self, stream_ids: Sequence[str]) -> list[int]:
        """:meth:`head` of each stream, in order; a store that can reads them all in
        one query, at one moment (a controller confirms its cached session, goal and
        settings with one read a turn, not three)."""
        return [self.head(stream_id) for stream_id in stream_ids]

    @abstractmethod
    def read_stream(
        self, stream_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        """Events with ``seq > after_seq`` in order, checksums verified."""

    @abstractmethod
    def read_projection(self, stream_id: str) -> Projection | None:
        """The projection row, checksum verified; ``None`` for an unknown stream."""

    @abstractmethod
    def list_projections(self, kind: str) -> list[Projection]:
        """All projections of a stream kind, checksums verified, oldest stream first."""

    def list_projections_of(self, kinds: Sequence[str]) -> dict[str, list[Projection]]:
        """:meth:`list_projections` of each of ``kinds``. A backend whose listing checks
        every row of the table whatever the kind does it in one read here, so a caller
        that lists several kinds (``status``: goals and sessions) pays for one check of
        each row rather than one per kind, and sees them all as of one read."""
        return {kind: self.list_projections(kind) for kind in kinds}

    @abstractmethod
    def lookup(self, entity_id: str) -> tuple[str, str] | None:
        """``(stream_id, entity_kind)`` owning an entity id, or ``None``."""

    @abstractmethod
    def lookup_prefix(self, prefix: str, entity_kind: str) -> list[str]:
        """Every entity id of ``entity_kind`` that starts with ``prefix``, sorted, each
        row checksum verified (how a command resolves a shortened id)."""

    @abstractmethod
    def verify(self, folder: ProjectionFolder) -> VerifyReport:
        """Re-read every event (checksums), fold every stream, compare every projection."""

    @abstractmethod
    def repair(self, folder: ProjectionFolder) -> RepairReport:
        """Rebuild mismatched projections from their events, then verify again."""

    def now(self) -> datetime:
        """The time on the database's clock (UTC): what leases and claims expire by, so
        that workers on machines whose clocks differ still agree."""
        return datetime.now(UTC)

    def signal_work(self) -> None:  # noqa: B027 -- a backend without wake-ups has nothing to do
        """Wake workers waiting in :meth:`wait_for_work` (best effort: they poll too)."""

    def wait_for_work(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for :meth:`signal_work` from any process; True if
        woken early. The default only sleeps: waiters fall back to polling."""
        import time

        time.sleep(max(0.0, timeout_s))
        return False

    @abstractmethod
    def close(self) -> None:
        """Release connections; pending appends finish first. Closing twice is fine."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
