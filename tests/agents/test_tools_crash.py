"""The control plane SIGKILLed after an agent's tool calls and before the turn's receipt.

A real CLI (against the fake model) runs a command, then calls turnkeeper's tools —
``add_todo`` (a successor) and ``record_evidence`` — and its next model request hangs.
The calls are journaled with the turn; then ``turnkeeper run`` is SIGKILLed by its pid.
The restart records the turn lost. Nothing of its calls is applied: the continuation's
brief lists what the lost turn did (its command and its tool calls) and tells the agent
to reconcile; the agent makes the same calls again, and each takes effect once.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import CLI_NAMES, CliKit, MakeKit, kill_marked, wait_for
from tests.agents.fakes import Rule, Shell, Stall, Text, Tool
from tests.agents.project import GOAL, AgentProject
from turnkeeper.runtime.services.goals import goal_stream
from turnkeeper.store import open_store

pytestmark = pytest.mark.timeout(240)

CHECK_A = {"command": "grep -qx done a.txt", "key": "a-done"}
SUCCESSOR = {"title": "polish A", "todo_id": "t-a2", "successor_of": "t-a"}
RULES = [
    Rule(
        "Continue todo t-a",
        [
            Tool("add_todo", SUCCESSOR),
            Tool("record_evidence", CHECK_A),
            Tool("todo_done", {"summary": "A written"}),
            Text("A is written; reconciled what the lost turn did."),
        ],
    ),
    Rule(
        "t-a: write A (attempt 1)",
        [
            Shell("echo done > a.txt"),
            Tool("add_todo", SUCCESSOR),
            Tool("record_evidence", CHECK_A),
            Stall(),
        ],
    ),
    Rule("todo t-a2", [Text("Polished.")]),
    Rule("todo t-b", [Shell("echo done > b.txt"), Text("B is written.")]),
]


@pytest.fixture
def project_for(tmp_path: Path) -> Iterator[Any]:
    made: list[AgentProject] = []

    def make(kit: CliKit) -> AgentProject:
        project = AgentProject(tmp_path / "project", kit)
        made.append(project)
        return project

    yield make
    for project in made:
        for plane in project.planes:
            plane.stop()
        kill_marked("TURNKEEPER_SESSION_ID", project.session_id)


def _calls(project: AgentProject, turn_id: str) -> list[dict[str, Any]]:
    journal = project.root / ".turnkeeper" / "turns" / turn_id / "calls.jsonl"
    if not journal.exists():
        return []
    return [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("cli", CLI_NAMES)
def test_tool_calls_of_a_lost_turn_apply_once_and_the_brief_says_what_it_did(
    cli: str, make_kit: MakeKit, project_for: Any
) -> None:
    kit = make_kit(cli, RULES)
    project: AgentProject = project_for(kit)
    first = project.start_run()

    wait_for(kit.server.stalled.is_set, 90, "the model request after the tool calls")
    (lost,) = project.turns()
    turn_id = lost["envelope"]["turn_id"]
    made = wait_for(
        lambda: len(_calls(project, turn_id)) == 2 and _calls(project, turn_id), 10, "the calls"
    )
    assert [c["tool"] for c in made] == ["add_todo", "record_evidence"], made
    assert "turn.receipt_recorded" not in lost["events"]
    # The host's events are journaled within a second (cheap commits): wait for the
    # last call's, so the test does not race that second.
    wait_for(lambda: "record_evidence" in _journaled_tools(project), 10, "the journaled calls")

    first.proc.send_signal(signal.SIGKILL)  # the control plane, by its own pid
    assert first.wait() == -signal.SIGKILL
    second = project.start_run()
    assert second.wait() == 0, second.output()
    assert second.summary()["stops"] == {project.session_id: "goal_terminal"}, second.output()

    turns = project.turns()
    assert turns[0]["envelope"]["turn_id"] == turn_id and "turn.lost" in turns[0]["events"]
    resumed = turns[1]
    assert resumed["envelope"]["recovers_turn_id"] == turn_id, resumed["envelope"]
    brief = resumed["envelope"]["instructions"]
    assert f"The previous turn {turn_id} was lost" in brief, brief
    assert "Nothing it reported was applied" in brief, brief
    assert "called turnkeeper tool add_todo t-a2" in brief, brief
    assert "called turnkeeper tool record_evidence" in brief, brief
    assert "echo done > a.txt" in brief, brief
    assert "Reconcile" in brief and "the worktree (git status and HEAD)" in brief, brief
    # What the model was told is that brief.
    assert any(r.prompt and f"turn {turn_id} was lost" in r.prompt for r in kit.server.requests)

    goal = project.goal()
    assert goal.is_closed
    assert goal.todos["t-a2"].successor_of == "t-a" and goal.todos["t-a"].successors == ["t-a2"]
    # Applied once: the successor was added by one turn, the continuation, and no evidence
    # of the lost turn was ever recorded.
    added = [
        e for e in _goal_events(project) if e["type"] == "todo_added" and e["todo_id"] == "t-a2"
    ]
    assert len(added) == 1, added
    assert not any(eid.startswith(f"ev-{turn_id}-") for eid in goal.evidence), goal.evidence
    a_done = [e for e in goal.evidence.values() if e.key == "a-done"]
    assert len(a_done) == 1 and a_done[0].passed, a_done


def _journaled_tools(project: AgentProject) -> list[str]:
    return [
        str(e["data"].get("tool"))
        for r in project.records()
        if r.type == "turn.host_events"
        for e in r.payload["events"]
        if e["kind"] == "tool.started"
    ]


def _goal_events(project: AgentProject) -> list[dict[str, Any]]:
    store = open_store(project.project.database_url)
    try:
        return [json.loads(r.payload) for r in store.read_stream(goal_stream(GOAL))]
    finally:
        store.close()
