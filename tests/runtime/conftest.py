"""Shared fixtures of the runtime tests.

Registered before any test module here imports it: the crash suite's invariants
are plain ``assert`` statements in ``crash_support``, not in a test module, and only
rewritten modules explain a failed assertion with the values that failed it."""

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.register_assert_rewrite("tests.runtime.crash_support")

from turnkeeper.store import SqlEventStore, open_store  # noqa: E402 - after the rewrite hook


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlEventStore]:
    """A store on a SQLite file of the test's own, closed after it."""
    opened = open_store(tmp_path / "tk.db")
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def two_stores(tmp_path: Path) -> Iterator[tuple[SqlEventStore, SqlEventStore]]:
    """Two store objects on one SQLite file: they stand in for two processes."""
    first, second = open_store(tmp_path / "tk.db"), open_store(tmp_path / "tk.db")
    try:
        yield first, second
    finally:
        first.close()
        second.close()
