"""``session create --workspace`` with a path the system cannot use: a typed refusal.

A name longer than the file system allows, a loop of links, a component that is a
file: each is INVALID_ARGUMENT (exit 3) naming the path, clipped, with no traceback,
and no session is created. Before the fix the long name was an ``OSError``
traceback (exit 1).
"""

from __future__ import annotations

import pytest

from tests.usage.project import UserProject


@pytest.mark.parametrize(
    ("workspace", "reason"),
    [
        ("a" * 300, "bad_workspace_path"),
        ("loop/inside", "bad_workspace_path"),
        ("README.md/inside", "no_workspace"),
    ],
    ids=["300-char-name", "symlink-loop", "file-component"],
)
def test_session_create_refuses_an_unusable_workspace_path(
    user_project: UserProject, workspace: str, reason: str
) -> None:
    (user_project.root / "loop").symlink_to("loop")
    user_project.tk("goal", "add", "a goal", "--id", "g")
    refused = user_project.tk("session", "create", "g", "--workspace", workspace, expect=3)
    assert "Traceback" not in refused.stderr, refused.stderr
    assert f"INVALID_ARGUMENT ({reason})" in refused.stderr, refused.stderr
    first = refused.stderr.splitlines()[0]
    assert len(first) < 400, first  # the path clipped, not all 300 characters and more
    assert user_project.tk_json("session", "list") == []
