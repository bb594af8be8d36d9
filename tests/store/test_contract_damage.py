"""The EventStore contract (tests/store/conformance/damage.py) on every backend
(CONTRACT_BACKENDS: SQLite, PostgreSQL, in memory)."""

from tests.store.conformance.damage import *  # noqa: F403
