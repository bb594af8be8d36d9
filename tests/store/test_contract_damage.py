"""The EventStore contract (tests/store/conformance/damage.py) on every backend in BACKENDS."""

from tests.store.conformance.damage import *  # noqa: F403
