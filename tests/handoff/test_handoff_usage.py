"""A goal handed from one project to another exactly as a user does it: ``turnkeeper
handoff GOAL -o packet.json`` in a project whose session holds a host session handle,
a transcript, a local path and a credential, then ``turnkeeper adopt packet.json`` in
a fresh project made by ``turnkeeper init``.

What must hold: none of the private values reaches the packet (while the original
project really holds each of them); the adopted goal has the same ids, the same open
todos with their lineage, gates and monitors; its audit names the same blockers,
except what stood on handed-over evidence, which is not fresh there.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.usage.project import GIT_IDENTITY, UserProject

HANDLE = "hs-4c1e9a-alice-private-session"
LOCAL_PATH = "/home/alice/secret.txt"
KEY = "sk-proj-Zx81Qw2Er3Ty4Ui5Op6As7Df8"
AGENT = (
    """#!/bin/sh
# One turn: bind a host session, talk about private things, write the page, meet c1.
set -eu
printf '{"kind": "session.bound", "data": {"handle": "HANDLE"}}\\n'
printf '{"kind": "message", "data": {"text": "read PATH with KEY"}}\\n'
echo "# page" > page.md
met="\\"criterion_id\\": \\"c1\\", \\"evidence_ids\\": [\\"ev-$TURNKEEPER_TURN_ID-0\\"]"
met="{\\"kind\\": \\"satisfy_criterion\\", $met}"
printf '{"kind": "result", "data": {"todo_done": true, "evidence": [%s], "proposals": [%s]}}\\n' \\
  '{"key": "page", "command": "test -s page.md"}' "$met"
""".replace("HANDLE", HANDLE)
    .replace("PATH", LOCAL_PATH)
    .replace("KEY", KEY)
)


def _workspace(root: Path) -> Path:
    root.mkdir(parents=True)
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "start"]):
        subprocess.run(["git", *args], cwd=root, env=GIT_IDENTITY, check=True, timeout=60)
    return root


def _blockers(project: UserProject, goal: str) -> set[tuple[str, str]]:
    audit = project.tk_json("audit", goal)["audit"]
    return {(b["kind"], b["subject"]) for b in audit["blockers"]}


def _todos(project: UserProject, goal: str) -> dict[str, dict[str, Any]]:
    return {t["id"]: t for t in project.tk_json("todo", "list", goal)["todos"]}


def _lineage(todo: dict[str, Any]) -> tuple[Any, ...]:
    keys = ("title", "depends_on", "required_evidence", "successor_of", "successor_required")
    return tuple(todo[k] for k in keys)


@dataclass
class Original:
    """The original project's goal, worked one turn by a session that saw secrets."""

    goal: str
    write: str
    publish: str
    side: str
    gate: str
    monitor: str
    session: str
    workspace: Path


def _original(project: UserProject, tmp_path: Path) -> Original:
    tk = project.tk
    goal = tk("goal", "add", "Ship the page", "-c", "the page exists", "-c", "reviewed", "-q")
    goal_id = goal.stdout.strip()
    write = tk("todo", "add", goal_id, "Write", "--requires-evidence", "page", "-q").stdout.strip()
    review = tk("todo", "add", goal_id, "Review", "--depends-on", write, "-q").stdout.strip()
    publish = tk("todo", "add", goal_id, "Publish", "--depends-on", review, "-q").stdout.strip()
    side = tk("todo", "add", goal_id, "Tidy up", "-q").stdout.strip()
    gate = tk("gate", "open", goal_id, "Approve publishing", "--scope", publish, "-q").stdout
    monitor = tk("monitor", "add", goal_id, "CI status", "--cadence", "60", "-q").stdout
    workspace = _workspace(tmp_path / "workspace")
    agent = project.agent("agent.sh", AGENT)
    config = project.host_config(
        "agent",
        {
            "command": [str(agent)],
            "event_format": "jsonl",
            # The key itself only where run starts (a config holding it is refused).
            "env": {"NOTES": LOCAL_PATH},
            "pass_env": ["OPENAI_API_KEY"],
        },
    )
    created = project.tk_json(
        "session", "create", goal_id, "--host", "subprocess", "--host-config", config,
        "--workspace", str(workspace),
    )  # fmt: skip
    tk("run", "--max-turns", "1", expect=None, timeout=90, env={"OPENAI_API_KEY": KEY})
    assert _todos(project, goal_id)[write]["status"] == "done"
    tk("todo", "claim", side, "-q")  # a claim that is local to this project
    return Original(
        goal=goal_id,
        write=write,
        publish=publish,
        side=side,
        gate=gate.strip(),
        monitor=monitor.strip(),
        session=str(created["session_id"]),
        workspace=workspace,
    )


