"""LangGraph's own checkpointer conformance suite, installed from PyPI and run
unchanged, against ``TurnkeeperSaver`` on SQLite and on PostgreSQL: every test of
every tier (base: put, put_writes, get_tuple, list, delete_thread; extended:
delete_for_runs, copy_thread, prune) must pass."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator, Callable
from pathlib import Path

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from tests.pg import fresh_postgres_url
from turnkeeper.integrations.langgraph import TurnkeeperSaver


def _sqlite_urls(tmp_path: Path) -> Callable[[], str]:
    numbers = itertools.count()
    return lambda: str(tmp_path / f"saver-{next(numbers)}.db")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_conformance_suite_passes_every_tier(backend: str, tmp_path: Path) -> None:
    # A fresh database for each capability's suite: a new SQLite file, or a new schema.
    next_url = _sqlite_urls(tmp_path) if backend == "sqlite" else fresh_postgres_url

    @checkpointer_test(name=f"TurnkeeperSaver[{backend}]")
    async def factory() -> AsyncGenerator[TurnkeeperSaver, None]:
        with TurnkeeperSaver.from_url(next_url()) as saver:
            yield saver

    report = asyncio.run(validate(factory))

    failures = {name: result.failures for name, result in report.results.items() if result.failures}
    assert not failures, failures
    # Every capability was detected (the saver overrides each) and ran its tests.
    assert {name for name, r in report.results.items() if r.detected} == {
        cap.value for cap in ALL_CAPABILITIES
    }
    assert all(r.passed is True and r.tests_passed > 0 for r in report.results.values())
    assert report.passed_all()
    assert report.conformance_level() == "FULL"
