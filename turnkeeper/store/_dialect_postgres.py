"""The PostgreSQL dialect (psycopg 3): SQLSTATE error mapping, the schema as the catalog
describes it, an advisory lock around migrations, and the database's clock.

Transactions run at READ COMMITTED. That is enough for the append path because every
head check is one statement that compares the stream's events head with the expected
one (an ``UPDATE`` of the projection row, or a ``SELECT`` when the append leaves the
row behind) or inserts a new stream's row (``INSERT ... ON CONFLICT DO NOTHING``), and
the (stream, seq) key of the events decides between two writers that both passed it:
the second waits for the first to commit, its insert collides, and it gets
``StreamConflict`` once the batch is run again statement by statement.
Statements are prepared on first use (``prepare_threshold=0``). An append's whole
transaction -- BEGIN, its head-checked projection writes, its events and index entries,
COMMIT -- goes to the server in one pipeline (:meth:`PostgresDialect.pipelined_commit`):
one round trip and the WAL flush, the floor of any committed insert. The store's reads
and its writer take plain psycopg connections from the store's own pool
(_connections.py); SQLAlchemy's engine is made only for migrations, verify and repair.
"""

from __future__ import annotations

import re
import select
import time
from collections.abc import Callable, Sequence

import psycopg
from psycopg import pq
from psycopg.conninfo import make_conninfo
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import Connection
from sqlalchemy.engine.url import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from turnkeeper.errors import (
    DataLoss,
    FailedPrecondition,
    InvalidArgument,
    TurnkeeperError,
    Unavailable,
)
from turnkeeper.store import _statements as q
from turnkeeper.store._connections import Connections, PlainPool
from turnkeeper.store._dialect import (
    DBAPIConnection,
    DBAPICursor,
    Dialect,
    RowKey,
    SqlParams,
    driver_error,
    where,
)
from turnkeeper.store._wakeups import PostgresWakeups

# A 64-bit number of our own: pg_advisory_xact_lock serialises migrations with it.
_MIGRATION_LOCK_KEY = 0x746B_6D69_6772_6174  # "tkmigrat"
_STAMP_PREFIX = "turnkeeper-schema-stamp="
CONNECT_TIMEOUT_S = 5
# How many times an idle connection with something to read is read before it is used.
_IDLE_READS = 4
# How a connection notices that the server went out of reach (a cut link, a partition:
# no reset ever arrives). Without these a call in flight waits for the kernel's TCP
# retransmissions, a quarter of an hour; with them it fails as ``UNAVAILABLE`` after
# about 10 s (unacknowledged data: ``tcp_user_timeout``; an idle wait for an answer:
# keepalive probes), so a worker's threads never hang on a database they cannot reach
# and its lease keeper and fence act on time (runtime/turn/fencing.py).
TCP_OPTIONS: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,  # milliseconds
}

# SQLSTATEs (PostgreSQL's errcodes): what each means for a caller.
_GONE = ("57P01", "57P02", "57P03")  # admin/crash shutdown, cannot connect now
_TRANSIENT = {
    "40001": "database_conflict",  # serialization failure: retry
    "40P01": "database_conflict",  # deadlock detected: retry
    "55P03": "database_locked",  # lock not available
    "57014": "database_timeout",  # statement timeout / cancelled
    "25006": "database_read_only",  # a standby, or a read-only transaction
}
_CORRUPT = ("XX001", "XX002")  # data corrupted, index corrupted
_SCHEMA = ("42P01", "42703", "42704")  # undefined table, column, object
_BAD_TEXT = ("22021", "22P05")  # a character the encoding cannot hold (NUL)
_NO_SUCH_DATABASE = "3D000"  # invalid_catalog_name
# What the server says when a connection names a database it does not have.
_NO_SUCH_DATABASE_TEXT = re.compile(r'database "(?P<name>[^"]*)" does not exist')


class _NotCommitted(psycopg.OperationalError):
    """The connection failed, and provably before anything of the transaction committed."""


def _dropped_while_idle(conn: psycopg.Connection[tuple[object, ...]]) -> bool:
    """Whether the server ended this idle connection (a restart, a crash): an idle
    connection has nothing to read but the server's last word or the end of the
    stream. One poll, no round trip: once the whole transaction goes in one pipeline,
    a connection found dead only by it could not tell whether the COMMIT landed."""
    poller = select.poll()
    try:
        poller.register(conn.fileno(), select.POLLIN)
    except psycopg.OperationalError:  # "the connection is lost": no socket left
        return True
    # The last word (FATAL 57P01, say) and the end may come apart: read until neither
    # is left, or the end was met. A notice or a parameter's new value reads as
    # nothing more and the connection is kept.
    for _ in range(_IDLE_READS):
        if not poller.poll(0):
            return False
        try:
            conn.pgconn.consume_input()
        except psycopg.OperationalError:
            return True
        if conn.pgconn.status == pq.ConnStatus.BAD:
            return True
    return False


