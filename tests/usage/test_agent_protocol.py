"""The agent protocol as a user meets it: agents written from docs/agents.md alone.

The two complete agents of docs/agents.md (a shell script and a Python program),
their host configs and their setup commands are taken from the document's code
blocks, saved in a project made by ``turnkeeper init`` in a real git repository, and
run exactly as written: one ``turnkeeper run`` completes the three-todo goal with
evidence re-run by turnkeeper, meets the criterion with evidence named by id in the
same result, and closes the goal. What the document says is what is tested.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sqlite3
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.usage.project import UserProject

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"
RUN_TIMEOUT = 120.0
# A fenced block whose info string names a file: ```sh agent.sh
_NAMED_BLOCK = re.compile(r"^```[\w-]+ ([\w.-]+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def doc_blocks() -> dict[str, str]:
    blocks = {name: body for name, body in _NAMED_BLOCK.findall(DOC.read_text())}
    assert blocks, f"no named code blocks in {DOC}"
    return blocks


def journal(project: UserProject, session_id: str, event_type: str) -> list[dict[str, Any]]:
    """The payloads of a session's events of one type, in order, from the database."""
    conn = sqlite3.connect(project.database)
    try:
        rows = conn.execute(
            "SELECT payload FROM events WHERE stream_id = ? AND type = ? ORDER BY seq",
            (f"session:{session_id}", event_type),
        ).fetchall()
    finally:
        conn.close()
    return [json.loads(payload) for (payload,) in rows]


def run_setup(project: UserProject, block: str) -> dict[str, str]:
    """Each ``turnkeeper ...`` line of a setup block, run as written; the output of each."""
    outputs: dict[str, str] = {}
    for line in block.strip().splitlines():
        argv = shlex.split(line)
        assert argv[0] == "turnkeeper", line
        timeout = RUN_TIMEOUT if argv[1] == "run" else 60.0
        outputs[argv[1]] = project.tk(*argv[1:], timeout=timeout).stdout
    return outputs


@pytest.mark.parametrize(
    ("agent", "config", "setup"),
    [("agent.sh", "agent-sh.json", "setup-sh"), ("agent.py", "agent-py.json", "setup-py")],
)
def test_the_documented_agent_completes_a_goal_in_one_run(
    user_project: UserProject, agent: str, config: str, setup: str
) -> None:
    blocks = doc_blocks()
    root = user_project.root
    path = root / agent
    path.write_text(blocks[agent])
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    (root / config).write_text(blocks[config])

    outputs = run_setup(user_project, blocks[setup])

    goal = user_project.tk_json("goal", "show", "notes")["state"]
    assert goal["goal"]["status"] == "closed", goal["goal"]
    assert "not terminal" not in outputs["audit"], outputs["audit"]
    audit = user_project.tk_json("audit", "notes")["audit"]
    assert audit["terminal"] is True, audit
    todos = goal["todos"]
    assert {t: todos[t]["status"] for t in ("intro", "changes", "thanks")} == {
        "intro": "done",
        "changes": "done",
        "thanks": "done",
    }
    for todo in ("intro", "changes", "thanks"):
        assert (root / "notes" / f"{todo}.md").read_text().startswith("# ")
    # Every piece of evidence was run again by turnkeeper and passed; the criterion is
    # met by the acceptance check of the turn that wrote the last section, named in
    # its own result as ev-<turn id>-1.
    evidence = goal["evidence"]
    assert evidence and all(e["exit_code"] == 0 for e in evidence.values()), evidence
    (criterion,) = goal["goal"]["criteria"]
    assert criterion["met"] is True, criterion
    (met_by,) = criterion["evidence_ids"]
    assert re.fullmatch(r"ev-turn-[0-9a-f]+-1", met_by), met_by
    assert evidence[met_by]["key"] == "acceptance"

    (session,) = user_project.tk_json("session", "list")
    sid = session["session_id"]
    counters = user_project.tk_json("session", "show", sid)["counters"]
    assert (counters["turns_completed"], counters["turns_failed"]) == (3, 0), counters
    # The agent's messages for the operator are journaled with the turn.
    texts = [
        e["data"]["text"]
        for batch in journal(user_project, sid, "turn.host_events")
        for e in batch["events"]
        if e["kind"] == "message"
    ]
    assert "wrote notes/intro.md" in texts and "every section is written" in texts, texts


def _agent_printing(project: UserProject, name: str, result: dict[str, Any]) -> str:
    line = json.dumps({"kind": "result", "data": result})
    return str(project.agent(name, f"#!/bin/sh\ncat <<'EOF'\n{line}\nEOF\n"))


