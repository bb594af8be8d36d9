"""Everything that differs between database backends lives here.

The store's SQL is portable (``ON CONFLICT ... DO NOTHING``, savepoints,
conditional ``UPDATE``); what is not is collected in a :class:`Dialect`:
engine creation and per-connection settings, how a write transaction begins,
the DBAPI parameter style, and how driver exceptions map onto the error
taxonomy. The two dialects live in ``_dialect_sqlite.py`` (the embedded default)
and ``_dialect_postgres.py`` (psycopg 3: ``%s`` placeholders, plain ``BEGIN``,
SQLSTATE-based error mapping, an advisory lock around migrations).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeAlias

from turnkeeper.errors import InvalidArgument, TurnkeeperError, Unavailable

if TYPE_CHECKING:
    # SQLAlchemy is imported where an engine is made (a migration, verify, repair,
    # PostgreSQL): ~130 ms of every command that opens a SQLite store otherwise.
    from sqlalchemy import Engine
    from sqlalchemy.engine import Connection

    from turnkeeper.store._connections import Connections

# Execution option that makes SQLAlchemy begin a *write* transaction.
WRITE_OPTION = "turnkeeper_write"

DEFAULT_BUSY_TIMEOUT_S = 10.0


# What the store binds to a statement's placeholders: text, integers and NULL.
SqlParams: TypeAlias = Sequence[str | int | None]
# Where verify's page through the entity index starts and goes on from: a row key of
# the dialect's ``row_key`` column (SQLite: the rowid; PostgreSQL: the entity id).
RowKey: TypeAlias = int | str


class DBAPICursor(Protocol):
    """The part of a DBAPI cursor (sqlite3's, psycopg's) the append path uses."""

    @property
    def rowcount(self) -> int: ...

    def execute(self, sql: str, params: SqlParams = ..., /) -> object: ...
    def executemany(self, sql: str, params: Sequence[SqlParams], /) -> object: ...
    # A row as the driver returns it; its columns are checked where they are read.
    def fetchone(self) -> tuple[object, ...] | None: ...
    def fetchall(self) -> Sequence[tuple[object, ...]]: ...
    def close(self) -> None: ...


class DBAPIConnection(Protocol):
    """The part of a DBAPI connection (sqlite3's, psycopg's) the store uses directly."""

    def cursor(self) -> DBAPICursor: ...
    def execute(self, sql: str, params: SqlParams = ..., /) -> DBAPICursor: ...
    def close(self) -> None: ...


class Wakeups(Protocol):
    def signal(self) -> None: ...
    def wait(self, timeout_s: float) -> bool: ...
    def close(self) -> None: ...


class Dialect:
    """Backend-specific behaviour. Subclasses override every method."""

    name = "abstract"

    def __init__(self, url: str, busy_timeout_s: float) -> None:
        self.url = url
        self.busy_timeout_s = busy_timeout_s

    def create_engine(self) -> Engine:
        """A SQLAlchemy engine whose connections are set up as :meth:`connections`' are:
        what migrations, verify and repair run on."""
        raise NotImplementedError

    def connections(self) -> Connections:
        """Where the store's reads and its writer take their DBAPI connections from."""
        raise NotImplementedError

    def sql(self, text: str) -> str:
        """Adapt a ``?``-placeholder statement to the driver's parameter style."""
        raise NotImplementedError

    def prepare_writer(self, cursor: DBAPICursor) -> None:
        """Settings for the long-lived DBAPI connection of the append path."""

    def begin_write(self, cursor: DBAPICursor, durable: bool = True) -> None:
        """Begin the append path's transaction; ``durable=False``: its commit need not
        wait for the disk, where the dialect sets that per transaction."""
        raise NotImplementedError

    # Whether the driver can send a whole transaction in one exchange with the server
    # (:meth:`pipelined_commit`).
    pipelines = False

    def pipelined_commit(
        self, cursor: DBAPICursor, steps: Sequence[tuple[str, Sequence[SqlParams]]]
    ) -> bool:
        """Run ``steps`` (a statement in the driver's style, :meth:`sql`, and its rows:
        one execution per row) between BEGIN and COMMIT in one exchange with the server.
        True: committed. False: a statement failed; rolled back, nothing written.
        Raises the driver's error when the connection failed (its COMMIT may have
        landed unless :meth:`ended_before_commit` says it did not). Only where
        :attr:`pipelines`."""
        raise NotImplementedError

    def ended_before_commit(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised by :meth:`pipelined_commit`, proves that nothing of
        the transaction was committed (the server said it ended the session first, or
        nothing was sent)."""
        return False

    def set_commit_durability(self, cursor: DBAPICursor, durable: bool) -> None:
        """Whether the next commits wait for the disk (set outside a transaction), where
        the dialect sets that per connection."""

    def translate(self, exc: BaseException, **details: object) -> TurnkeeperError | None:
        """The typed error for a driver exception, or None when it is not a database error."""
        raise NotImplementedError

    def check_file(self) -> None:
        """Refuse a database file whose fixed header fields are damaged (``DATA_LOSS``)
        before the driver opens it; nothing to do for a server database."""

    def schema_description(self, conn: DBAPIConnection) -> list[tuple[str, ...]]:
        """The schema as the database describes it, in a stable order: what the schema
        stamp is computed over (see _migrate.py). On the driver's connection: the check
        on open runs without SQLAlchemy."""
        raise NotImplementedError

    def read_stamp(self, conn: DBAPIConnection) -> int:
        """The schema stamp the database carries (0: none)."""
        raise NotImplementedError

    def write_stamp(self, conn: DBAPIConnection, stamp: int) -> None:
        """Record the schema stamp, inside the migration's transaction."""
        raise NotImplementedError

    def integrity_problems(self, conn: Connection) -> list[str]:
        """What the database's own structural check finds (empty: nothing)."""
        raise NotImplementedError

    def unindexed(self, table: str) -> str:
        """``table`` as a FROM item read by scanning the table itself, past its indexes."""
        return table

    # How verify pages through the entity index in table order: a key column that
    # rises through the table, and the key before the first row.
    row_key = "rowid"
    first_row_key: RowKey = 0
    # Whether the database runs on another clock than this machine's (a server).
    own_clock = False
    # Whether a listing reads each projection's tail by a LATERAL join (_statements.py,
    # ``tails``): how PostgreSQL is told to read them by index, one stream at a time.
    lateral_joins = False

    def wakeups(self) -> Wakeups | None:
        """How workers wake each other up across processes (None: they poll)."""
        return None

    def write_options(self) -> dict[str, object]:
        """Execution options of a connection that runs a write transaction (a
        migration, a repair): SQLAlchemy's ``conn.begin()`` then really begins one."""
        return {WRITE_OPTION: True}

    def lock_migrations(self, conn: Connection) -> None:
        """Serialise migrations across processes, inside the migration's transaction
        (SQLite: its write transaction already does)."""

    def clock_offset_us(self, read: Callable[[str], Sequence[Sequence[object]]]) -> int:
        """The database clock minus this machine's, in microseconds (0: the same clock);
        ``read`` runs one query on a connection of the store's pool."""
        return 0

    def is_disconnect(self, exc: BaseException) -> bool:
        """Whether the connection that raised ``exc`` is gone (a new one is needed)."""
        return False

    def is_integrity_error(self, exc: BaseException) -> bool:
        """A constraint violation (PEP 249 names the class the same in every driver)."""
        exc = driver_error(exc)
        return type(exc).__name__ in ("IntegrityError", "UniqueViolation", "ForeignKeyViolation")


def driver_error(exc: BaseException) -> BaseException:
    """The driver's own exception inside a SQLAlchemy ``DBAPIError``, else ``exc``."""
    if "sqlalchemy.exc" not in sys.modules:
        return exc  # nothing imported SQLAlchemy: ``exc`` cannot be one of its errors
    from sqlalchemy.exc import DBAPIError

    if isinstance(exc, DBAPIError) and exc.orig is not None:
        return exc.orig
    return exc


def is_sqlalchemy_error(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLAlchemy's (without importing SQLAlchemy to ask)."""
    if "sqlalchemy.exc" not in sys.modules:
        return False
    from sqlalchemy.exc import SQLAlchemyError

    return isinstance(exc, SQLAlchemyError)


def where(details: Mapping[str, object]) -> str:
    """The record an error happened at, as text for its message."""
    parts = [f"{k}={v}" for k, v in details.items() if v is not None]
    return ", ".join(parts) if parts else "no record context"


def dialect_for(url_or_path: str | Path, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> Dialect:
    """Pick the dialect for a URL (``sqlite:///...``) or a plain file path."""
    text = str(url_or_path)
    if "://" not in text:
        from turnkeeper.store._dialect_sqlite import SqliteDialect

        path = Path(text).expanduser().resolve()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file where a directory should be, no permission ...
            raise Unavailable(
                f"database unavailable: cannot make {path.parent}: {exc.strerror or exc}",
                reason="database_unavailable",
                details={"path": str(path)},
            ) from exc
        return SqliteDialect(f"sqlite:///{path}", busy_timeout_s)
    scheme = text.split("://", 1)[0].split("+", 1)[0]
    if scheme == "sqlite":
        from turnkeeper.store._dialect_sqlite import SqliteDialect

        if text in ("sqlite://", "sqlite:///:memory:"):
            # Each pooled connection would see its own empty database.
            raise InvalidArgument(
                "in-memory SQLite cannot back a durable store", reason="unsupported_backend"
            )
        return SqliteDialect(text, busy_timeout_s)
    if scheme in ("postgresql", "postgres"):
        from turnkeeper.extras import needs_extra

        with needs_extra("postgres", "a PostgreSQL store (postgresql://)"):
            from turnkeeper.store._dialect_postgres import PostgresDialect

        return PostgresDialect(text, busy_timeout_s)
    raise InvalidArgument(
        f"no store backend for {scheme!r} (use sqlite:///PATH or postgresql://...)",
        reason="unsupported_backend",
        details={"scheme": scheme},
    )
