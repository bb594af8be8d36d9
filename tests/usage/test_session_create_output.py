"""``session create`` answers a script the way every other write does: ``-q`` prints the
new session's id alone (``SESSION=$(turnkeeper session create ... -q)``), ``--json``
puts ``id`` at the top level of the created session, and the two together are refused.

A project made by ``turnkeeper init`` in a git repository of a user's, the installed
``turnkeeper`` command and a shell agent a user would write.
"""

from __future__ import annotations

from pathlib import Path

from tests.usage.project import UserProject

AGENT = '{"command": ["sh", "-c", "echo {}"], "event_format": "jsonl"}'


def _project(tmp_path: Path) -> UserProject:
    project = UserProject(tmp_path / "repo")
    project.tk("goal", "add", "Write the docs", "--id", "docs")
    project.tk("todo", "add", "docs", "Write the intro", "--id", "intro")
    return project


def test_quiet_prints_only_the_new_sessions_id(tmp_path: Path) -> None:
    project = _project(tmp_path)
    done = project.tk(
        "session", "create", "docs", "--host", "subprocess", "--host-config", AGENT,
        "--workspace", ".", "-q",
    )  # fmt: skip
    session_id = done.stdout.strip()
    assert done.stdout == session_id + "\n"
    shown = project.tk_json("session", "show", session_id)
    assert shown["session_id"] == session_id and shown["goal_id"] == "docs"


def test_json_has_the_id_at_the_top_level_beside_the_session(tmp_path: Path) -> None:
    project = _project(tmp_path)
    created = project.tk_json(
        "session", "create", "docs", "--host", "subprocess", "--host-config", AGENT,
        "--workspace", ".", "--request-id", "create-docs-1",
    )  # fmt: skip
    assert created["id"] == created["session_id"]
    assert created["request_id"] == "create-docs-1"
    listed = project.tk_json("session", "list")
    assert [s["session_id"] for s in listed] == [created["id"]]


def test_json_and_quiet_together_are_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path)
    refused = project.tk(
        "session", "create", "docs", "--host-config", AGENT, "--json", "-q", expect=3,
    )  # fmt: skip
    assert refused.json()["error"]["reason"] == "conflicting_options"
    assert "Traceback" not in refused.stderr
    assert project.tk_json("session", "list") == []