class PostgresDialect(Dialect):
    name = "postgresql"
    row_key = "entity_id"  # no rowid: verify pages through the index in key order
    first_row_key: RowKey = ""
    own_clock = True
    pipelines = True
    lateral_joins = True

    def __init__(self, url: str, busy_timeout_s: float) -> None:
        super().__init__(url, busy_timeout_s)
        try:
            parsed = make_url(url)
        except Exception as exc:
            raise InvalidArgument(f"not a database URL: {exc}", reason="bad_database_url") from exc
        self._engine_url = parsed.set(drivername="postgresql+psycopg")
        # libpq's spelling of the URL with the connection options the engine's have.
        self._conninfo = make_conninfo(
            parsed.set(drivername="postgresql").render_as_string(hide_password=False),
            connect_timeout=CONNECT_TIMEOUT_S,
            **TCP_OPTIONS,
        )

    def create_engine(self) -> Engine:
        return create_engine(
            self._engine_url,
            # Every connection of the store, SQLAlchemy's too, is made one way: by
            # :meth:`connect`, with the same timeouts and prepared statements.
            creator=self.connect,
            # No pool of SQLAlchemy's: the engine serves the rare migration, verify
            # and repair, each on a connection of its own, closed after; the store's
            # own pool serves everything else. Statements run outside transactions
            # unless one is asked for (write_options).
            poolclass=NullPool,
            isolation_level="AUTOCOMMIT",
        )

    def connections(self) -> Connections:
        # The store's own bounded pool of psycopg connections, as on SQLite: a checkout
        # from SQLAlchemy's pool cost a turn's ~8 reads its events and reset-on-return
        # in CPU. A connection the server dropped is discarded by whoever met it (the
        # reader with the idle rest of the pool, _reads.py; the writer, _writer.py).
        return PlainPool(self.connect, self.create_engine)

    def connect(self) -> DBAPIConnection:
        """A psycopg connection set up as the engine's are: outside transactions
        (autocommit; the writer begins its own), statements prepared on first use."""
        conn: psycopg.Connection[tuple[object, ...]] = psycopg.connect(
            self._conninfo, autocommit=True, prepare_threshold=0
        )
        return conn

    def write_options(self) -> dict[str, object]:
        return {**super().write_options(), "isolation_level": "READ COMMITTED"}

    def sql(self, text: str) -> str:
        return text.replace("?", "%s")

    def prepare_writer(self, cursor: DBAPICursor) -> None:
        # The writer issues BEGIN/COMMIT itself, as on SQLite.
        cursor.connection.autocommit = True  # type: ignore[attr-defined]

    def begin_write(self, cursor: DBAPICursor, durable: bool = True) -> None:
        # Every commit waits for the server's WAL flush, ``durable`` or not. A commit
        # that may skip it (synchronous_commit off) is lost when the *server* crashes
        # while the control plane lives on and goes on from it: seen as a worker whose
        # next write met "host events before host started" after an immediate restart.
        # On SQLite the database cannot crash without its controller, whose restart
        # recovery covers such records; here nothing would.
        cursor.execute("BEGIN")

    def pipelined_commit(
        self, cursor: DBAPICursor, steps: Sequence[tuple[str, Sequence[SqlParams]]]
    ) -> bool:
        conn: psycopg.Connection[tuple[object, ...]] = cursor.connection  # type: ignore[attr-defined]
        if conn.closed or _dropped_while_idle(conn):
            # Nothing is sent on it: a new connection may take the transaction.
            raise _NotCommitted("the server closed the connection while it was idle")
        # A cursor of its own: its status says whether COMMIT's answer came back.
        done = conn.cursor()
        try:
            with conn.pipeline():
                cursor.execute(q.BEGIN)
                for sql, rows in steps:
                    if len(rows) == 1:
                        cursor.execute(sql, rows[0])
                    else:
                        cursor.executemany(sql, rows)
                done.execute(q.COMMIT)
        except psycopg.Error as exc:
            if done.statusmessage == "COMMIT":
                return True  # answered: on disk, whatever failed after it
            if self.is_disconnect(exc):
                if (exc.sqlstate or "") in _GONE:
                    # The server ended the session and said so before COMMIT's answer,
                    # which it would have sent first: the transaction did not commit.
                    raise _NotCommitted(str(exc)) from exc
                raise
            # A statement failed (a head check, a key): the transaction stays open,
            # aborted, until this.
            cursor.execute(q.ROLLBACK)
            return False
        finally:
            done.close()
        return True

    def ended_before_commit(self, exc: BaseException) -> bool:
        return isinstance(driver_error(exc), _NotCommitted)

    def translate(self, exc: BaseException, **details: object) -> TurnkeeperError | None:
        exc = driver_error(exc)
        if not isinstance(exc, psycopg.Error):
            return None
        state = exc.sqlstate or ""
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        info = {**details, "driver_error": text, "sqlstate": state or None}
        if state in _CORRUPT:
            return DataLoss(
                f"database data is damaged: {text} ({where(details)})",
                reason="database_corrupt",
                details=info,
            )
        if state in _SCHEMA:
            return DataLoss(
                f"database schema is damaged: {text} ({where(details)})",
                reason="schema_damaged",
                details=info,
            )
        if state in _BAD_TEXT:
            return InvalidArgument(
                f"text the database cannot store: {text}", reason="bad_text", details=info
            )
        if state in _TRANSIENT:
            return Unavailable(f"database busy: {text}", reason=_TRANSIENT[state], details=info)
        missing = self._missing_database(exc, state)
        if missing is not None:
            return self._database_not_found(missing, info)
        if self.is_disconnect(exc) or state.startswith("53"):
            return Unavailable(
                f"database unavailable: {text}", reason="database_unavailable", details=info
            )
        return None

    def _missing_database(self, exc: psycopg.Error, state: str) -> str | None:
        """The database name when the server said it has no such database, else None.
        A refused connection carries no SQLSTATE (libpq reports it as text), so the
        server's FATAL message is matched too; a server speaking another language
        falls through to UNAVAILABLE, as before."""
        if state == _NO_SUCH_DATABASE:
            return self._engine_url.database or ""
        if state:
            return None
        found = _NO_SUCH_DATABASE_TEXT.search(str(exc))
        return found.group("name") if found else None

    def _database_not_found(self, name: str, info: dict[str, object]) -> FailedPrecondition:
        """Not transient: waiting will not create it. Say how to, on the URL's server."""
        url = self._engine_url
        where = " ".join(
            f"{flag} {value}"
            for flag, value in (("-h", url.host), ("-p", url.port), ("-U", url.username))
            if value
        )
        create = f"createdb {where + ' ' if where else ''}{name or 'NAME'}"
        return FailedPrecondition(
            f"database {name!r} does not exist on the server: create it ({create}), "
            "or name an existing one in the URL",
            reason="database_not_found",
            details={**info, "database": name, "fix": create},
        )

    def is_disconnect(self, exc: BaseException) -> bool:
        exc = driver_error(exc)
        if isinstance(exc, psycopg.InterfaceError):
            return True  # the connection is closed
        if not isinstance(exc, psycopg.OperationalError):
            return False
        state = exc.sqlstate or ""
        # No SQLSTATE: the server never answered (refused, reset, timed out).
        return not state or state.startswith("08") or state in _GONE

    def schema_description(self, conn: DBAPIConnection) -> list[tuple[str, ...]]:
        rows = conn.execute(q.POSTGRES_SCHEMA).fetchall()
        return [tuple(str(v) for v in row) for row in rows]

    def read_stamp(self, conn: DBAPIConnection) -> int:
        row = conn.execute(q.POSTGRES_READ_STAMP).fetchone()
        comment = row[0] if row else None
        if comment is None:
            return 0
        text = str(comment)
        if not text.startswith(_STAMP_PREFIX) or not text[len(_STAMP_PREFIX) :].isdigit():
            return -1  # matches no stamp: the schema check calls it damaged
        return int(text[len(_STAMP_PREFIX) :])

    def write_stamp(self, conn: DBAPIConnection, stamp: int) -> None:
        # A comment on the version table: transactional like the migration, and outside
        # the description the stamp is computed over.
        conn.execute(q.POSTGRES_WRITE_STAMP.format(comment=f"{_STAMP_PREFIX}{int(stamp)}"))

    def integrity_problems(self, conn: Connection) -> list[str]:
        # The server checks its pages itself (data checksums, where the cluster has them);
        # the amcheck extension, where installed, checks the B-tree indexes too.
        installed = conn.exec_driver_sql(q.POSTGRES_AMCHECK_INSTALLED).scalar()
        if not installed:
            return []
        problems: list[str] = []
        names = conn.exec_driver_sql(q.POSTGRES_INDEXES).all()
        for oid, name in names:
            try:
                with conn.begin_nested():
                    conn.exec_driver_sql(q.POSTGRES_INDEX_CHECK.format(index_oid=int(oid)))
            except DBAPIError as exc:
                problems.append(f"index {name}: {exc.orig}")
        return problems

    def wakeups(self) -> PostgresWakeups:
        conninfo = self._engine_url.set(drivername="postgresql")
        return PostgresWakeups(
            conninfo.render_as_string(hide_password=False), CONNECT_TIMEOUT_S, TCP_OPTIONS
        )

    def lock_migrations(self, conn: Connection) -> None:
        conn.exec_driver_sql(q.POSTGRES_LOCK_MIGRATIONS.format(lock_key=_MIGRATION_LOCK_KEY))

    def clock_offset_us(self, read: Callable[[str], Sequence[Sequence[object]]]) -> int:
        before = time.time_ns() // 1000
        rows = read(q.POSTGRES_CLOCK_US)
        after = time.time_ns() // 1000
        db_now = rows[0][0] if rows else None
        return int(str(db_now)) - (before + after) // 2 if db_now is not None else 0
