"""Every SQL statement the store package issues compiles against the migrated schema.

The statements are collected from the source of ``turnkeeper/store/*.py`` (almost all
of them in ``_statements.py``): every string literal (and every module-level string)
that starts with SELECT, INSERT, UPDATE or DELETE, with its ``{placeholder}`` table
names filled in as the reader fills them. Each is then compiled without running:
``PREPARE`` on PostgreSQL (its ``?`` placeholders converted as the dialect converts
them, then numbered ``$1..$n`` as psycopg does for the server), ``EXPLAIN`` on
SQLite. A statement naming a column or table the migrations do not create fails
here, not at the first call in production. A backend's own statements in
``_statements`` (named ``SQLITE_...`` and ``POSTGRES_...``), and any SQL a backend's
own module (``_dialect_sqlite``, ``_dialect_postgres``, ``pg_admin``) might hold, are
compiled on that backend only.

PostgreSQL's integrity check calls ``bt_index_check``, which only the amcheck
extension defines; it is compiled with amcheck installed in a transaction that is
rolled back. The utility statements (``COMMENT ON``, ``CREATE DATABASE``, ``DROP
DATABASE``, SQLite's pragmas) are not collected: neither ``PREPARE`` nor ``EXPLAIN``
compiles one. Running them is what the stamp and demo tests do.
"""

from __future__ import annotations

import ast
import importlib
import re
import sqlite3
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests import pg
from tests.store.conftest import Backend
from turnkeeper.store import _statements, open_store
from turnkeeper.store._dialect import Dialect, dialect_for

STORE_DIR = Path(__file__).resolve().parents[2] / "turnkeeper" / "store"
# Upper case, then a space: the store spells its SQL that way (a dict key "insert" is
# not a statement).
_STATEMENT = re.compile(r"\s*(SELECT|INSERT|UPDATE|DELETE)\s")
# Numbers the dialect writes into a statement itself: an index's oid (any number
# compiles, it is looked up only when run) and a 64-bit advisory lock key.
_NUMBERS = {"index_oid": "16384", "lock_key": str(2**62 + 1)}
# Statements calling a function only an extension defines (run only where installed).
_EXTENSION = {_statements.POSTGRES_INDEX_CHECK: "amcheck"}


@dataclass(frozen=True)
class Statement:
    module: str
    sql: str  # as written: ``?`` placeholders, ``{table}`` names unfilled


def _is_statement(value: object) -> bool:
    return isinstance(value, str) and _STATEMENT.match(value) is not None


def only_on(module: str) -> str | None:
    """The one backend a module's SQL is written for (None: every backend); in
    ``_statements``, a statement's name says it (``_statements.SQLITE_SCHEMA``)."""
    if module.startswith("_statements."):
        module = module.removeprefix("_statements.").lower()
    if "sqlite" in module:
        return "sqlite"
    if "postgres" in module or module.startswith("pg_"):
        return "postgresql"
    return None


def collect() -> list[Statement]:
    found: dict[tuple[str, str], Statement] = {}
    for name, value in vars(_statements).items():
        if _is_statement(value):
            found[(f"_statements.{name}", value)] = Statement(f"_statements.{name}", value)
    for path in sorted(STORE_DIR.glob("*.py")):
        module = path.stem
        if module == "_statements":
            continue  # collected above, by name
        tree = ast.parse(path.read_text(encoding="utf-8"))
        # The literal pieces of an f-string are fragments, not statements.
        fragments = {
            id(part)
            for node in ast.walk(tree)
            if isinstance(node, ast.JoinedStr)
            for part in node.values
        }
        for node in ast.walk(tree):
            if (
                id(node) not in fragments
                and isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and _is_statement(node.value)
            ):
                found[(module, node.value)] = Statement(module, node.value)
        # Module-level strings built by expressions (``A + B``) exist only at runtime.
        for value in vars(importlib.import_module(f"turnkeeper.store.{module}")).values():
            if _is_statement(value):
                found[(module, value)] = Statement(module, value)
    return list(found.values())


def composed() -> list[Statement]:
    """Statements built at call time (a stream's events, several heads)."""
    return [
        Statement("_statements", _statements.events(upto=upto, limit=limit))
        for upto in (False, True)
        for limit in (False, True)
    ] + [Statement("_statements", _statements.heads(3))]


