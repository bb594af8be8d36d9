"""The EventStore contract (tests/store/conformance/groups.py) on every backend
(CONTRACT_BACKENDS: SQLite, PostgreSQL, in memory)."""

from tests.store.conformance.groups import *  # noqa: F403
