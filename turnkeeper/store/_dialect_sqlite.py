"""The SQLite dialect: WAL, ``BEGIN IMMEDIATE``, result-code error mapping, file header checks."""

from __future__ import annotations

import functools
import random
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

from turnkeeper.errors import DataLoss, InvalidArgument, TurnkeeperError, Unavailable
from turnkeeper.store import _statements as q
from turnkeeper.store._connections import Connections, PlainPool
from turnkeeper.store._dialect import (
    WRITE_OPTION,
    DBAPIConnection,
    DBAPICursor,
    Dialect,
    driver_error,
    where,
)

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.engine import Connection

# sqlite3 primary result codes (the low byte of an extended code).
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_CORRUPT, _SQLITE_NOTADB = 5, 6, 11, 26
_SQLITE_UNAVAILABLE = {3, 7, 8, 10, 13, 14, 15}  # PERM NOMEM READONLY IOERR FULL CANTOPEN PROTOCOL
_SCHEMA_DAMAGE = ("no such table", "no such column", "no such index", "has no column named")

# Text columns come back through this decoder: invalid UTF-8 (a flipped byte on
# disk) becomes lone surrogates instead of an OperationalError that would abort
# the whole fetch without naming the record; the checksum then pins it down.
_decode_text = functools.partial(bytes.decode, encoding="utf-8", errors="surrogateescape")


def _switch_to_wal(cur: sqlite3.Cursor, timeout_s: float) -> None:
    """``journal_mode = WAL`` with our own retry: SQLite does not always call the busy
    handler for it, so two processes opening a brand-new file at once can see
    "database is locked" from this pragma even with a busy timeout set."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        try:
            cur.execute(q.SQLITE_WAL)
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)


class SqliteDialect(Dialect):
    name = "sqlite"

    def __init__(self, url: str, busy_timeout_s: float) -> None:
        super().__init__(url, busy_timeout_s)
        self._busy_ms = int(busy_timeout_s * 1000)

    def configure(self, conn: sqlite3.Connection) -> None:
        """Set up a new connection: every one the store uses, pooled or SQLAlchemy's."""
        # We issue BEGIN ourselves (see _on_begin and the writer), so the driver must not.
        conn.isolation_level = None
        conn.text_factory = _decode_text
        cur = conn.cursor()
        try:
            # busy_timeout first: switching a new file to WAL needs a lock.
            cur.execute(q.sqlite_busy_timeout(self._busy_ms))
            _switch_to_wal(cur, self.busy_timeout_s)
            cur.execute(q.sqlite_synchronous(durable=True))
            cur.execute(q.SQLITE_FOREIGN_KEYS)
        finally:
            cur.close()

    def connect(self) -> sqlite3.Connection:
        """A new plain connection, opened as SQLAlchemy's engine opens its own."""
        path = _plain_path(self.url)
        if path is None:
            raise ValueError(f"no plain file path in {self.url!r}")
        # Connections move between threads (pool, group-commit leader).
        conn = sqlite3.connect(path, timeout=self.busy_timeout_s, check_same_thread=False)
        try:
            self.configure(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def connections(self) -> Connections:
        if _plain_path(self.url) is None:
            raise InvalidArgument(
                "a SQLite database is a file: give its path or sqlite:///PATH, without "
                "options (for a store in memory, memory:)",
                reason="bad_database_url",
                details={"url": self.url},
            )
        return PlainPool(self.connect, self.create_engine)

    def create_engine(self) -> Engine:
        from sqlalchemy import create_engine, event
        from sqlalchemy.pool import NullPool

        engine = create_engine(
            self.url,
            # Each connection made, and set up, by connect: the store's one way to this
            # file. No pool of SQLAlchemy's: the engine serves the rare migration,
            # integrity check and repair; the store's own pool serves the rest.
            creator=self.connect,
            poolclass=NullPool,
        )

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # IMMEDIATE takes the write lock up front, so a read-check-write
            # sequence is serialized across processes instead of failing late.
            write = conn.get_execution_options().get(WRITE_OPTION, False)
            conn.exec_driver_sql(q.SQLITE_BEGIN_IMMEDIATE if write else q.BEGIN)

        return engine

    def sql(self, text: str) -> str:
        return text

    def prepare_writer(self, cursor: DBAPICursor) -> None:
        # The append path waits for the lock with its own short backoff (below):
        # SQLite's built-in busy handler sleeps 1 ms, 2 ms, 5 ms ... which is
        # several commits long and starves a second writer process.
        cursor.execute(q.sqlite_busy_timeout(0))

    def set_commit_durability(self, cursor: DBAPICursor, durable: bool) -> None:
        # In WAL mode NORMAL skips the fsync at commit; the WAL is sequential, so
        # the next FULL commit's fsync makes these frames durable as well.
        cursor.execute(q.sqlite_synchronous(durable))

    def begin_write(self, cursor: DBAPICursor, durable: bool = True) -> None:
        delay = 50e-6
        deadline = time.monotonic() + self.busy_timeout_s
        while True:
            try:
                cursor.execute(q.SQLITE_BEGIN_IMMEDIATE)
                return
            except sqlite3.OperationalError as exc:
                if _code(exc) not in (_SQLITE_BUSY, _SQLITE_LOCKED):
                    raise
                if time.monotonic() >= deadline:
                    raise
            time.sleep(delay * (0.5 + random.random()))  # jitter: two waiters desynchronize
            delay = min(delay * 2, 2e-3)

    def translate(self, exc: BaseException, **details: object) -> TurnkeeperError | None:
        exc = driver_error(exc)
        if not isinstance(exc, sqlite3.Error):
            return None
        code = _code(exc)
        text = str(exc)
        info = {**details, "driver_error": text}
        if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB) or "malformed" in text:
            reason = "not_a_database" if code == _SQLITE_NOTADB else "database_corrupt"
            return DataLoss(
                f"database file is damaged: {text} ({where(details)})", reason=reason, details=info
            )
        if any(sign in text for sign in _SCHEMA_DAMAGE):
            # The schema was checked against its stamp on open, so a table, column or
            # index this code's own statements name cannot be missing unless damaged.
            return DataLoss(
                f"database schema is damaged: {text} ({where(details)})",
                reason="schema_damaged",
                details=info,
            )
        if code in (_SQLITE_BUSY, _SQLITE_LOCKED):
            return Unavailable(
                f"database is locked past the timeout: {text}",
                reason="database_locked",
                details=info,
            )
        if code in _SQLITE_UNAVAILABLE:
            return Unavailable(
                f"database unavailable: {text}", reason="database_unavailable", details=info
            )
        return None

    def check_file(self) -> None:
        path = _file_of(self.url)
        if path is None:
            return
        try:
            with path.open("rb") as handle:
                header = handle.read(_HEADER_BYTES)
        except FileNotFoundError:
            return  # a new database
        except OSError as exc:
            raise Unavailable(
                f"database unavailable: {exc}", reason="database_unavailable"
            ) from exc
        if len(header) < _HEADER_BYTES:
            return  # empty or shorter than a header: SQLite itself says "not a database"
        problem = _header_problem(header)
        if problem is not None:
            raise DataLoss(
                f"database file is damaged: its header {problem} ({path})",
                reason="database_corrupt",
                details={"record": "file_header", "driver_error": problem},
            )

    def schema_description(self, conn: DBAPIConnection) -> list[tuple[str, ...]]:
        rows = conn.execute(q.SQLITE_SCHEMA).fetchall()
        return [tuple(str(v) for v in row) for row in rows]

    def read_stamp(self, conn: DBAPIConnection) -> int:
        row = conn.execute(q.SQLITE_READ_STAMP).fetchone()
        value = row[0] if row else None
        return int(value) if isinstance(value, int) else -1

    def write_stamp(self, conn: DBAPIConnection, stamp: int) -> None:
        conn.execute(q.sqlite_write_stamp(stamp))

    def integrity_problems(self, conn: Connection) -> list[str]:
        rows = conn.exec_driver_sql(q.SQLITE_INTEGRITY_CHECK).all()
        found = [str(row[0]) for row in rows]
        return [] if found == ["ok"] else found

    def unindexed(self, table: str) -> str:
        return q.sqlite_unindexed(table)


