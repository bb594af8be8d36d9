"""A real agent CLI works a whole goal through turnkeeper's tools, driven by ``turnkeeper run``.

The pinned Codex CLI and Claude Code each run against a fake model server that calls
turnkeeper's MCP tools the way a model would, in a project a user makes: a git
repository with its own ``.gitignore``, ``turnkeeper init``, a goal with one
acceptance criterion and three todos (A, then B, then C), and a session of the CLI's
host kind created from the command line. Nothing configures the tools but the host.

- The first attempt at A reports it done while its check fails: the kernel refuses
  the completion, and the next turn's brief names the failing evidence; the agent
  fixes A and adds a successor todo ("polish A").
- Working on B the agent opens a gate for a person ("may C be published?"); ``run``
  stops gate-blocked, a person answers with ``turnkeeper gate resolve``, and the next
  ``run`` goes on.
- Once every todo is done with the criterion unmet, the goal asks for a replan; the
  agent's delta (a new todo) resolves it, that todo meets the criterion, and the goal
  closes through its terminal audit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import MakeKit
from tests.agents.fakes import Rule, Shell, Text, Tool
from tests.usage.project import UserProject

RUN_TIMEOUT = 240.0


def _check(name: str) -> dict[str, str]:
    return {"command": f"grep -qx done {name}.txt", "key": f"{name}-done"}


RULES = [
    Rule(
        "Replan the goal",
        [
            Tool(
                "add_todo",
                {"title": "write the summary", "todo_id": "t-d", "required_evidence": ["s-done"]},
            ),
            Text("The summary is what is missing: planned it."),
        ],
    ),
    Rule(
        "todo t-d: write the summary",
        [
            Shell("echo done > s.txt"),
            Tool("record_evidence", _check("s")),
            Tool("todo_done", {"summary": "wrote the summary"}),
            Tool("record_evidence", {"command": "cat a.txt b.txt c.txt s.txt", "key": "all"}),
            Tool("meet_criterion", {"criterion_id": "c1", "evidence_key": "all"}),
            Text("Summary written; the criterion is met."),
        ],
    ),
    Rule(
        "evidence `a-done` failed",
        [
            Shell("echo done > a.txt"),
            Tool("record_evidence", _check("a")),
            Tool("todo_done", {"summary": "A fixed"}),
            Tool("add_todo", {"title": "polish A", "todo_id": "t-a2", "successor_of": "t-a"}),
            Text("A is fixed; polishing it is a successor."),
        ],
    ),
    Rule("todo t-a2: polish A", [Tool("todo_done", {"summary": "polished"}), Text("Polished.")]),
    Rule(
        "todo t-a: write A",
        [
            Shell("echo draft > a.txt"),
            Tool("record_evidence", _check("a")),
            Tool("todo_done", {"summary": "A written"}),
            Text("A is written."),
        ],
    ),
    Rule(
        "todo t-b: write B",
        [
            Shell("echo done > b.txt"),
            Tool("record_evidence", _check("b")),
            Tool("todo_done", {"summary": "B written"}),
            Tool(
                "open_gate",
                {"title": "May C be published?", "gate_id": "publish", "scope": ["t-c"]},
            ),
            Text("B is written; I asked whether C may be published."),
        ],
    ),
    Rule(
        "todo t-c: write C",
        [
            Shell("echo done > c.txt"),
            Tool("record_evidence", _check("c")),
            Tool("todo_done", {"summary": "C written"}),
            Text("C is written."),
        ],
    ),
]


def _prompts(server_requests: list[Any]) -> list[str]:
    """Each turn's prompt (the brief), in order, once each."""
    seen: list[str] = []
    for request in server_requests:
        if request.prompt is not None and request.prompt not in seen:
            seen.append(request.prompt)
    return seen


