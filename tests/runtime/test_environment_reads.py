"""git's discovery variables, read from ``os.environ`` at each call, switch the stat
shortcuts of runtime/workspaces/workspace.py off as soon as one is set, and back on
once none is."""

from __future__ import annotations

import pytest

from turnkeeper.runtime.workspaces.workspace import DISCOVERY_ENV, discovery_overridden


def test_git_discovery_variables_are_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in DISCOVERY_ENV:
        monkeypatch.delenv(name, raising=False)
    assert not discovery_overridden()
    for name in DISCOVERY_ENV:
        with monkeypatch.context() as patch:
            patch.setenv(name, "/elsewhere")
            assert discovery_overridden()
    assert not discovery_overridden()
