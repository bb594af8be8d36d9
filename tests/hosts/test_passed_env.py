"""The environment a host is given is remembered, and never served once it is stale."""

from __future__ import annotations

import pytest

from turnkeeper.hosts import launch


def test_a_variable_set_changed_or_unset_since_is_seen_at_the_next_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TK_PASSED_ENV_TEST_A", "1")
    first = launch.passed_env(None, False, ("TK_PASSED_ENV_TEST_*",))
    assert first["TK_PASSED_ENV_TEST_A"] == "1"
    assert launch.passed_env(None, False, ("TK_PASSED_ENV_TEST_*",)) == first
    monkeypatch.setenv("TK_PASSED_ENV_TEST_A", "2")
    assert launch.passed_env(None, False, ("TK_PASSED_ENV_TEST_*",))["TK_PASSED_ENV_TEST_A"] == "2"
    monkeypatch.setenv("TK_PASSED_ENV_TEST_B", "3")
    assert launch.passed_env(None, False, ("TK_PASSED_ENV_TEST_*",))["TK_PASSED_ENV_TEST_B"] == "3"
    monkeypatch.delenv("TK_PASSED_ENV_TEST_A")
    assert "TK_PASSED_ENV_TEST_A" not in launch.passed_env(None, False, ("TK_PASSED_ENV_TEST_*",))
    # Another config is another entry: what it passes is its own.
    assert "TK_PASSED_ENV_TEST_B" not in launch.passed_env(None, False, ())


def test_an_inherited_environment_is_compared_whole() -> None:
    inherited = {"PATH": "/bin", "TK_X": "1"}
    assert launch.passed_env(inherited, False, ("TK_X",)) == {"PATH": "/bin", "TK_X": "1"}
    inherited["TK_X"] = "2"
    assert launch.passed_env(inherited, False, ("TK_X",))["TK_X"] == "2"
    assert launch.passed_env({"PATH": "/usr/bin"}, False, ("TK_X",)) == {"PATH": "/usr/bin"}