def _check_packet(text: str, made: Original) -> dict[str, Any]:
    packet: dict[str, Any] = json.loads(text)
    assert (packet["schema_version"], packet["kind"]) == (1, "turnkeeper.handoff")
    assert packet["goal"]["id"] == made.goal
    todos = {t["id"]: t for t in packet["todos"]}
    assert todos[made.write]["status"] == "done" and todos[made.write]["completed_with"]
    assert todos[made.side]["claim_dropped"] is True
    c1 = packet["criteria"][0]
    assert c1["met"] and c1["evidence_ids"] == todos[made.write]["completed_with"]
    [evidence] = packet["evidence"]
    assert evidence["id"] == c1["evidence_ids"][0]
    assert evidence["command"] == "test -s page.md" and evidence["revision"]
    assert len(evidence["output_digest"]) == 64 and "output" not in evidence
    assert packet["gates"][0]["scope"] == [made.publish]
    assert packet["monitors"][0]["id"] == made.monitor and packet["monitors"][0]["due"]
    omitted = " ".join(f"{o['what']} {o['how']}" for o in packet["omitted"])
    for word in ("host session handle", "transcript", "claim", "local paths"):
        assert word in omitted, omitted
    return packet


def test_a_handed_over_goal_carries_no_private_value_and_is_adopted_elsewhere(
    user_project: UserProject, tmp_path: Path
) -> None:
    made = _original(user_project, tmp_path)
    tk = user_project.tk
    # The original project really holds every private value the packet must not carry.
    shown = tk("session", "show", made.session, "--json").stdout
    logs = tk("logs", made.session).stdout
    assert HANDLE in shown and LOCAL_PATH in shown, shown
    assert LOCAL_PATH in logs and KEY in logs, logs  # the agent spoke of the key

    tk("handoff", made.goal, "-o", "packet.json")
    text = (user_project.root / "packet.json").read_text()
    private = {
        "host session handle": HANDLE,
        "local path": LOCAL_PATH,
        "credential": KEY,
        "project root": str(user_project.root.resolve()),
        "workspace": str(made.workspace.resolve()),
        "session id": made.session,
    }
    for what, value in private.items():
        assert value not in text, f"the packet carries the {what}"
    assert "alice" not in text
    packet = _check_packet(text, made)
    [evidence] = packet["evidence"]

    original_blockers = _blockers(user_project, made.goal)
    original_todos = _todos(user_project, made.goal)
    other = UserProject(tmp_path / "elsewhere")
    try:
        adopted = other.tk("adopt", str(user_project.root / "packet.json"))
        assert made.goal in adopted.stdout
        todos_there = _todos(other, made.goal)
        assert set(todos_there) == set(original_todos)
        for todo_id, todo in original_todos.items():
            assert _lineage(todos_there[todo_id]) == _lineage(todo)
            # Open work stays open; the claim stayed behind; done work is open to redo.
            assert todos_there[todo_id]["status"] == "open"
            assert todos_there[todo_id]["claim"] is None
        gates = json.dumps(other.tk_json("gate", "list", made.goal))
        assert made.gate in gates and made.publish in gates

        # Handed-over evidence is there under its id, and not fresh.
        listed = other.tk_json("evidence", "list", made.goal)["evidence"]
        assert [e["id"] for e in listed] == [evidence["id"]]
        assert listed[0]["fresh"] is False
        assert listed[0]["evidence"]["output_digest"] == evidence["output_digest"]

        # The same blockers, and what stood on the stale evidence open again.
        there = _blockers(other, made.goal)
        assert original_blockers <= there
        assert there - original_blockers == {("open_todo", made.write), ("acceptance_gap", "c1")}
        assert ("unresolved_blocking_gate", made.gate) in there
        assert ("due_monitor", made.monitor) in there

        again = other.tk("adopt", str(user_project.root / "packet.json"), expect=8)
        assert "ALREADY_EXISTS" in again.stderr and "goal_exists" in again.stderr
        assert "Traceback" not in again.stderr
    finally:
        other.close()


def test_a_packet_that_would_leak_is_refused_and_nothing_is_written(
    user_project: UserProject,
) -> None:
    tk = user_project.tk
    goal = tk("goal", "add", "Leaky", "-c", "done", "-q").stdout.strip()
    tk("todo", "add", goal, "Fine", "-q")
    tk("todo", "add", goal, "Copy /home/alice/notes.txt over", "-q")
    refused = tk("handoff", goal, "-o", "packet.json", expect=6)
    assert "FAILED_PRECONDITION" in refused.stderr and "handoff_not_clean" in refused.stderr
    assert "todos[1].title" in refused.stderr and "Traceback" not in refused.stderr
    assert "/home/alice" not in refused.stderr  # the refusal never repeats the value
    assert not (user_project.root / "packet.json").exists()

    other = tk("goal", "add", "Keyed", "-q").stdout.strip()
    tk("evidence", "record", other, "--key", "k", "-q", "--", "echo", KEY)
    refused = tk("handoff", other, "--json", expect=6)
    error = json.loads(refused.stdout)["error"]
    assert error["reason"] == "handoff_not_clean"
    expected = {"field": "evidence[0].command", "kind": "credential", "shape": "openai_key"}
    assert error["details"] == expected

    inside = tk("goal", "add", "Rooted", "-q").stdout.strip()
    tk("todo", "add", inside, f"Read {user_project.root}/README.md", "-q")
    refused = tk("handoff", inside, "--json", expect=6)
    assert json.loads(refused.stdout)["error"]["details"]["kind"] == "local_path"
