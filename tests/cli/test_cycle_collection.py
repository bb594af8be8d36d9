"""Listing commands pause the cyclic collector while they run and resume it after,
with what they made frozen (the process exits next)."""

from __future__ import annotations

import gc

import pytest

from turnkeeper.cli.context import without_cycle_collection


@without_cycle_collection
def _seen() -> bool:
    return gc.isenabled()


@without_cycle_collection
def _fails() -> None:
    raise RuntimeError("the command failed")


def test_paused_while_the_command_runs_and_resumed_after() -> None:
    assert gc.isenabled()
    try:
        assert _seen() is False
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0  # what it made: not walked again on the way out
        with pytest.raises(RuntimeError):
            _fails()
        assert gc.isenabled()  # also after a failure
    finally:
        gc.unfreeze()  # this test process goes on


def test_a_collector_someone_paused_stays_paused() -> None:
    gc.disable()
    try:
        assert _seen() is False
        assert not gc.isenabled()
    finally:
        gc.enable()
