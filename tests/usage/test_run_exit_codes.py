"""``run``'s exit code says how the sessions it drove ended (README, "Errors and exit
codes"): 0 when every one finished or was stopped by request, else the worst of
crashed (11), suspended (12) and blocked (13) — so a script or CI can tell success from
failure without reading the output. Each case through the real command, as a user
runs it, with the ``--json`` summary saying the same."""

from __future__ import annotations

import json
from typing import Any

from tests.usage.project import UserProject

DONE = json.dumps({"kind": "result", "data": {"summary": "done", "todo_done": True}})
GATE = {"kind": "open_gate", "gate_id": "ship", "title": "May it ship?", "scope": ["asks-1"]}
ASKS = json.dumps({"kind": "result", "data": {"proposals": [GATE]}})


def _session(project: UserProject, goal: str, script: str) -> str:
    project.tk("goal", "add", f"goal {goal}", "--id", goal)
    project.tk("todo", "add", goal, "do it", "--id", f"{goal}-1")
    agent = project.agent(f"{goal}-agent", script)
    spec = {"command": [str(agent)], "event_format": "jsonl"}
    created = project.tk_json(
        "session", "create", goal, "--host", "subprocess",
        "--host-config", project.host_config(goal, spec), "--workspace", ".",
    )  # fmt: skip
    return str(created["session_id"])


def _run(project: UserProject, *args: str, expect: int) -> dict[str, Any]:
    done = project.tk("run", "--json", *args, expect=expect, timeout=120)
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["exit_code"] == expect, summary
    return summary


def test_a_goal_that_closes_exits_0(user_project: UserProject) -> None:
    sid = _session(user_project, "fine", f"#!/bin/sh\necho '{DONE}'\n")
    summary = _run(user_project, expect=0)
    assert summary["outcomes"] == {sid: "finished"}, summary


def test_an_agent_that_always_fails_exits_11_crashed(user_project: UserProject) -> None:
    sid = _session(user_project, "broken", "#!/bin/sh\necho 'no luck' >&2\nexit 3\n")
    summary = _run(user_project, "--backoff", "0.1", expect=11)
    assert summary["outcomes"] == {sid: "crashed"}, summary
    assert user_project.tk_json("session", "show", sid)["status"] == "crashed"


def test_a_hung_agent_suspended_by_its_bound_exits_12(user_project: UserProject) -> None:
    sid = _session(user_project, "hung", "#!/bin/sh\nsleep 600\n")
    args = ("--silence-timeout", "1", "--max-hangs", "1")
    summary = _run(user_project, *args, expect=12)
    assert summary["outcomes"] == {sid: "suspended"}, summary
    assert user_project.tk_json("session", "show", sid)["status"] == "suspended"


def test_a_session_waiting_on_a_person_exits_13_blocked(user_project: UserProject) -> None:
    sid = _session(user_project, "asks", f"#!/bin/sh\necho '{ASKS}'\n")
    summary = _run(user_project, expect=13)
    assert summary["outcomes"] == {sid: "blocked"}, summary
    assert summary["stops"] == {sid: "gate_blocked"}, summary
    # Text mode says the same, and the worst outcome wins across sessions.
    _session(user_project, "broken", "#!/bin/sh\nexit 3\n")
    text = user_project.tk("run", "--backoff", "0.1", expect=11, timeout=120)
    assert "crashed" in text.stdout and "blocked" in text.stdout, text.stdout