def test_a_malformed_result_fails_the_turn_naming_the_field(user_project: UserProject) -> None:
    project = user_project
    project.tk("goal", "add", "Write the notes", "--id", "notes")
    project.tk("todo", "add", "notes", "Write them", "--id", "t1")
    bad = {
        "todo_done": "yes",
        "evidence": [{"key": "k", "command": "true"}],
        "proposals": [{"kind": "satisfy", "criterion_id": "c1"}],
    }
    agent = _agent_printing(project, "bad-agent", bad)
    config = project.host_config("bad", {"command": [agent], "event_format": "jsonl"})
    sid = project.tk_json(
        "session", "create", "notes", "--host", "subprocess", "--host-config", config,
        "--workspace", ".",
    )["session_id"]  # fmt: skip

    project.tk("run", "--max-turns", "1", "--json", timeout=RUN_TIMEOUT)

    (receipt,) = [r["receipt"] for r in journal(project, sid, "turn.receipt_recorded")]
    assert receipt["outcome"] == "failure" and receipt["error_kind"] == "protocol", receipt
    assert receipt["message"].startswith("malformed turn result: proposals.0.kind:"), receipt
    # Nothing of the refused result was written: no evidence ran, the todo is not done.
    goal = project.tk_json("goal", "show", "notes")["state"]
    assert goal["evidence"] == {}
    assert goal["todos"]["t1"]["status"] != "done"
    assert journal(project, sid, "turn.written_back") == []


def test_plain_commands_complete_their_todos_by_their_completion_rule(
    user_project: UserProject,
) -> None:
    project = user_project
    commands: dict[str, dict[str, Any]] = {
        "default": {"command": ["true"]},  # on_success: exit 0 completes the todo
        "marker": {
            "command": ["sh", "-c", "echo formatting; echo ALL DONE"],
            "complete_todo": "on_marker",
            "done_marker": "ALL DONE",
        },
        "never": {"command": ["true"], "complete_todo": "never"},
    }
    sessions = {}
    for goal, config in commands.items():
        project.tk("goal", "add", f"Goal {goal}", "--id", goal)
        project.tk("todo", "add", goal, "Run the formatter", "--id", f"t-{goal}")
        created = project.tk_json(
            "session", "create", goal, "--host", "subprocess",
            "--host-config", project.host_config(goal, config), "--workspace", ".",
        )  # fmt: skip
        sessions[goal] = created["session_id"]

    # "never" ends suspended: run exits 12 (README, "Errors and exit codes").
    done = project.tk("run", "--json", timeout=RUN_TIMEOUT, expect=12)
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["outcomes"] == {
        sessions["default"]: "finished",
        sessions["marker"]: "finished",
        sessions["never"]: "suspended",
    }, summary

    status = {g: project.tk_json("goal", "show", g)["state"] for g in commands}
    assert status["default"]["todos"]["t-default"]["status"] == "done"
    assert status["marker"]["todos"]["t-marker"]["status"] == "done"
    assert status["default"]["goal"]["status"] == status["marker"]["goal"]["status"] == "closed"
    # "never": exit 0 completes nothing, and the progress guard ends the session.
    assert status["never"]["todos"]["t-never"]["status"] == "open"
    assert summary["stops"][sessions["never"]] == "no_progress", summary


def test_the_documented_tools_agent_works_its_goal_through_mcp(
    user_project: UserProject,
) -> None:
    """The own agent of docs/agents.md that reads its brief and reports only through the
    turnkeeper tools, run as written with the Python turnkeeper is installed in first on
    PATH (an active virtual environment, as the README sets one up)."""
    blocks = doc_blocks()
    root = user_project.root
    (root / "mcp_agent.py").write_text(blocks["mcp_agent.py"])
    (root / "mcp-agent.json").write_text(blocks["mcp-agent.json"])
    venv_bin = str(Path(sys.executable).parent)
    path = f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"

    for line in blocks["setup-mcp"].strip().splitlines():
        argv = shlex.split(line)
        assert argv[0] == "turnkeeper", line
        user_project.tk(*argv[1:], timeout=RUN_TIMEOUT, env=user_project.env(PATH=path))

    goal = user_project.tk_json("goal", "show", "notes")["state"]
    assert goal["goal"]["status"] == "closed", goal["goal"]
    assert {t: goal["todos"][t]["status"] for t in ("intro", "thanks")} == {
        "intro": "done",
        "thanks": "done",
    }
    (criterion,) = goal["goal"]["criteria"]
    assert criterion["met"] is True, criterion
    # The tools' records: each evidence run again by the write-back under its turn's id.
    keys = sorted(e["key"] for e in goal["evidence"].values())
    assert keys == ["acceptance", "section", "section"], goal["evidence"]
    (session,) = user_project.tk_json("session", "list")
    texts = [
        e["data"]["text"]
        for batch in journal(user_project, session["session_id"], "turn.host_events")
        for e in batch["events"]
        if e["kind"] == "message"
    ]
    assert any(t.startswith("todo_done: journaled; the kernel would accept it now") for t in texts)
