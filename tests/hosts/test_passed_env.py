"""The environment a host is given is read at each call: a variable set, changed or
unset since the last turn is what the next turn sees; a secret is never passed on."""

from __future__ import annotations

import os

import pytest

from turnkeeper.hosts import launch

PATTERN = ("TK_PASSED_ENV_TEST_*",)


def test_a_variable_set_changed_or_unset_since_is_seen_at_the_next_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TK_PASSED_ENV_TEST_A", "1")
    first = launch.passed_env(None, False, PATTERN)
    assert first["TK_PASSED_ENV_TEST_A"] == "1"
    assert launch.passed_env(None, False, PATTERN) == first
    monkeypatch.setenv("TK_PASSED_ENV_TEST_A", "2")
    assert launch.passed_env(None, False, PATTERN)["TK_PASSED_ENV_TEST_A"] == "2"
    monkeypatch.setenv("TK_PASSED_ENV_TEST_B", "3")
    assert launch.passed_env(None, False, PATTERN)["TK_PASSED_ENV_TEST_B"] == "3"
    monkeypatch.delenv("TK_PASSED_ENV_TEST_A")
    assert "TK_PASSED_ENV_TEST_A" not in launch.passed_env(None, False, PATTERN)
    # Another config passes what it names, not what an earlier one did.
    assert "TK_PASSED_ENV_TEST_B" not in launch.passed_env(None, False, ())


def test_an_inherited_environment_is_read_as_it_is_at_each_call() -> None:
    inherited = {"PATH": "/bin", "TK_X": "1", "TK_Y": "no"}
    assert launch.passed_env(inherited, False, ("TK_X",)) == {"PATH": "/bin", "TK_X": "1"}
    inherited["TK_X"] = "2"
    assert launch.passed_env(inherited, False, ("TK_X",))["TK_X"] == "2"
    assert launch.passed_env({"PATH": "/usr/bin"}, False, ("TK_X",)) == {"PATH": "/usr/bin"}


def test_inheriting_everything_still_keeps_the_control_planes_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PGPASSWORD", "secret")
    monkeypatch.setenv("TK_PASSED_ENV_TEST_C", "\u00e9\udcff")  # not valid UTF-8 either
    passed = launch.passed_env(None, True, ())
    assert "PGPASSWORD" not in passed
    assert passed["TK_PASSED_ENV_TEST_C"] == "\u00e9\udcff"
    secrets = launch.CONTROL_PLANE_SECRETS
    assert passed == {k: v for k, v in os.environ.items() if k not in secrets}
