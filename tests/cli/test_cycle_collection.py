"""Listing commands pause the cyclic collector while they run, and give it back as it was."""

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
    assert _seen() is False
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        _fails()
    assert gc.isenabled()  # also after a failure


def test_a_collector_someone_paused_stays_paused() -> None:
    gc.disable()
    try:
        assert _seen() is False
        assert not gc.isenabled()
    finally:
        gc.enable()
