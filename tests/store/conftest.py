"""The store fixtures, parametrized over every backend in ``BACKENDS``.

``backend`` is a fresh, empty database: a file under the test's tmp_path on SQLite,
a schema of its own in the run's database on PostgreSQL (tests/pg.py). Its
``execute`` runs SQL on a connection of its own, the way another program would
reach the database (how the contract tests damage a row without touching the
store). Tests needing byte-level access to a database file ask for ``sqlite_file``,
which skips on backends without one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import pg
from tests.store.toy import CounterFolder
from turnkeeper.store import EventStore, open_store

BACKENDS = ["sqlite", "postgresql"]

# For a test of SQLite itself (its file, its locks): the one backend, no skipped twin.
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@dataclass
class Backend:
    name: str
    url: str
    file: Path | None  # the database file, where there is one
    unreachable_url: str  # a database of this backend that cannot be reached

    def execute(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement (``?`` placeholders) on a separate connection, committed."""
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
    raise NotImplementedError(name)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(str(request.param), tmp_path)


@pytest.fixture
def open_new(backend: Backend) -> Iterator[Callable[[], EventStore]]:
    """Open another store instance on the same database; all are closed at teardown."""
    opened: list[EventStore] = []

    def make() -> EventStore:
        store = open_store(backend.url)
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
