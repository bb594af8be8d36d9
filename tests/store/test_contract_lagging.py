"""The EventStore contract (tests/store/conformance/lagging.py) on every backend
(CONTRACT_BACKENDS: SQLite, PostgreSQL, in memory)."""

from tests.store.conformance.lagging import *  # noqa: F403
