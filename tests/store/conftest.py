"""The store contract fixtures, parametrized over backends.

Only SQLite exists today. A PostgreSQL backend is one more entry in
``BACKENDS`` (and a ``_make_postgresql`` that creates a fresh database);
tests needing byte-level access to a database file ask for ``sqlite_file``,
which skips on backends without one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.store.toy import CounterFolder
from turnkeeper.store import SqlEventStore, open_store

BACKENDS = ["sqlite"]


@dataclass
class Backend:
    name: str
    url: str
    file: Path | None  # the database file, where there is one


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    name = str(request.param)
    if name == "sqlite":
        path = tmp_path / "store.db"
        return Backend(name, str(path), path)
    raise NotImplementedError(name)


@pytest.fixture
def open_new(backend: Backend) -> Iterator[Callable[[], SqlEventStore]]:
    """Open another store instance on the same database; all are closed at teardown."""
    opened: list[SqlEventStore] = []

    def make() -> SqlEventStore:
        store = open_store(backend.url)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(open_new: Callable[[], SqlEventStore]) -> SqlEventStore:
    return open_new()


@pytest.fixture
def sqlite_file(backend: Backend) -> Path:
    if backend.file is None:
        pytest.skip(f"{backend.name} has no database file to damage")
    return backend.file


@pytest.fixture
def folder() -> CounterFolder:
    return CounterFolder()
