"""Migrations run by hand, and the schema as the store's own dialect describes it.

The store only ever migrates up, inside ``open_store``; the tests also walk down
(``downgrade``) and stop at a given revision. They do it the way _migrate.py does:
Alembic on one connection, inside one transaction, with the migration scripts of
``turnkeeper/store/migrations``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import Connection

from turnkeeper.store import _migrate
from turnkeeper.store._dialect import DBAPIConnection, Dialect, dialect_for


@contextmanager
def dialect_engine(url: str) -> Iterator[tuple[Dialect, Engine]]:
    """The store's dialect for ``url`` and an engine of its own (disposed after)."""
    dialect = dialect_for(url)
    engine = dialect.create_engine()
    try:
        yield dialect, engine
    finally:
        engine.dispose()


def driver(conn: Connection) -> DBAPIConnection:
    """The driver's connection under SQLAlchemy's (the dialect's schema methods take it)."""
    raw: DBAPIConnection | None = conn.connection.driver_connection
    assert raw is not None
    return raw


def describe(url: str) -> list[tuple[str, ...]]:
    """The schema description the store's stamp is computed over."""
    with dialect_engine(url) as (dialect, engine), engine.connect() as conn:
        return dialect.schema_description(driver(conn))


def stamp_of(url: str) -> int:
    with dialect_engine(url) as (dialect, engine), engine.connect() as conn:
        return dialect.read_stamp(driver(conn))


def revisions(url: str) -> list[str]:
    with dialect_engine(url) as (_dialect, engine), engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalars()
        return [str(v) for v in rows]


def own_tables(url: str) -> set[str]:
    return {row[1] for row in describe(url) if row[0] == "table"} & _migrate.OWN_TABLES


def _migration_engine(url: str) -> Engine:
    # SQLite: a plain engine, foreign keys off as SQLite has them by default. A
    # downgrade rebuilds a table others reference (batch mode: copy, drop, rename),
    # which the store's connections (foreign_keys = ON) refuse mid-transaction.
    if dialect_for(url).name == "sqlite":
        return create_engine(dialect_for(url).url)
    return dialect_for(url).create_engine()


def migrate(url: str, direction: str, revision: str) -> None:
    """``alembic upgrade|downgrade <revision>`` on one connection, one transaction; an
    upgrade stamps the database as the store's own migration does."""
    engine = _migration_engine(url)
    dialect = dialect_for(url)
    try:
        with _migrate._ALEMBIC_LOCK, engine.begin() as conn:
            cfg = Config()
            cfg.set_main_option("script_location", str(_migrate.MIGRATIONS_DIR))
            cfg.attributes["connection"] = conn
            if direction == "upgrade":
                command.upgrade(cfg, revision)
            elif direction == "downgrade":
                command.downgrade(cfg, revision)
            else:
                raise ValueError(direction)
            # The stamp lives outside Alembic's scripts: set it as the code of the
            # target revision would have (none for a revision older than stamps).
            stamp = 0
            if revision != "base" and revision not in _migrate.UNSTAMPED_REVISIONS:
                stamp = _migrate.schema_stamp(revision, dialect.schema_description(driver(conn)))
            dialect.write_stamp(driver(conn), stamp)
    finally:
        engine.dispose()


def restamp(url: str, revision: str) -> None:
    """Set the revision row and stamp it as the code of that revision would."""
    with dialect_engine(url) as (dialect, engine), engine.begin() as conn:
        conn.exec_driver_sql(dialect.sql("UPDATE alembic_version SET version_num = ?"), (revision,))
        schema = dialect.schema_description(driver(conn))
        dialect.write_stamp(driver(conn), _migrate.schema_stamp(revision, schema))
