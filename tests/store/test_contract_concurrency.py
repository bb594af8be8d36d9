"""The EventStore contract (tests/store/conformance/concurrency.py) on every backend in BACKENDS."""

from tests.store.conformance.concurrency import *  # noqa: F403
