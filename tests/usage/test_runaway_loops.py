"""``turnkeeper run`` ends by itself on agents that would have it spin, as a user sees it.

Each case is a project made by ``turnkeeper init`` in a real git repository, an agent
command a user would write, and the real ``turnkeeper run``: a host that exits 0 and
does nothing, one that always fails, one whose evidence always fails, and a replan
that no agent answers. Each run must end on its own within a bounded number of
turns, with the reason in ``status --json``; before the progress guard the first of
them ran ~5,000 turns in 30 s.
"""

from __future__ import annotations

import json
from typing import Any

from tests.usage.project import UserProject

# Three idle turns raise a replan, two idle replans suspend: five turns at most.
IDLE_TURNS_BOUND = 5
RUN_TIMEOUT = 90.0
# run's exit code when a session it drove ended crashed or suspended.
CRASHED, SUSPENDED = 11, 12


def _session(user_project: UserProject, goal: str, config: dict[str, Any]) -> str:
    created = user_project.tk_json(
        "session", "create", goal, "--host", "subprocess",
        "--host-config", user_project.host_config(f"host-{goal}", config), "--workspace", ".",
    )  # fmt: skip
    return str(created["session_id"])


def _session_status(user_project: UserProject, sid: str) -> dict[str, Any]:
    status = user_project.tk_json("status")
    found = [s for s in status["sessions"] if s["session_id"] == sid]
    assert len(found) == 1, status
    session: dict[str, Any] = found[0]
    return session


def _run(user_project: UserProject, *args: str, expect: int) -> dict[str, Any]:
    """``run --json`` to its end; ``expect`` is its exit code (README, "Errors and exit
    codes"), which its summary must repeat."""
    done = user_project.tk("run", "--json", *args, timeout=RUN_TIMEOUT, expect=expect)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    summary: dict[str, Any] = json.loads(lines[-1])
    assert summary["exit_code"] == expect, summary
    return summary


def test_a_host_that_exits_0_and_does_nothing_is_suspended(user_project: UserProject) -> None:
    user_project.tk("goal", "add", "Tidy the docs", "--id", "docs")
    # Exit 0 would complete a todo (complete_todo: on_success) but for the evidence
    # it requires, which a plain command never reports: the kernel refuses each time.
    user_project.tk("todo", "add", "docs", "Fix the typos", "--id", "typos",
                    "--requires-evidence", "spelling")  # fmt: skip
    sid = _session(user_project, "docs", {"command": ["true"]})

    summary = _run(user_project, expect=SUSPENDED)

    assert summary["stops"] == {sid: "no_progress"}, summary
    assert summary["outcomes"] == {sid: "suspended"}, summary
    assert summary["turns"] == IDLE_TURNS_BOUND, summary
    session = _session_status(user_project, sid)
    assert (session["status"], session["status_reason"]) == ("suspended", "no_progress")
    assert session["counters"]["turns_accepted"] == IDLE_TURNS_BOUND
    goal = user_project.tk_json("goal", "show", "docs")["state"]
    raised = [o for o in goal["obligations"].values() if o["trigger"] == "no_progress"]
    assert [o["subject"] for o in raised] == [sid], goal["obligations"]
    # The suspended session gave its todo back, so someone else can take it.
    assert goal["todos"]["typos"]["status"] == "open", goal["todos"]["typos"]
    # A second run leaves the suspended session alone: no new turn.
    again = _run(user_project, expect=0)
    assert again["turns"] == 0, again


def test_a_host_that_always_fails_backs_off_and_stops(user_project: UserProject) -> None:
    user_project.tk("goal", "add", "Build it", "--id", "build")
    user_project.tk("todo", "add", "build", "Compile", "--id", "compile")
    agent = user_project.agent("broken-agent", "#!/bin/sh\necho 'model unreachable' >&2\nexit 3\n")
    sid = _session(user_project, "build", {"command": [str(agent)]})

    summary = _run(user_project, "--backoff", "0.2", expect=CRASHED)

    assert summary["stops"] == {sid: "crashed"}, summary
    assert summary["outcomes"] == {sid: "crashed"}, summary
    assert summary["turns"] == summary["failed_turns"] <= 6, summary
    session = _session_status(user_project, sid)
    assert session["status"] == "crashed"
    assert session["status_reason"] in ("recovery_attempts_exhausted", "consecutive_host_failures")
    assert session["status_reason"] == summary["reasons"][sid]
    # The attempts were spaced by the backoff, doubling from 0.2 s: the journal's turn
    # ends are at least 0.2, 0.4, 0.8 s apart (a loaded machine only adds to that).
    records = user_project.tk_json("session", "show", sid)
    assert records["counters"]["turns_failed"] == summary["failed_turns"]


def _jsonl_agent(user_project: UserProject, name: str, result: dict[str, Any]) -> str:
    line = json.dumps({"kind": "result", "data": result})
    note = json.dumps({"kind": "message", "data": {"text": "working..."}})
    agent = user_project.agent(name, f"#!/bin/sh\necho '{note}'\necho '{line}'\n")
    return str(agent)


def test_an_agent_whose_evidence_always_fails_is_suspended(user_project: UserProject) -> None:
    user_project.tk("goal", "add", "Green tests", "--id", "green")
    user_project.tk("todo", "add", "green", "Make the tests pass", "--id", "tests",
                    "--requires-evidence", "tests")  # fmt: skip
    claims_done = {
        "summary": "fixed it",
        "todo_done": True,
        "evidence": [{"key": "tests", "command": "exit 1"}],
    }
    agent = _jsonl_agent(user_project, "optimist", claims_done)
    sid = _session(user_project, "green", {"command": [agent], "event_format": "jsonl"})

    summary = _run(user_project, expect=SUSPENDED)

    assert summary["stops"] == {sid: "no_progress"}, summary
    assert summary["outcomes"] == {sid: "suspended"}, summary
    assert summary["turns"] <= IDLE_TURNS_BOUND, summary
    session = _session_status(user_project, sid)
    assert (session["status"], session["status_reason"]) == ("suspended", "no_progress")
    goal = user_project.tk_json("goal", "show", "green")["state"]
    assert goal["todos"]["tests"]["status"] != "done"
    failing = [e for e in goal["evidence"].values() if e["exit_code"] != 0]
    assert len(failing) == summary["turns"]  # every turn's report was checked, and failed


def test_a_replan_no_agent_answers_is_suspended(user_project: UserProject) -> None:
    # All the todos are done but the goal's criterion is not met: the frontier is
    # exhausted and the goal asks for a replan, which this agent never gives.
    user_project.tk("goal", "add", "Ship v2", "--id", "ship", "-c", "release notes written")
    user_project.tk("todo", "add", "ship", "Bump the version", "--id", "bump")
    epoch = user_project.tk_json("todo", "claim", "bump")["epoch"]
    user_project.tk("todo", "done", "bump", "--epoch", str(epoch))
    before = user_project.tk_json("goal", "show", "ship")["state"]
    assert [o["trigger"] for o in before["obligations"].values()] == ["frontier_exhausted"]
    sid = _session(user_project, "ship", {"command": ["true"]})

    summary = _run(user_project, expect=SUSPENDED)

    assert summary["stops"] == {sid: "no_progress"}, summary
    assert summary["outcomes"] == {sid: "suspended"}, summary
    assert summary["turns"] == 2, summary  # two replan turns, both idle
    session = _session_status(user_project, sid)
    assert (session["status"], session["status_reason"]) == ("suspended", "no_progress")
    assert session["replans_without_progress"] == 2
