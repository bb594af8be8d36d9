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


def test_the_command_freezes_the_heap_before_it_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    from turnkeeper.cli import main as entry

    gc.unfreeze()
    monkeypatch.setattr("sys.argv", ["turnkeeper", "--version"])
    try:
        with pytest.raises(SystemExit) as exited:
            entry.main()
        assert exited.value.code in (0, None)
        assert gc.get_freeze_count() > 0  # the exit's collection will not walk them
    finally:
        gc.unfreeze()


def test_the_installed_command_is_the_freezing_entry_point() -> None:
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "turnkeeper"]
    assert script.value == "turnkeeper.cli.main:main"
