"""The stored rows as verify, repair and listings read them, whatever holds them.

:class:`RecordSource` is what ``_verify``, ``_verify_index`` and
``_guards.listed_projections`` need of a backend: its rows as they are stored, each
column unchecked (``AnyRow``), so that one implementation of checking records
(their checksums, their order, the fold, the entity index) serves every backend.
The SQL store's :class:`~turnkeeper.store._reads.Reader` is one; the in-memory
store's row view (memory.py) is the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeAlias

from turnkeeper.store._dialect import RowKey

# A row as read, of any width, its columns not yet checked: a DBAPI driver's tuple (a
# SQLAlchemy ``Row`` is one too). Whoever decodes it checks each column's type: a
# damaged record can make SQLite hand back a column as another type (see _rows.py).
AnyRow: TypeAlias = tuple[object, ...]


class RecordSource(Protocol):
    @property
    def first_row_key(self) -> RowKey:
        """Where :meth:`index_page`'s first page starts (every row key is past it)."""
        ...

    def events(
        self, stream_id: str, after_seq: int, upto_seq: int | None = None, limit: int | None = None
    ) -> Sequence[AnyRow]:
        """Event rows ``(stream_id, seq, type, schema_version, payload, recorded_at,
        checksum)`` with ``after_seq < seq <= upto_seq``, by seq, at most ``limit``."""
        ...

    def events_head(self, stream_id: str) -> int:
        """The highest seq of the stream's event rows (0: none)."""
        ...

    def projection(self, stream_id: str) -> AnyRow | None:
        """``(stream_id, kind, head_seq, schema_version, state, checksum)``."""
        ...

    def created(self, stream_id: str) -> AnyRow | None:
        """``(created_at, created_check)`` of the stream's projection row."""
        ...

    def all_projections(self) -> Sequence[AnyRow]:
        """Every projection row and its creation time: the six columns of
        :meth:`projection`, then ``created_at, created_check``."""
        ...

    def tails(self, kinds: Sequence[str]) -> Sequence[AnyRow]:
        """The event rows (as :meth:`events`') after their projection row's ``head_seq``
        of every stream whose row is of one of ``kinds``, by stream id and seq."""
        ...

    def stream_ids(self, after: str | None, limit: int) -> list[object]:
        """A page of projected stream ids in key order, after ``after``."""
        ...

    def orphan_stream_ids(self) -> list[object]:
        """Ids of streams with events but no projection row."""
        ...

    def index_page(self, after_rowid: RowKey, limit: int) -> Sequence[AnyRow]:
        """Entity index rows ``(row key, entity_id, stream_id, entity_kind, checksum)``
        with a row key past ``after_rowid``, by row key, at most ``limit``."""
        ...

    def integrity_problems(self) -> list[str]:
        """What the storage's own consistency check finds (empty: nothing, or none)."""
        ...

    def replace_projection(
        self,
        old: AnyRow,
        head_seq: int,
        schema_version: int,
        state: str,
        checksum: str,
        created: tuple[int, str] | None = None,
    ) -> bool:
        """Overwrite a projection row unless it or its stream moved since ``old`` was
        read (True: rewritten); ``created`` puts back its creation time and check."""
        ...
