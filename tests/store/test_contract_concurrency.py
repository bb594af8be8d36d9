"""The EventStore contract (tests/store/conformance/concurrency.py) on every backend
(CONTRACT_BACKENDS: SQLite, PostgreSQL, in memory)."""

from tests.store.conformance.concurrency import *  # noqa: F403
