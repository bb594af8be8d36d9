"""The EventStore contract (tests/store/conformance/groups.py) on every backend in BACKENDS."""

from tests.store.conformance.groups import *  # noqa: F403
