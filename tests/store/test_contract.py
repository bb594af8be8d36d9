"""The EventStore contract (tests/store/conformance/appends.py) on every backend in BACKENDS."""

from tests.store.conformance.appends import *  # noqa: F403
