"""A tool call is bound to its turn: stale and foreign capabilities change nothing.

A project made by ``turnkeeper init`` with two sessions of an own agent (a real
process) that keeps the tool capability it was handed each turn. Session B runs one
turn to its end; session A runs a first turn to its end and a second that waits,
live, while the test calls ``turnkeeper mcp`` (a real server process, through the MCP
SDK's client) with capabilities that are not that live turn's: an earlier turn's, the
other session's, and a call after a turn ended. Each is refused with
PERMISSION_DENIED and leaves every row of the database and the live turn's tool
journal exactly as they were. The live turn's own capability, last, is accepted:
its call is journaled and, when the turn ends, applied.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from mcp.client.session import ClientSession
from mcp_types import TextContent

from tests.tools.support import serve_tools
from tests.usage.project import UserProject
from turnkeeper.hosts.base import TOOLS_DIR_ENV, TOOLS_TOKEN_ENV

AGENT = """#!/usr/bin/env python3
import json, os, pathlib, sys, time
request = json.load(sys.stdin)["request"]
keep = pathlib.Path(os.environ["KEEP"])
(keep / (request["turn_id"] + ".json")).write_text(json.dumps(request["tools"]["env"]))
release = keep / (request["turn_id"] + ".go")
deadline = time.monotonic() + 60
while os.environ.get("WAIT") == "1" and not release.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
print(json.dumps({"kind": "result", "data": {"todo_done": True}}))
"""


def _wait(predicate: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while (value := predicate()) is None or value is False:
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def _kept(keep: Path) -> dict[str, dict[str, str]]:
    return {p.stem: json.loads(p.read_text()) for p in keep.glob("*.json")}


def _host_started(project: UserProject, turn_id: str) -> bool:
    conn = sqlite3.connect(project.database)
    try:
        rows = conn.execute(
            "SELECT payload FROM events WHERE type = 'turn.host_started'"
        ).fetchall()
    finally:
        conn.close()
    return any(json.loads(payload).get("turn_id") == turn_id for (payload,) in rows)


def _calls(
    env: dict[str, str], workspace: Path, calls: list[tuple[str, dict[str, Any]]]
) -> list[str]:
    """Tool calls through one ``turnkeeper mcp`` started with ``env``: each one's text,
    with "ERROR " before it when the server answered with an error result."""
    out: list[str] = []

    async def session(client: ClientSession) -> None:
        for tool, arguments in calls:
            result = await client.call_tool(tool, arguments)
            (content,) = result.content
            assert isinstance(content, TextContent)
            out.append(("ERROR " if result.is_error else "") + content.text)

    serve_tools(env, workspace, session)
    return out


def test_stale_and_foreign_capabilities_are_refused_and_write_nothing(
    user_project: UserProject,
) -> None:
    project = user_project
    keep = project.root.parent / "kept"
    keep.mkdir()
    agent = project.agent("agent.py", AGENT)
    project.tk("goal", "add", "Two steps", "--id", "g")
    project.tk("todo", "add", "g", "first", "--id", "t1")
    project.tk("todo", "add", "g", "second", "--id", "t2", "--depends-on", "t1")
    project.tk("goal", "add", "Elsewhere", "--id", "h")
    project.tk("todo", "add", "h", "other work", "--id", "u1")

    def session(goal: str, wait: str) -> str:
        config = project.host_config(
            f"agent-{goal}",
            {
                "command": [str(agent)],
                "event_format": "jsonl",
                "stdin": "request",
                "env": {"KEEP": str(keep), "WAIT": wait},
            },
        )
        created = project.tk_json(
            "session", "create", goal, "--host", "subprocess", "--host-config", config,
            "--workspace", ".",
        )  # fmt: skip
        return str(created["session_id"])

    sid_b = session("h", "0")
    project.tk("run", "--session", sid_b, "--json", timeout=120)
    ((b_turn, b_env),) = _kept(keep).items()

    sid_a = session("g", "1")
    run = project.start("run", "--session", sid_a, "--lease", "600", "--json")
    first = _wait(lambda: next((t for t in _kept(keep) if t != b_turn), None), "turn 1")
    a1 = _kept(keep)[first]
    (keep / f"{first}.go").write_text("")
    live = _wait(lambda: next((t for t in _kept(keep) if t not in (b_turn, first)), None), "turn 2")
    a2 = _kept(keep)[live]
    journal = Path(a2[TOOLS_DIR_ENV]) / "calls.jsonl"
    # Quiet from here: turn 2's start is journaled, and its agent waits printing nothing.
    _wait(lambda: _host_started(project, live), "turn 2's start in the journal")

    before = project.durable_digest()
    for why, env in (
        ("an earlier turn's, after it ended", a1),
        ("an earlier turn's token on the live turn", {**a2, TOOLS_TOKEN_ENV: a1[TOOLS_TOKEN_ENV]}),
        (
            "another session's token on the live turn",
            {**a2, TOOLS_TOKEN_ENV: b_env[TOOLS_TOKEN_ENV]},
        ),
        ("another session's, after its turn ended", b_env),
    ):
        attempts = [
            ("add_todo", {"title": "smuggled", "todo_id": "smuggled"}),
            ("record_evidence", {"command": "touch ran-anyway", "key": "k"}),
            ("todo_done", {}),
        ]
        for answer in _calls(env, project.root, attempts):
            assert answer.startswith("ERROR ") and "PERMISSION_DENIED" in answer, (why, answer)
        assert project.durable_digest() == before, why
        assert not journal.exists() or journal.read_text() == "", why
    assert not (project.root / "ran-anyway").exists()

    # The live turn's own capability works: journaled now, applied when the turn ends.
    (answer,) = _calls(a2, project.root, [("record_evidence", {"command": "true", "key": "k"})])
    assert not answer.startswith("ERROR ") and "exit 0" in answer, answer
    assert len(journal.read_text().splitlines()) == 1
    (keep / f"{live}.go").write_text("")
    assert run.wait(timeout=120) == 0, run.output()
    evidence = project.tk_json("goal", "show", "g")["state"]["evidence"]
    assert f"ev-{live}-0" in evidence and evidence[f"ev-{live}-0"]["key"] == "k", evidence
    assert "smuggled" not in project.tk_json("goal", "show", "g")["state"]["todos"]
    assert "smuggled" not in project.tk_json("goal", "show", "h")["state"]["todos"]
