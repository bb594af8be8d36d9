"""Schema migrations: a one-query check on open, Alembic only when it is needed.

Importing and running Alembic costs far more than opening a store should, so
``ensure_schema`` first reads the ``alembic_version`` row and compares it with
:data:`HEAD_REVISION`; only a missing or older revision starts Alembic, under
the write lock so two processes opening a fresh file do not both create it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import Engine, inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from turnkeeper.errors import FailedPrecondition
from turnkeeper.store._dialect import WRITE_OPTION, Dialect

# Every revision this code knows, oldest first; the last is the head. A test
# checks this list against the scripts in migrations/versions.
KNOWN_REVISIONS: tuple[str, ...] = ("0001",)
HEAD_REVISION = KNOWN_REVISIONS[-1]
MIGRATIONS_DIR = Path(__file__).with_name("migrations")

_VERSION_SQL = text("SELECT version_num FROM alembic_version")


def ensure_schema(engine: Engine, dialect: Dialect) -> None:
    """Bring the database to :data:`HEAD_REVISION`; refuse one newer than this code."""
    try:
        with engine.connect() as conn:
            current = _check(conn.execute(_VERSION_SQL).scalars().all())
    except DBAPIError as exc:
        typed = dialect.translate(exc, operation="open")
        if typed is not None:
            raise typed from exc
        current = None  # no alembic_version table yet: a new (or empty) file
    if current == HEAD_REVISION:
        return
    _upgrade(engine)


def _check(versions: Sequence[str]) -> str | None:
    if not versions:
        return None
    unknown = [v for v in versions if v not in KNOWN_REVISIONS]
    if unknown or len(versions) > 1:
        raise FailedPrecondition(
            f"database schema {versions} is newer than this code (head {HEAD_REVISION}); "
            "upgrade turnkeeper",
            reason="schema_too_new",
            details={"database_revisions": list(versions), "code_head": HEAD_REVISION},
        )
    return versions[0]


# Alembic keeps its migration context in process-global state, so two threads
# migrating two stores at once would run each other's scripts on the wrong
# connection (seen as a segfault in sqlite3). One migration per process at a time.
_ALEMBIC_LOCK = threading.Lock()


def _upgrade(engine: Engine) -> None:
    from alembic import command
    from alembic.config import Config

    with (
        _ALEMBIC_LOCK,
        engine.connect().execution_options(**{WRITE_OPTION: True}) as conn,
        conn.begin(),
    ):
        # Re-read under the write lock: another process may have migrated meanwhile.
        if _current_in_tx(conn) == HEAD_REVISION:
            return
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        # env.py runs on this connection, inside this transaction (SQLite DDL
        # is transactional): a crash mid-migration leaves the old schema.
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def _current_in_tx(conn: Connection) -> str | None:
    if not inspect(conn).has_table("alembic_version"):
        return None
    return _check(conn.execute(_VERSION_SQL).scalars().all())
