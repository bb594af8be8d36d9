"""Read queries, each on a pooled connection of its own.

Fixed SQL (_statements.py) on the driver's connection; SQLAlchemy Core (imported
when used) only for repair's conditional rewrite. WAL lets these run next to the
writer without blocking it. Driver errors are translated here so that no raw
``sqlite3`` exception reaches a caller.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVarTuple

from turnkeeper.errors import DataLoss, TurnkeeperError
from turnkeeper.store import _statements as q
from turnkeeper.store._dialect import Dialect, RowKey, SqlParams, is_sqlalchemy_error
from turnkeeper.store._source import AnyRow

if TYPE_CHECKING:
    from sqlalchemy import Engine, Row, Select

    from turnkeeper.store._connections import Connections

_Ts = TypeVarTuple("_Ts")


def as_int(value: object) -> int:
    """``int(value)`` of a number column as read (it raises as ``int()`` does)."""
    if type(value) is int:  # as an undamaged row holds it: nothing to convert
        return value
    if isinstance(value, int | float | str | bytes):
        return int(value)
    raise TypeError(f"a number column holds {value!r:.40}")


class Reader:
    def __init__(self, connections: Connections, dialect: Dialect) -> None:
        self.connections = connections
        self.dialect = dialect

    @property
    def first_row_key(self) -> RowKey:
        """Where verify's page through the entity index starts (the dialect's)."""
        return self.dialect.first_row_key

    def integrity_problems(self) -> list[str]:
        """What the database's own integrity check finds (SQLite's; none elsewhere)."""
        with self.errors(record="database"), self.engine().connect() as conn:
            return self.dialect.integrity_problems(conn)

    def engine(self) -> Engine:
        """SQLAlchemy's engine on this database (on SQLite made on first use)."""
        return self.connections.engine()

    @contextmanager
    def errors(self, **context: object) -> Iterator[None]:
        """Translate driver errors raised inside the block into the typed taxonomy."""
        try:
            yield
        except TurnkeeperError:
            raise
        except UnicodeError as exc:
            raise self.typed(exc, **context) from exc
        except Exception as exc:
            if is_sqlalchemy_error(exc):
                raise self.typed(exc, **context) from exc
            # The driver's own errors (plain connections, pool "connect" hooks).
            typed = self.dialect.translate(exc, **context)
            if typed is None:
                raise
            raise typed from exc

    def typed(self, exc: BaseException, **context: object) -> TurnkeeperError:
        typed = self.dialect.translate(exc, **context)
        if typed is None and isinstance(exc, UnicodeError):
            # Every text bound to a read came from a caller that checked it, or from
            # the database itself: one that does not encode was read from a damaged row.
            typed = DataLoss(
                f"text read from the database does not encode: {exc}",
                reason="undecodable_text",
                details=context,
            )
        if typed is None:
            typed = TurnkeeperError(f"database error: {exc}", reason="internal", details=context)
        return typed

    def rows(self, stmt: Select[*_Ts], **context: object) -> Sequence[Row[*_Ts]]:
        from sqlalchemy.exc import DBAPIError

        with self.errors(**context):
            for attempt in range(2):
                try:
                    with self.engine().connect() as conn:
                        return conn.execute(stmt).all()
                except DBAPIError as exc:
                    # A pooled connection the server dropped (a restart): SQLAlchemy has
                    # invalidated the pool; a read is safe to ask once more.
                    if attempt or not exc.connection_invalidated:
                        raise
        raise AssertionError("unreachable")  # the loop returns or raises

    def driver_rows(self, sql: str, params: SqlParams, **context: object) -> list[AnyRow]:
        """Run one hot, fixed query on a pooled DBAPI connection directly.

        The turn path reads a stream's head and projection many times per turn; going
        through SQLAlchemy's statement layer costs ~160 µs a query against ~10 µs here.
        ``sql`` is written with ``?`` placeholders and adapted to the driver's style.
        """
        sql = self.dialect.sql(sql)
        for attempt in range(2):
            try:
                raw = self.connections.raw_connection()
            except Exception as exc:
                raise self.typed(exc, **context) from exc
            try:
                rows = list(raw.driver_connection.execute(sql, params).fetchall())
            except Exception as exc:
                if self.dialect.is_disconnect(exc):
                    # The server dropped this pooled connection (a restart; nothing is
                    # pinged before use, which would cost every read a round trip):
                    # discard it, and ask once more on a fresh one — a read is safe to.
                    raw.invalidate()
                    self.connections.discard_idle()  # its pool-mates died with it
                    if not attempt:
                        continue
                else:
                    raw.close()
                # No SQLAlchemy wrapping here: every driver error becomes a typed one, a
                # mapped one as the dialect says, any other as "internal".
                raise self.typed(exc, **context) from exc
            raw.close()
            return rows
        raise AssertionError("unreachable")  # the loop returns or raises

    def events(
        self, stream_id: str, after_seq: int, upto_seq: int | None = None, limit: int | None = None
    ) -> list[AnyRow]:
        sql = q.events(upto=upto_seq is not None, limit=limit is not None)
        params: tuple[str | int, ...] = (stream_id, after_seq)
        if upto_seq is not None:
            params += (upto_seq,)
        if limit is not None:
            params += (limit,)
        return self.driver_rows(sql, params, stream_id=stream_id, after_seq=after_seq)

    def events_after_head(
        self, stream_id: str, after_seq: int, limit: int | None
    ) -> tuple[object, list[AnyRow]] | None:
        """The head the stream's projection row holds and the stream's events after
        ``after_seq`` (at most ``limit``), read by one statement; None when the stream
        has no projection row (the caller reads its events alone)."""
        sql = q.events_with_head(limit=limit is not None)
        params: tuple[str | int, ...] = (after_seq, stream_id)
        if limit is not None:
            params += (limit,)
        rows = self.driver_rows(sql, params, stream_id=stream_id, after_seq=after_seq)
        if not rows:
            return None
        return rows[0][0], [row[1:] for row in rows if row[1] is not None]

    def events_head(self, stream_id: str) -> int:
        rows = self.driver_rows(q.HEAD, (stream_id,), stream_id=stream_id)
        return as_int(rows[0][0]) if rows and rows[0][0] is not None else 0

    def events_heads(self, stream_ids: Sequence[str]) -> list[int]:
        """Each stream's head, in order, by one query (one read transaction): a
        subquery per stream, so each is the index's last entry, as ``events_head``."""
        if not stream_ids:
            return []
        rows = self.driver_rows(q.heads(len(stream_ids)), tuple(stream_ids))
        return [as_int(value) if value is not None else 0 for value in rows[0]]

    def projection(self, stream_id: str) -> AnyRow | None:
        rows = self.driver_rows(
            q.PROJECTION, (stream_id,), stream_id=stream_id, record="projection"
        )
        return rows[0] if rows else None

    def projection_unindexed(self, stream_id: str) -> list[AnyRow]:
        """The projection rows of ``stream_id`` found by scanning the table (a miss of
        :meth:`projection` is confirmed with this: the table is one row per stream)."""
        sql = self._scan(q.PROJECTION_SCAN_OF_STREAM)
        return self.driver_rows(sql, (stream_id,), stream_id=stream_id, record="projection")

    def all_projections(self) -> list[AnyRow]:
        """Every projection row with its creation time and check, read from the table
        itself: ``(stream_id, kind, head_seq, schema_version, state, checksum,
        created_at, created_check)``."""
        return self.driver_rows(self._scan(q.PROJECTION_SCAN), (), record="projection")

    def tails(self, kinds: Sequence[str]) -> list[AnyRow]:
        """The events after their projection's head of every stream of ``kinds``, by
        stream and seq, in one query."""
        sql = q.tails(len(kinds), self.dialect.lateral_joins)
        return self.driver_rows(sql, tuple(kinds), record="event")

    def created(self, stream_id: str) -> AnyRow | None:
        """``(created_at, created_check)`` of a stream's projection row."""
        rows = self.driver_rows(
            q.CREATED,
            (stream_id,),
            stream_id=stream_id,
            record="projection",
        )
        return rows[0] if rows else None

    def _scan(self, sql: str) -> str:
        return sql.format(
            projections=self.dialect.unindexed("projections"),
            entity_index=self.dialect.unindexed("entity_index"),
            row_key=self.dialect.row_key,
        )

    def stream_ids(self, after: str | None, limit: int) -> list[object]:
        """A page of projected stream ids in key order (keyset pagination); each a ``str``
        unless its record is damaged."""
        if after is None:
            rows = self.driver_rows(q.STREAM_IDS, (limit,), record="projection")
        else:
            rows = self.driver_rows(q.STREAM_IDS_AFTER, (after, limit), record="projection")
        return [r[0] for r in rows]

    def orphan_stream_ids(self) -> list[object]:
        """Streams with events but no projection row (foreign keys make this corruption)."""
        return [r[0] for r in self.driver_rows(q.ORPHANS, (), record="event")]

    def lookup(self, entity_id: str) -> AnyRow | None:
        """``(stream_id, entity_kind, checksum)`` of ``entity_id``, through its index."""
        rows = self.driver_rows(q.LOOKUP, (entity_id,), entity_id=entity_id, record="index")
        return rows[0] if rows else None

    def lookup_unindexed(self, entity_id: str) -> list[AnyRow]:
        """``(entity_id, stream_id, entity_kind, checksum)`` rows found by scanning."""
        sql = self._scan(q.LOOKUP_SCAN)
        return self.driver_rows(sql, (entity_id,), entity_id=entity_id, record="index")

    def lookup_prefix(self, prefix: str) -> list[AnyRow]:
        """``(entity_id, stream_id, entity_kind, checksum)`` of every id starting with
        ``prefix``, found by scanning."""
        sql = self._scan(q.PREFIX_SCAN)
        return self.driver_rows(sql, (len(prefix), prefix), prefix=prefix, record="index")

    def index_page(self, after_rowid: RowKey, limit: int) -> list[AnyRow]:
        """A page of entity index rows in table order: ``(row key, entity_id, stream_id,
        entity_kind, checksum)``; the row key is the dialect's ``row_key``, and the
        first page starts after its ``first_row_key``."""
        return self.driver_rows(self._scan(q.INDEX_PAGE), (after_rowid, limit), record="index")

    def replace_projection(
        self,
        old: AnyRow,
        head_seq: int,
        schema_version: int,
        state: str,
        checksum: str,
        created: tuple[int, str] | None = None,
    ) -> bool:
        """Overwrite a projection row unless it or its stream moved since ``old`` was read;
        ``created`` puts back its creation time and check. Repair alone writes so: on
        SQLAlchemy Core, imported here."""
        from sqlalchemy import func, select, update

        from turnkeeper.store._schema import events, projections

        stream_id = old[0]
        events_head = (
            select(func.coalesce(func.max(events.c.seq), 0))
            .where(events.c.stream_id == stream_id)
            .scalar_subquery()
        )
        stmt = (
            update(projections)
            .where(
                projections.c.stream_id == stream_id,
                projections.c.head_seq == old[2],
                projections.c.checksum == old[5],
                events_head == head_seq,
            )
            .values(
                head_seq=head_seq, schema_version=schema_version, state=state, checksum=checksum
            )
        )
        if created is not None:
            stmt = stmt.values(created_at=created[0], created_check=created[1])
        with (
            self.errors(stream_id=stream_id, record="projection"),
            self.engine().connect().execution_options(**self.dialect.write_options()) as conn,
            conn.begin(),
        ):
            return conn.execute(stmt).rowcount == 1
