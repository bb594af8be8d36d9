"""Schema migrations: a one-query check on open, Alembic only when it is needed.

Importing and running Alembic costs far more than opening a store should, so
``ensure_schema`` first reads the ``alembic_version`` row and compares it with
:data:`HEAD_REVISION`; only a missing or older revision starts Alembic, under
the write lock so two processes opening a fresh file do not both create it.

The schema is guarded like a record. Every migration ends by stamping the database
(:meth:`Dialect.write_stamp`; in SQLite its ``user_version``) with
:func:`schema_stamp`: a digest of the revision and of the schema as the database
describes it (its tables and indexes with their SQL). On open the stamp is computed
again: a flipped bit in the revision row, a table or column name, or an index
definition does not match it, and is ``DATA_LOSS`` — never an ``INTERNAL`` error at
the first query that meets it, nor a "schema too new" for a revision that is only a
damaged one. A revision this code does not know is "too new" only when its stamp
checks out. (The rule is for every release to keep: it is how an older release
tells a newer schema from a damaged one.)
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from hashlib import blake2b
from pathlib import Path
from typing import TYPE_CHECKING

from turnkeeper.errors import DataLoss, FailedPrecondition
from turnkeeper.store._dialect import DBAPIConnection, Dialect
from turnkeeper.store._statements import REVISIONS

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.engine import Connection

    from turnkeeper.store._connections import Connections

# Every revision this code knows, oldest first; the last is the head. A test
# checks this list against the scripts in migrations/versions.
KNOWN_REVISIONS: tuple[str, ...] = ("0001", "0002")
HEAD_REVISION = KNOWN_REVISIONS[-1]
# Revisions written before the stamp existed: their databases carry none (0).
UNSTAMPED_REVISIONS = frozenset({"0001"})
MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# The tables of every revision: a database holding one has been migrated before.
OWN_TABLES = frozenset({"events", "projections", "entity_index"})


def schema_stamp(revision: str, schema: Sequence[tuple[str, ...]]) -> int:
    """A non-zero 31-bit digest of the revision and the schema description."""
    digest = blake2b(f"turnkeeper-schema\0{revision}\0".encode(), digest_size=4)
    for row in schema:
        digest.update("\0".join(row).encode("utf-8", "surrogateescape") + b"\n")
    return (int.from_bytes(digest.digest(), "big") & 0x7FFFFFFF) or 1


def ensure_schema(connections: Connections, dialect: Dialect) -> None:
    """Bring the database to :data:`HEAD_REVISION`; refuse one newer than this code,
    and one whose schema does not check out (``DATA_LOSS``). The check runs on a
    driver connection: SQLAlchemy and Alembic are imported only to migrate."""
    try:
        raw = connections.raw_connection()
        try:
            conn = raw.driver_connection
            schema = dialect.schema_description(conn)
            tables = {row[1] for row in schema if row[0] == "table"}
            current = None
            if "alembic_version" in tables:
                current = _check(_versions(conn), dialect.read_stamp(conn), schema)
        except BaseException:
            raw.invalidate()  # whatever failed on it, no later read inherits it
            raise
        raw.close()
    except Exception as exc:
        typed = dialect.translate(exc, operation="open")
        if typed is not None:
            raise typed from exc
        raise
    if current is None and tables & OWN_TABLES:
        raise _damaged("its tables are there but the record of its revision is not", tables)
    if current == HEAD_REVISION:
        return
    _upgrade(connections.engine(), dialect)


def _versions(conn: DBAPIConnection) -> list[object]:
    return [row[0] for row in conn.execute(REVISIONS).fetchall()]


def _damaged(why: str, found: object) -> DataLoss:
    return DataLoss(
        f"the database schema is damaged: {why} (restore the database from a backup)",
        reason="schema_damaged",
        details={"record": "schema", "found": str(found)[:500]},
    )


def _check(versions: Sequence[object], stamp: int, schema: Sequence[tuple[str, ...]]) -> str | None:
    """The revision the database is at, once its stamp checks out."""
    if not versions:
        return None
    if len(versions) > 1:
        raise _damaged("it names several revisions", list(versions))
    version = versions[0]
    if not isinstance(version, str):
        raise _damaged("its revision is not text", version)
    if stamp == schema_stamp(version, schema):
        if version not in KNOWN_REVISIONS:
            raise FailedPrecondition(
                f"database schema {list(versions)} is newer than this code (head "
                f"{HEAD_REVISION}); upgrade turnkeeper",
                reason="schema_too_new",
                details={"database_revisions": list(versions), "code_head": HEAD_REVISION},
            )
        return version
    if stamp == 0 and version in UNSTAMPED_REVISIONS:
        return version  # older than the stamp: the migration about to run stamps it
    raise _damaged(
        f"revision {version!r} and the tables it describes do not match its stamp", version
    )


# Alembic keeps its migration context in process-global state, so two threads
# migrating two stores at once would run each other's scripts on the wrong
# connection (seen as a segfault in sqlite3). One migration per process at a time.
_ALEMBIC_LOCK = threading.Lock()


def _upgrade(engine: Engine, dialect: Dialect) -> None:
    from alembic import command
    from alembic.config import Config

    with (
        _ALEMBIC_LOCK,
        engine.connect().execution_options(**dialect.write_options()) as conn,
        conn.begin(),
    ):
        dialect.lock_migrations(conn)
        driver = _driver(conn)
        # Re-read under the write lock: another process may have migrated meanwhile.
        if _current_in_tx(driver, dialect) == HEAD_REVISION:
            return
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        # env.py runs on this connection, inside this transaction (SQLite DDL
        # is transactional): a crash mid-migration leaves the old schema.
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
        # The stamp commits with the migration, so a database at a revision always
        # carries that revision's stamp.
        dialect.write_stamp(driver, schema_stamp(HEAD_REVISION, dialect.schema_description(driver)))


def _driver(conn: Connection) -> DBAPIConnection:
    """The driver's connection under SQLAlchemy's: the same transaction."""
    driver: DBAPIConnection | None = conn.connection.driver_connection
    if driver is None:  # only an invalidated connection has none
        raise RuntimeError("the migration's connection has no driver connection")
    return driver


def _current_in_tx(conn: DBAPIConnection, dialect: Dialect) -> str | None:
    schema = dialect.schema_description(conn)
    if not any(row[0] == "table" and row[1] == "alembic_version" for row in schema):
        return None
    return _check(_versions(conn), dialect.read_stamp(conn), schema)
