"""PostgreSQL for the tests: one database per test run, one schema per test.

The server is ``TURNKEEPER_TEST_POSTGRES_URL`` (default: the local trust-auth
server). The first test that asks for PostgreSQL creates a database
``tk_test_<8 hex>`` for the whole run; the root conftest drops it when the session
ends (after terminating any connection a test left open). Each test gets a schema
of its own in that database, ``tk_<n>``, and a URL whose ``options`` parameter sets
the connection's ``search_path`` to it, so the store's tables, its migrations and
its schema description (``current_schema()``) all see that schema only.

When the server cannot be reached the tests that need it are skipped, unless
``TURNKEEPER_REQUIRE_POSTGRES=1``, which makes that a failure.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
URL_ENV = "TURNKEEPER_TEST_POSTGRES_URL"
REQUIRE_ENV = "TURNKEEPER_REQUIRE_POSTGRES"
_CONNECT_TIMEOUT_S = 3


def server_url() -> str:
    """The maintenance URL of the test server (any database the user may connect to)."""
    return os.environ.get(URL_ENV) or DEFAULT_URL


def required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") == "1"


def with_database(url: str, database: str, search_path: str | None = None) -> str:
    """``url`` pointed at ``database``, optionally with a ``search_path`` for every
    connection (libpq's ``options`` parameter, which psycopg and SQLAlchemy pass on)."""
    parts = urlsplit(url)
    query = [q for q in parts.query.split("&") if q and not q.startswith("options=")]
    if search_path is not None:
        query.append("options=" + quote(f"-csearch_path={search_path}", safe=""))
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, "&".join(query), ""))


def closed_port_url(url: str) -> str:
    """``url`` moved to a local port nothing listens on (connections are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free now, and nobody is told to listen on it
    parts = urlsplit(url)
    user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit((parts.scheme, f"{user}127.0.0.1:{port}", parts.path, parts.query, ""))


def libpq_url(url: str) -> str:
    """A SQLAlchemy URL (``postgresql+psycopg://``) as libpq spells it."""
    scheme, rest = url.split("://", 1)
    return "postgresql://" + rest if scheme.startswith("postgresql") else url


def admin_connect(url: str) -> psycopg.Connection[Any]:
    """A plain autocommit psycopg connection (DDL, damage, inspection)."""
    return psycopg.connect(libpq_url(url), autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S)


def execute(url: str, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run one statement written with ``?`` placeholders on a connection of its own."""
    with admin_connect(url) as conn:
        cur = conn.execute(statement.replace("?", "%s"), tuple(params))
        return list(cur.fetchall()) if cur.description is not None else []


@dataclass
class PostgresDatabase:
    """The run's database on the test server; hands out one fresh schema per call."""

    server: str
    name: str
    url: str  # the database itself, default search_path

    def __post_init__(self) -> None:
        self._counter = itertools.count(1)
        self._lock = threading.Lock()

    def fresh_schema(self) -> str:
        with self._lock:
            schema = f"tk_{next(self._counter)}"
        with admin_connect(self.url) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        return schema

    def fresh_url(self) -> str:
        """A URL whose connections see a new, empty schema only."""
        return with_database(self.server, self.name, search_path=self.fresh_schema())

    def drop(self) -> None:
        with admin_connect(self.server) as conn:
            # Connections a test leaked (or a killed child process left) would make
            # DROP DATABASE fail; end them first. FORCE does the same for latecomers.
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (self.name,),
            )
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name))
            )


@dataclass
class _Session:
    database: PostgresDatabase | None = None
    unreachable: str | None = None  # why the server could not be reached, once tried


_state_lock = threading.Lock()
_session = _Session()


def _unavailable(why: str) -> NoReturn:
    message = f"PostgreSQL test server {server_url()!r} is unreachable: {why}"
    if required():
        pytest.fail(f"{message} ({REQUIRE_ENV}=1 requires it)", pytrace=False)
    pytest.skip(message)


def session_database() -> PostgresDatabase:
    """The run's database, created on first use; skips (or fails) without a server."""
    with _state_lock:
        if _session.database is None and _session.unreachable is None:
            server = server_url()
            name = f"tk_test_{uuid.uuid4().hex[:8]}"
            try:
                with admin_connect(server) as conn:
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            except psycopg.OperationalError as exc:
                _session.unreachable = " ".join(str(exc).split()) or type(exc).__name__
            else:
                url = with_database(server, name)
                _session.database = PostgresDatabase(server, name, url)
        database, unreachable = _session.database, _session.unreachable
    if database is None:
        _unavailable(unreachable or "unknown")
    return database


def drop_session_database() -> None:
    """Drop the run's database if this process created one (the root conftest calls
    this when the session finishes)."""
    with _state_lock:
        database, _session.database = _session.database, None
    if database is not None:
        database.drop()


def fresh_postgres_url() -> str:
    """A store URL on a new, empty schema of the run's database (skips without a server)."""
    return session_database().fresh_url()


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[PostgresDatabase]:
    """The run's database for the whole session, dropped at its end."""
    yield session_database()
    drop_session_database()


@pytest.fixture
def postgres_url(postgres_database: PostgresDatabase) -> str:
    """A store URL on a fresh schema for this test."""
    return postgres_database.fresh_url()
