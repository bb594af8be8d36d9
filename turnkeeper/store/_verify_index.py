"""verify's two checks beyond the streams: the file's structure and the entity index.

**Structure.** SQLite's own ``integrity_check`` reads every page and compares every
index with its table. A bit flipped in a table's copy of an indexed column (an
event's ``stream_id``) is invisible to reads that go through the index, and the
checksums agree with the index's copy; only this check sees it.

**The entity index.** It is derivable from the events: every stream's events
register their entities. verify folds each stream once anyway, so the folder
(when it is an :class:`~turnkeeper.store.records.IndexingFolder`) hands back the
entries the events register; every row of the table is read past its index and
checked against its checksum, and per stream the set of rows must equal the set the
events imply. The sets are compared by an order-independent digest and count per
stream, so memory stays one entry per stream however many ids are indexed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from hashlib import blake2b
from typing import TypeGuard

from turnkeeper.errors import DataLoss
from turnkeeper.store._dialect import RowKey
from turnkeeper.store._rows import index_from_row
from turnkeeper.store._source import RecordSource
from turnkeeper.store.records import IndexEntry, Mismatch, MismatchKind

ALL_STREAMS = "*"  # the stream id of a mismatch that no single stream can own
_PAGE = 5000
_MASK = (1 << 64) - 1
_NAMED = 20  # damaged index rows named one by one; the rest are counted


def structure_problems(reader: RecordSource) -> list[Mismatch]:
    """What SQLite's own integrity check finds, as one mismatch (empty: nothing)."""
    try:
        found = reader.integrity_problems()
    except DataLoss as exc:
        found = [exc.message]
    if not found:
        return []
    shown = "; ".join(found[:10]) + (f"; ... ({len(found)} problems)" if len(found) > 10 else "")
    return [
        Mismatch(
            stream_id=ALL_STREAMS,
            kind=MismatchKind.SOURCE_WRITE,
            detail=f"the database file fails SQLite's integrity check: {shown}",
            damaged=True,
        )
    ]


def _entry_digest(entity_id: str, stream_id: str, kind: str) -> int:
    text = f"{len(entity_id)}:{entity_id}\0{len(stream_id)}:{stream_id}\0{kind}"
    raw = blake2b(text.encode("utf-8", "surrogateescape"), digest_size=8).digest()
    return int.from_bytes(raw, "big")


@dataclass
class _Tally:
    count: int = 0
    digest: int = 0

    def add(self, entity_id: str, stream_id: str, kind: str) -> None:
        self.count += 1
        self.digest = (self.digest + _entry_digest(entity_id, stream_id, kind)) & _MASK


@dataclass
class IndexCheck:
    """What the folds said each stream registers, compared with the table at the end."""

    expected: dict[str, _Tally] = field(default_factory=dict)
    # Streams whose events could not all be folded: their rows are checked only
    # against their checksums.
    unknown: set[str] = field(default_factory=set)
    recomputed: bool = False  # whether any fold reported its entries

    def registered(self, stream_id: str, entries: Iterable[IndexEntry]) -> None:
        self.recomputed = True
        tally = self.expected.setdefault(stream_id, _Tally())
        for entity_id, kind in {(e.entity_id, e.entity_kind) for e in entries}:
            tally.add(entity_id, stream_id, kind)

    def not_folded(self, stream_id: str) -> None:
        self.unknown.add(stream_id)

    def compare(self, reader: RecordSource) -> list[Mismatch]:
        try:
            found, damaged = self._scan(reader)
        except DataLoss as exc:
            return [
                Mismatch(
                    stream_id=ALL_STREAMS,
                    kind=MismatchKind.INDEX,
                    detail=f"the entity index is unreadable: {exc.message}",
                    damaged=True,
                )
            ]
        out = [*damaged]
        if not self.recomputed:
            return out
        for stream_id in sorted(set(found) | set(self.expected)):
            if stream_id in self.unknown:
                continue
            want, have = self.expected.get(stream_id, _Tally()), found.get(stream_id, _Tally())
            if (want.count, want.digest) != (have.count, have.digest):
                out.append(
                    Mismatch(
                        stream_id=stream_id,
                        kind=MismatchKind.INDEX,
                        detail=f"the entity index holds {have.count} rows for this stream "
                        f"where its events register {want.count}, or other ones",
                        damaged=True,
                    )
                )
        return out

    def _scan(self, reader: RecordSource) -> tuple[dict[str, _Tally], list[Mismatch]]:
        found: dict[str, _Tally] = {}
        damaged: list[Mismatch] = []
        after = reader.first_row_key
        while True:
            page = reader.index_page(after, _PAGE)
            for _rowid, entity_id, owner_id, owner_kind, checksum in page:
                try:
                    if not isinstance(entity_id, str):
                        raise DataLoss(f"an entity index row's id is {entity_id!r:.40}")
                    stream_id, kind = index_from_row(entity_id, (owner_id, owner_kind, checksum))
                except DataLoss as exc:
                    if len(damaged) < _NAMED:
                        owner = owner_id if isinstance(owner_id, str) else ALL_STREAMS
                        damaged.append(
                            Mismatch(
                                stream_id=owner,
                                kind=MismatchKind.INDEX,
                                detail=exc.message,
                                damaged=True,
                            )
                        )
                    continue
                found.setdefault(stream_id, _Tally()).add(entity_id, stream_id, kind)
            if len(page) < _PAGE:
                return found, damaged
            # Pages are read by rowid ascending: each one must start past the last, or
            # a damaged rowid order would have the scan read the same page forever.
            last = page[-1][0]
            if not _rises(last, after):
                raise DataLoss("the entity index's row order is damaged (row keys do not rise)")
            after = last


def _rises(key: object, after: RowKey) -> TypeGuard[RowKey]:
    """Whether a page's last row key is past the one the page was read after (keys of
    one dialect are of one type: a rowid, or an entity id)."""
    if isinstance(key, int) and isinstance(after, int):
        return key > after
    if isinstance(key, str) and isinstance(after, str):
        return key > after
    raise TypeError(f"row keys {key!r:.40} and {after!r:.40} do not compare")
