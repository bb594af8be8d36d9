"""Installed, ready, authorised and enabled are separate states, as a user meets them.

A project made by ``turnkeeper init`` in a git repository, the real CLI, an agent a
user would write that asks for one ``http`` effect per turn against a counting
service the test starts. The ``http`` provider is installed and, after ``doctor``,
ready; then:

* a session whose config does not name the provider: its effect is refused
  ``provider_not_authorised`` (PERMISSION_DENIED) and the service sees nothing;
* a session that names it: the effect is applied once;
* the project disables ``http``: the next effect is refused ``provider_disabled``,
  the service sees nothing, and ``status`` shows http installed, ready, authorised
  and disabled at once — in ``status --json``, over the API and in the web view;
* the project disables the session's host kind: ``session create`` on it is refused,
  and a session on it is suspended before its next turn; enabled and resumed, it runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.usage.project import UserProject
from turnkeeper_chaos.service import CountingService

AGENT = """#!/bin/sh
# One turn: write the todo's page, and ask for one ticket to be filed about it.
set -eu
echo "# $TURNKEEPER_TODO_ID" > "$TURNKEEPER_TODO_ID.md"
body="{\\"todo\\": \\"$TURNKEEPER_TODO_ID\\"}"
printf '{"kind": "result", "data": {"todo_done": true, "evidence": [%s], "effects": [%s]}}\\n' \\
  "{\\"key\\": \\"page\\", \\"command\\": \\"test -s $TURNKEEPER_TODO_ID.md\\"}" \\
  "{\\"provider\\": \\"tickets\\", \\"request\\": {\\"body\\": $body}}"
"""

PAGE_AGENT = """#!/bin/sh
set -eu
echo "# $TURNKEEPER_TODO_ID" > "$TURNKEEPER_TODO_ID.md"
printf '{"kind": "result", "data": {"todo_done": true, "evidence": [%s]}}\\n' \\
  "{\\"key\\": \\"page\\", \\"command\\": \\"test -s $TURNKEEPER_TODO_ID.md\\"}"
"""


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with CountingService() as running:
        yield running


def _session(project: UserProject, goal: str, name: str, config: dict[str, Any]) -> str:
    arg = project.host_config(name, config)
    created = project.tk_json(
        "session", "create", goal, "--host", "subprocess", "--host-config", arg
    )
    return str(created["session_id"])


def _effects_of(project: UserProject, session: str) -> list[dict[str, Any]]:
    """Every effect record of the session's turns, as ``turn show --json`` gives them."""
    found: list[dict[str, Any]] = []
    for turn in project.tk_json("turn", "list", session)["turns"]:
        found += project.tk_json("turn", "show", turn["turn_id"])["effects"]
    return found


def _extension(status: dict[str, Any], group: str, name: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = status["extensions"]
    (row,) = [e for e in rows if (e["group"], e["name"]) == (group, name)]
    return row


def test_an_effect_runs_only_when_installed_ready_authorised_and_enabled(
    user_project: UserProject, service: CountingService
) -> None:
    agent = user_project.agent("agent.sh", AGENT)
    goal = user_project.tk("goal", "add", "Pages", "-c", "pages exist", "-q").stdout.strip()
    for n in range(1, 4):
        user_project.tk("todo", "add", goal, f"Page {n}", "--requires-evidence", "page")
    base = {"command": [str(agent)], "event_format": "jsonl"}

    before = user_project.tk_json("status")
    http = _extension(before, "effect", "http")
    assert (http["installed"], http["enabled"], http["ready"]) == (True, True, None)
    user_project.tk("doctor", "http")  # ready: recorded for status
    assert _extension(user_project.tk_json("status"), "effect", "http")["ready"] == "ok"

    # Installed and ready, but this session's config names no provider: refused.
    unauthorised = _session(user_project, goal, "bare", base)
    assert _extension(user_project.tk_json("status"), "effect", "http")["authorised_by"] == []
    user_project.tk("run", "--max-turns", "1")
    (refused,) = [e for e in _effects_of(user_project, unauthorised) if e.get("reason")]
    assert refused["reason"] == "provider_not_authorised"
    assert "PERMISSION_DENIED" in refused["detail"]
    assert service.counts("tickets") == {}
    user_project.tk("session", "stop", unauthorised)

    # Authorised: applied once.
    tickets = {"kind": "http", **service.provider_config("tickets")}
    authorised = _session(
        user_project, goal, "tickets", {**base, "effects": {"providers": {"tickets": tickets}}}
    )
    user_project.tk("run", "--max-turns", "1")
    assert list(service.counts("tickets").values()) == [1]

    # Disabled by the project: refused with nothing sent, the three states shown apart.
    user_project.tk("extensions", "disable", "http", "--reason", "ticket API frozen")
    user_project.tk("run", "--max-turns", "1")
    effects = _effects_of(user_project, authorised)
    assert [e.get("reason") for e in effects if e.get("reason")] == ["provider_disabled"]
    assert list(service.counts("tickets").values()) == [1]  # nothing new reached it
    shown = _extension(user_project.tk_json("status"), "effect", "http")
    assert shown["installed"] and shown["ready"] == "ok"
    assert shown["authorised_by"] == [authorised]
    assert (shown["enabled"], shown["disabled_reason"]) == (False, "ticket API frozen")
    text = user_project.tk("status", env={"COLUMNS": "200"}).stdout
    assert "Extensions" in text and "ticket API frozen" in text
    listed = user_project.tk_json("extensions")["extensions"]
    assert [e["enabled"] for e in listed if e["name"] == "http"] == [False]

    # Enabled again: the next todo's effect is applied, once.
    user_project.tk("extensions", "enable", "http")
    user_project.tk("run", "--max-turns", "1")
    assert sorted(service.counts("tickets").values()) == [1, 1]


def test_a_disabled_host_kind_creates_no_session_and_runs_no_turn(
    user_project: UserProject,
) -> None:
    agent = user_project.agent("agent.sh", PAGE_AGENT)
    goal = user_project.tk("goal", "add", "Pages", "-c", "pages exist", "-q").stdout.strip()
    user_project.tk("todo", "add", goal, "Page 1", "--requires-evidence", "page")
    config = {"command": [str(agent)], "event_format": "jsonl"}
    session = _session(user_project, goal, "agent", config)

    user_project.tk("extensions", "disable", "subprocess", "--reason", "no shell agents today")
    refused = user_project.tk(
        "session", "create", goal, "--host", "subprocess",
        "--host-config", user_project.host_config("again", config), "--json", expect=6,
    )  # fmt: skip
    error = json.loads(refused.stdout)["error"]
    assert (error["code"], error["reason"]) == ("FAILED_PRECONDITION", "extension_disabled")

    # Suspended by the disabled extension: run exits 12 (README, "Errors and exit codes").
    ran = user_project.tk("run", "--json", expect=12)
    assert "extension_disabled" in ran.stdout
    assert json.loads(ran.stdout.splitlines()[-1])["outcomes"] == {session: "suspended"}
    state = user_project.tk_json("session", "show", session)
    assert state["status"] == "suspended"
    assert state["status_reason"].startswith("extension_disabled: host kind subprocess")
    assert state["counters"]["turns_accepted"] == 0  # no turn was started

    user_project.tk("extensions", "enable", "subprocess")
    user_project.tk("session", "resume", session)
    user_project.tk("run", "--max-turns", "1")
    assert user_project.tk_json("session", "show", session)["counters"]["turns_completed"] == 1
    assert user_project.tk_json("audit", goal)["audit"]["open_todos"] == 0
