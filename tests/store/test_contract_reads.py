"""The EventStore contract (tests/store/conformance/reads.py) on every backend
(CONTRACT_BACKENDS: SQLite, PostgreSQL, in memory)."""

from tests.store.conformance.reads import *  # noqa: F403
