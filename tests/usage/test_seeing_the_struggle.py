"""``run`` shows the agent's struggle as it happens: each of its error events (fatal or
not) and each part of its result the goal refused, with the reason — in the plain lines
a user reads and in ``--json``'s records a program reads."""

from __future__ import annotations

import json

from tests.usage.project import UserProject


def test_run_shows_an_agent_error_and_a_refused_completion(user_project: UserProject) -> None:
    user_project.tk("goal", "add", "Green tests", "--id", "green")
    user_project.tk("todo", "add", "green", "Make the tests pass", "--id", "t-a",
                    "--requires-evidence", "tests")  # fmt: skip
    error = {"kind": "error", "data": {"message": "model overloaded; retrying", "fatal": False}}
    result = {
        "kind": "result",
        "data": {
            "summary": "fixed it",
            "todo_done": True,
            "evidence": [{"key": "tests", "command": "exit 1"}],  # the tests still fail
        },
    }
    script = f"#!/bin/sh\necho '{json.dumps(error)}'\necho '{json.dumps(result)}'\n"
    agent = user_project.agent("optimist", script)
    config = {"command": [str(agent)], "event_format": "jsonl"}
    user_project.tk(
        "session", "create", "green", "--host", "subprocess",
        "--host-config", user_project.host_config("optimist", config), "--workspace", ".",
    )  # fmt: skip

    done = user_project.tk("run", "--json", "--max-turns", "1", timeout=60)
    records = [json.loads(line) for line in done.stdout.splitlines()]
    (said,) = [r for r in records if r.get("record") == "agent_error"]
    assert said["progress"] == "t-a: agent error: model overloaded; retrying", said
    assert (said["message"], said["fatal"], said["todo"]) == (
        "model overloaded; retrying",
        False,
        "t-a",
    )
    (refusal,) = [r for r in records if r.get("record") == "refusal"]
    assert (refusal["part"], refusal["reason"]) == ("complete", "evidence_failed"), refusal
    assert refusal["progress"].startswith("t-a: complete refused: evidence_failed ("), refusal
    assert "'tests'" in refusal["message"], refusal
    # Shown in the order it happened: the error while the host ran, the refusal at
    # its write-back, before the turn's end.
    kinds = [r.get("record") for r in records]
    assert kinds.index("agent_error") < kinds.index("refusal")
    ended = next(i for i, r in enumerate(records) if r.get("phase") == "completed")
    assert kinds.index("refusal") < ended

    # The plain lines of a run to a pipe or a file say the same.
    lines = user_project.tk("run", "--max-turns", "1", timeout=60).stdout.splitlines()
    assert "> t-a: agent error: model overloaded; retrying" in lines, lines
    refused = [line for line in lines if "complete refused: evidence_failed" in line]
    assert len(refused) == 1 and refused[0].startswith("> t-a: "), lines
