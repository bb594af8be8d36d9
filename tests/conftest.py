"""Fixtures every test folder may use: PostgreSQL (tests/pg.py), one database per run."""

from __future__ import annotations

import pytest

from tests.pg import drop_session_database, postgres_database, postgres_url

__all__ = ["postgres_database", "postgres_url"]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # fresh_postgres_url() may have created the run's database outside any fixture.
    drop_session_database()
