"""The store fixtures, parametrized over every backend in ``BACKENDS``.

``backend`` is a fresh, empty database: a file under the test's tmp_path on SQLite,
a schema of its own in the run's database on PostgreSQL (tests/pg.py), a named
in-memory database of its own on ``memory``. Its ``execute`` runs SQL on a
connection of its own, the way another program would reach the database (how the
contract tests damage a row without touching the store). Tests needing byte-level
access to a database file ask for ``sqlite_file``, which skips on backends without
one.

The contract tests (tests/store/conformance) also run on the in-memory store
(``CONTRACT_BACKENDS``); one that cannot apply to it says why with
:func:`not_for_memory` and is reported as skipped there. Every other test of this
directory is about the SQL store and runs on ``BACKENDS``.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests import pg
from tests.store.toy import CounterFolder
from turnkeeper.store import EventStore, open_event_store
from turnkeeper.store.memory import MemoryDatabase, open_memory_store

BACKENDS = ["sqlite", "postgresql"]
CONTRACT_BACKENDS = [*BACKENDS, "memory"]
_CONFORMANCE = "tests.store.conformance."
_Test = TypeVar("_Test", bound=Callable[..., None])
# Contract tests that cannot apply to the in-memory store: "module.name" -> why.
_NOT_FOR_MEMORY: dict[str, str] = {}


def _name(test: Callable[..., None]) -> str:
    return f"{test.__module__}.{test.__qualname__}"


def not_for_memory(reason: str) -> Callable[[_Test], _Test]:
    """Mark a contract test that cannot apply to the in-memory store, and why."""

    def mark(test: _Test) -> _Test:
        _NOT_FOR_MEMORY[_name(test)] = reason
        return test

    return mark


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``backend``: every backend for a contract test, the SQL ones for the rest; a
    test that names its backends itself (``sqlite_only``) keeps them. A contract test
    that cannot apply in memory (``not_for_memory``, with its reason, listed in
    docs/storage.md) is not made for it at all: a skipped test would read as one
    that could not run here."""
    if "backend" not in metafunc.fixturenames:
        return
    for marker in metafunc.definition.iter_markers("parametrize"):
        names = marker.args[0]
        if "backend" in (names.split(",") if isinstance(names, str) else names):
            return
    function = metafunc.function
    contract = function.__module__.startswith(_CONFORMANCE)
    reason = _NOT_FOR_MEMORY.get(_name(function))
    params = [
        name
        for name in (CONTRACT_BACKENDS if contract else BACKENDS)
        if not (name == "memory" and reason is not None)
    ]
    metafunc.parametrize("backend", params, indirect=True)


# For a test of SQLite itself (its file, its locks): the one backend, no skipped twin.
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@dataclass
class Backend:
    name: str
    url: str
    file: Path | None  # the database file, where there is one
    unreachable_url: str  # a database of this backend that cannot be reached
    # The in-memory database, held for the test's length (named ones live while held).
    memory: MemoryDatabase | None = None

    def execute(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement (``?`` placeholders) on a separate connection, committed."""
        if self.memory is not None:
            raise NotImplementedError("an in-memory database runs no SQL: mark the test")
        if self.file is not None:
            conn = sqlite3.connect(self.file, isolation_level=None)
            try:
                return conn.execute(statement, tuple(params)).fetchall()
            finally:
                conn.close()
        return pg.execute(self.url, statement, params)


def make_backend(name: str, tmp_path: Path) -> Backend:
    if name == "sqlite":
        tmp_path.mkdir(parents=True, exist_ok=True)
        path = tmp_path / "store.db"
        # A directory that is a file: the database can be neither opened nor created.
        (tmp_path / "not-a-directory").touch()
        unreachable = f"sqlite:///{tmp_path / 'not-a-directory' / 'store.db'}"
        return Backend(name, str(path), path, unreachable)
    if name == "postgresql":
        url = pg.fresh_postgres_url()
        return Backend(name, url, None, pg.closed_port_url(url))
    if name == "memory":
        url = f"memory:{uuid.uuid4().hex}"
        return Backend(name, url, None, "", memory=open_memory_store(url).database)
    raise NotImplementedError(name)


@pytest.fixture
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(str(request.param), tmp_path)


@pytest.fixture
def open_new(backend: Backend) -> Iterator[Callable[[], EventStore]]:
    """Open another store instance on the same database; all are closed at teardown."""
    opened: list[EventStore] = []

    def make() -> EventStore:
        store = open_event_store(backend.url)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(open_new: Callable[[], EventStore]) -> EventStore:
    return open_new()


@pytest.fixture
def sqlite_file(backend: Backend) -> Path:
    if backend.file is None:
        pytest.skip(f"{backend.name} has no database file to damage")
    return backend.file


@pytest.fixture
def folder() -> CounterFolder:
    return CounterFolder()
