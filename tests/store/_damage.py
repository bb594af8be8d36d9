"""Damage to stored rows, done the way another program would do it, on every backend.

On a SQL backend each change is plain SQL on a connection of the test's own
(``backend.execute``); on the in-memory one it is the same change to the same row
in the database's tables (``MemoryDatabase``), taken under its lock. Either way the
store is not told: its checks must notice.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.store.conftest import Backend
from turnkeeper.store._source import AnyRow
from turnkeeper.store.memory import MemoryDatabase


class Damage:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def _memory(self, change: Callable[[MemoryDatabase], None]) -> bool:
        """Apply ``change`` to the in-memory tables; False on a SQL backend."""
        database = self.backend.memory
        if database is None:
            return False
        with database.lock:
            change(database)
        return True

    def change_payload(self, stream_id: str, seq: int, old: str, new: str) -> None:
        def change(db: MemoryDatabase) -> None:
            rows = db.event_rows[stream_id]
            i = next(i for i, row in enumerate(rows) if row[1] == seq)
            rows[i] = _with(rows[i], 4, str(rows[i][4]).replace(old, new))

        if not self._memory(change):
            self.backend.execute(
                "UPDATE events SET payload = replace(payload, ?, ?)"
                " WHERE stream_id = ? AND seq = ?",
                (old, new, stream_id, seq),
            )

    def delete_event(self, stream_id: str, seq: int) -> None:
        def change(db: MemoryDatabase) -> None:
            db.event_rows[stream_id] = [r for r in db.event_rows[stream_id] if r[1] != seq]

        if not self._memory(change):
            self.backend.execute(
                "DELETE FROM events WHERE stream_id = ? AND seq = ?", (stream_id, seq)
            )

    def change_state(self, stream_id: str, old: str, new: str) -> None:
        def change(db: MemoryDatabase) -> None:
            row = db.projection_rows[stream_id]
            db.projection_rows[stream_id] = _with(row, 4, str(row[4]).replace(old, new))

        if not self._memory(change):
            self.backend.execute(
                "UPDATE projections SET state = replace(state, ?, ?) WHERE stream_id = ?",
                (old, new, stream_id),
            )

    def put_projection(self, stream_id: str, head_seq: int, state: str, checksum: str) -> None:
        """Put back a projection row's head, state and checksum (a valid old row)."""

        def change(db: MemoryDatabase) -> None:
            row = db.projection_rows[stream_id]
            db.projection_rows[stream_id] = (*row[:2], head_seq, row[3], state, checksum, *row[6:])

        if not self._memory(change):
            self.backend.execute(
                "UPDATE projections SET head_seq = ?, state = ?, checksum = ? WHERE stream_id = ?",
                (head_seq, state, checksum, stream_id),
            )

    def flip_created_bit(self, stream_id: str, bit: int = 4096) -> None:
        def change(db: MemoryDatabase) -> None:
            row = db.projection_rows[stream_id]
            created = row[6]
            assert isinstance(created, int)
            db.projection_rows[stream_id] = _with(row, 6, created ^ bit)

        if not self._memory(change):
            flipped = f"(created_at | {bit}) - (created_at & {bit})"  # one bit, as XOR
            self.backend.execute(
                f"UPDATE projections SET created_at = {flipped} WHERE stream_id = ?", (stream_id,)
            )

    def change_kind(self, stream_id: str, kind: str) -> None:
        def change(db: MemoryDatabase) -> None:
            db.projection_rows[stream_id] = _with(db.projection_rows[stream_id], 1, kind)

        if not self._memory(change):
            self.backend.execute(
                "UPDATE projections SET kind = ? WHERE stream_id = ?", (kind, stream_id)
            )

    def change_entity_kind(self, entity_id: str, kind: str) -> None:
        def change(db: MemoryDatabase) -> None:
            db.index_rows[entity_id] = _with(db.index_rows[entity_id], 3, kind)

        if not self._memory(change):
            self.backend.execute(
                "UPDATE entity_index SET entity_kind = ? WHERE entity_id = ?", (kind, entity_id)
            )

    def delete_index_rows_of(self, stream_id: str) -> None:
        def change(db: MemoryDatabase) -> None:
            for entity_id, row in list(db.index_rows.items()):
                if row[2] == stream_id:
                    del db.index_rows[entity_id]

        if not self._memory(change):
            self.backend.execute("DELETE FROM entity_index WHERE stream_id = ?", (stream_id,))


def _with(row: AnyRow, column: int, value: object) -> AnyRow:
    return (*row[:column], value, *row[column + 1 :])