def filled(sql: str, dialect: Dialect) -> str:
    """``{projections}``/``{entity_index}``/``{row_key}`` as the reader fills them in,
    and the dialect's numbers (``_NUMBERS``)."""
    values: dict[str, str] = {}
    for _, name, _, _ in string.Formatter().parse(sql):
        if name is None:
            continue
        if name == "row_key":
            values[name] = str(dialect.row_key)
        elif name in ("events", "projections", "entity_index"):
            values[name] = dialect.unindexed(name)
        elif name in _NUMBERS:
            values[name] = _NUMBERS[name]
        else:
            raise AssertionError(f"unknown placeholder {{{name}}} in {sql!r}: teach this test")
    return sql.format(**values) if values else sql


def numbered(sql: str) -> str:
    """``%s`` placeholders (the dialect's) as the server's ``$1, $2, ...``."""
    counter = iter(range(1, sql.count("%s") + 1))
    return re.sub(r"%s", lambda _m: f"${next(counter)}", sql)


def statements_for(backend: Backend) -> list[Statement]:
    return [s for s in [*collect(), *composed()] if only_on(s.module) in (None, backend.name)]


@pytest.fixture
def compile_sql(backend: Backend) -> Callable[[str], None]:
    """Compile one collected statement against the backend's migrated schema, or raise."""
    open_store(backend.url).close()  # migrated to head
    dialect = dialect_for(backend.url)

    if backend.file is not None:
        path = backend.file

        def compile_sqlite(sql: str) -> None:
            text = filled(sql, dialect)
            conn = sqlite3.connect(path)
            try:
                conn.execute("EXPLAIN " + text, (None,) * text.count("?"))
            finally:
                conn.close()

        return compile_sqlite

    def compile_postgres(sql: str) -> None:
        text = numbered(dialect.sql(filled(sql, dialect)))
        extension = _EXTENSION.get(sql)
        # Rolled back: an extension installed for the check is gone after it.
        with pg.admin_connect(backend.url) as conn, conn.transaction(force_rollback=True):
            if extension is not None:
                conn.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")
            conn.execute(f"PREPARE tk_check AS {text}")
            conn.execute("DEALLOCATE tk_check")

    return compile_postgres


def test_the_collector_finds_the_hot_statements(backend: Backend) -> None:
    found = {s.sql for s in statements_for(backend)}
    hot = [
        _statements.UPDATE_PROJECTION,
        _statements.INSERT_PROJECTION,
        _statements.INSERT_EVENT,
        _statements.INSERT_INDEX,
        _statements.SELECT_EVENTS_HEAD,
        _statements.events(upto=False, limit=False),
        _statements.HEAD,
        _statements.PROJECTION,
        _statements.LOOKUP,
        _statements.PREFIX_SCAN,
        _statements.INDEX_PAGE,
    ]
    assert [sql for sql in hot if sql not in found] == []
    assert len(found) >= 20


def test_each_backend_gets_its_own_statements(backend: Backend) -> None:
    found = {s.sql for s in statements_for(backend)}
    postgres = [
        _statements.POSTGRES_SCHEMA,
        _statements.POSTGRES_READ_STAMP,
        _statements.POSTGRES_AMCHECK_INSTALLED,
        _statements.POSTGRES_INDEXES,
        _statements.POSTGRES_INDEX_CHECK,
        _statements.POSTGRES_LOCK_MIGRATIONS,
        _statements.POSTGRES_CLOCK_US,
        _statements.POSTGRES_END_CONNECTIONS,
    ]
    sqlite = [_statements.SQLITE_SCHEMA]
    own, other = (postgres, sqlite) if backend.name == "postgresql" else (sqlite, postgres)
    assert [sql for sql in own if sql not in found] == []
    assert [sql for sql in other if sql in found] == []


def test_every_store_statement_compiles(
    backend: Backend, compile_sql: Callable[[str], None]
) -> None:
    failures = []
    checked = 0
    for statement in statements_for(backend):
        try:
            compile_sql(statement.sql)
        except (sqlite3.Error, psycopg.Error) as exc:
            failures.append(f"{statement.module}: {statement.sql!r}: {exc}")
        checked += 1
    assert checked >= 20
    assert failures == []


def test_a_statement_naming_a_missing_column_fails_the_check(
    compile_sql: Callable[[str], None],
) -> None:
    # The check itself: what it does to a real statement with one column misspelt.
    events = _statements.events(upto=False, limit=False)
    compile_sql(events)
    with pytest.raises((sqlite3.Error, psycopg.Error), match="payloadx"):
        compile_sql(events.replace("payload", "payloadx"))
    with pytest.raises((sqlite3.Error, psycopg.Error)):
        compile_sql(_statements.INSERT_EVENT.replace("recorded_at", "recorded_on"))
