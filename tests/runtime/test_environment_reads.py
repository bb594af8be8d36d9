"""Reading the environment through ``os.environ``'s own table
(runtime/workspaces/environment.py) answers as ``os.environ`` does, after every kind
of change made through it, and falls back to it where it has no table."""

from __future__ import annotations

import os

import pytest

from turnkeeper.runtime.workspaces.environment import environ_has_any, environ_value
from turnkeeper.runtime.workspaces.workspace import DISCOVERY_ENV, discovery_overridden

NAME = "TURNKEEPER_TEST_ENVIRONMENT_READS"


def test_values_and_presence_follow_every_change(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NAME, raising=False)
    assert environ_value(NAME) is None
    assert not environ_has_any((NAME, "TURNKEEPER_TEST_NEVER_SET"))
    monkeypatch.setenv(NAME, "caf\u00e9 \udcff")  # not ASCII, and not valid UTF-8 either
    assert environ_value(NAME) == os.environ[NAME]
    assert environ_has_any(("TURNKEEPER_TEST_NEVER_SET", NAME))
    monkeypatch.setenv(NAME, "")
    assert environ_value(NAME) == ""
    assert environ_has_any((NAME,))
    monkeypatch.delenv(NAME)
    assert environ_value(NAME) is None
    assert not environ_has_any((NAME,))
    assert environ_value("PATH") == os.environ.get("PATH")


def test_git_discovery_variables_are_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in DISCOVERY_ENV:
        monkeypatch.delenv(name, raising=False)
    assert not discovery_overridden()
    for name in DISCOVERY_ENV:
        with monkeypatch.context() as patch:
            patch.setenv(name, "/elsewhere")
            assert discovery_overridden()
    assert not discovery_overridden()


def test_a_plain_mapping_in_place_of_the_environment_is_asked_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "environ", {NAME: "plain", "GIT_DIR": "/elsewhere"})
    assert environ_value(NAME) == "plain"
    assert environ_value("TURNKEEPER_TEST_NEVER_SET") is None
    assert environ_has_any(("GIT_DIR",))
    assert not environ_has_any(("GIT_WORK_TREE",))