# The fixed part of a SQLite file header this store relies on (sqlite.org/fileformat):
# offset -> (what, allowed values). A WAL database has read/write versions 2; this
# store never uses reserved bytes, auto-vacuum or another text encoding.
_HEADER_BYTES = 100
_MAGIC = b"SQLite format 3\x00"
_HEADER_BYTE_RULES: dict[int, tuple[str, frozenset[int]]] = {
    18: ("file format write version", frozenset({1, 2})),
    19: ("file format read version", frozenset({1, 2})),
    20: ("reserved space per page", frozenset({0})),
    21: ("maximum payload fraction", frozenset({64})),
    22: ("minimum payload fraction", frozenset({32})),
    23: ("leaf payload fraction", frozenset({32})),
}
_HEADER_WORD_RULES: dict[int, tuple[str, frozenset[int]]] = {
    44: ("schema format", frozenset({0, 1, 2, 3, 4})),  # 0: tables only in the WAL yet
    52: ("auto-vacuum root page", frozenset({0})),
    56: ("text encoding", frozenset({0, 1})),  # 0: as for the schema format
    64: ("incremental vacuum flag", frozenset({0})),
}


def _header_problem(header: bytes) -> str | None:
    if header[:16] != _MAGIC:
        return None  # SQLite reports "file is not a database" itself (NOTADB)
    page_size = int.from_bytes(header[16:18], "big")
    if page_size != 1 and (page_size < 512 or page_size & (page_size - 1)):
        return f"names page size {page_size}"
    if header[18] != header[19]:
        return f"names read version {header[19]} but write version {header[18]}"
    for offset, (what, allowed) in _HEADER_BYTE_RULES.items():
        if header[offset] not in allowed:
            return f"has {what} {header[offset]} at byte {offset}"
    for offset, (what, allowed) in _HEADER_WORD_RULES.items():
        value = int.from_bytes(header[offset : offset + 4], "big")
        if value not in allowed:
            return f"has {what} {value} at byte {offset}"
    if any(header[72:92]):
        return "has bytes set in its reserved area (72-91)"
    return None


def _plain_path(url: str) -> str | None:
    """The file of a ``sqlite:///PATH`` URL that carries no options."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or "?" in url:
        return None
    # Percent-escapes decoded as SQLAlchemy's URL parsing decodes them: the same file.
    rest = unquote(url[len(prefix) :])
    return rest if rest and rest != ":memory:" else None


def _file_of(url: str) -> Path | None:
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        return None
    rest = url[len(prefix) :].split("?", 1)[0]
    return Path(rest) if rest and rest != ":memory:" else None


def _code(exc: sqlite3.Error) -> int:
    code = getattr(exc, "sqlite_errorcode", None)
    return int(code) & 0xFF if code is not None else -1
