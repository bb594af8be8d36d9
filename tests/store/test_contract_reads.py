"""The EventStore contract (tests/store/conformance/reads.py) on every backend in BACKENDS."""

from tests.store.conformance.reads import *  # noqa: F403
