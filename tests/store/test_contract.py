"""The EventStore contract (tests/store/conformance/appends.py) on every backend
(CONTRACT_BACKENDS: SQLite, PostgreSQL, in memory)."""

from tests.store.conformance.appends import *  # noqa: F403