@pytest.mark.parametrize("cli", ["codex", "claude"])
def test_a_cli_agent_works_a_goal_through_the_tools(
    cli: str, make_kit: MakeKit, tmp_path: Path
) -> None:
    kit = make_kit(cli, RULES)
    project = UserProject(tmp_path / "work")
    project.tk("goal", "add", "Write A, B and C", "--id", "g", "-c", "A, B, C and a summary")
    project.tk("todo", "add", "g", "write A", "--id", "t-a", "--requires-evidence", "a-done")
    project.tk(
        "todo", "add", "g", "write B", "--id", "t-b", "--depends-on", "t-a",
        "--requires-evidence", "b-done",
    )  # fmt: skip
    project.tk(
        "todo", "add", "g", "write C", "--id", "t-c", "--depends-on", "t-b",
        "--requires-evidence", "c-done",
    )  # fmt: skip
    config = project.host_config(cli, kit.host_config())
    sid = project.tk_json(
        "session", "create", "g", "--host", cli, "--host-config", config, "--workspace", ".",
    )["session_id"]  # fmt: skip

    # The run ends on the open gate: blocked, exit 13 (README, "Errors and exit codes").
    first = project.tk("run", "--json", timeout=RUN_TIMEOUT, expect=13)
    summary = json.loads(first.stdout.splitlines()[-1])
    assert summary["outcomes"] == {sid: "blocked"}, summary
    goal = project.tk_json("goal", "show", "g")["state"]
    statuses = {t: goal["todos"][t]["status"] for t in goal["todos"]}
    assert statuses == {"t-a": "done", "t-b": "done", "t-c": "open", "t-a2": "done"}, (
        statuses,
        first.stdout[-3000:],
    )
    assert goal["todos"]["t-a2"]["successor_of"] == "t-a", goal["todos"]["t-a2"]
    assert goal["gates"]["publish"]["status"] == "open", goal["gates"]
    assert "gate_blocked" in json.dumps(summary), summary

    prompts = _prompts(kit.server.model_requests())
    # The first turn names the acceptance and the evidence the todo needs; the retry
    # names why the first attempt was refused, with its exit code.
    assert "- [ ] c1: A, B, C and a summary" in prompts[0], prompts[0]
    assert "`a-done`: missing" in prompts[0], prompts[0]
    retry = next(p for p in prompts if "evidence `a-done` failed" in p)
    assert "refused: completing the todo: evidence_failed" in retry, retry
    assert "exited 1" in retry, retry
    # The tools answered the model in the turn: the dry run refused the false claim.
    answers = [o for r in kit.server.model_requests() for o in r.tool_outputs()]
    assert any("would refuse it now" in a for a in answers), answers

    project.tk("gate", "resolve", "publish", "--decision", "approved", "--by", "alice")
    second = project.tk("run", "--json", timeout=RUN_TIMEOUT)
    assert json.loads(second.stdout.splitlines()[-1])["outcomes"] == {sid: "finished"}

    goal = project.tk_json("goal", "show", "g")["state"]
    assert goal["goal"]["status"] == "closed", (goal["goal"], second.stdout[-3000:])
    assert all(t["status"] == "done" for t in goal["todos"].values()), goal["todos"]
    assert goal["todos"]["t-d"]["title"] == "write the summary"
    (obligation,) = goal["obligations"].values()
    assert obligation["trigger"] == "frontier_exhausted", obligation
    assert obligation["discharged_by"]["by"] == "add_todo", obligation
    assert goal["goal"]["criteria"][0]["met"] is True, goal["goal"]
    audit = project.tk_json("audit", "g")["audit"]
    assert audit["terminal"] is True, audit
    # The agent's work was never committed: each passing record names HEAD, and the
    # worktree content it ran on, different for A, B and C.
    head = project.git("rev-parse", "HEAD").strip()
    passing = {
        e["key"]: e for e in goal["evidence"].values() if e["exit_code"] == 0 and e["key"] != "all"
    }
    ran_on = [passing[k] for k in ("a-done", "b-done", "c-done")]
    assert {e["revision"] for e in ran_on} == {head}, ran_on
    assert len({e["tree"] for e in ran_on}) == 3, ran_on
    replan = next(p for p in _prompts(kit.server.model_requests()) if "Replan the goal" in p)
    assert obligation["id"] in replan, replan
    assert "`c-done`: passed" in replan, replan  # what a criterion could be met with
    gate_seen = next(p for p in _prompts(kit.server.model_requests()) if "todo t-c: write C" in p)
    assert "decided 'approved' by alice" in gate_seen, gate_seen
