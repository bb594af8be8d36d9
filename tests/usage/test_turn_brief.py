"""The turn brief as an own agent meets it: what the first turn and a retry are told.

A project made by ``turnkeeper init``; a goal with an acceptance criterion and a todo
that requires evidence ``tests``; an agent (a real process) that reads its request as
JSON on stdin and keeps every request it was given. Its first attempt claims the todo
done while its check fails (exit 1, a telling last line); the kernel refuses the
completion. The next turn's brief — both the typed model and the text every host
receives as its instructions — names that refusal: the evidence key, the exit code
and the output's tail. The agent then fixes the cause and the goal closes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.usage.project import UserProject

AGENT = """#!/usr/bin/env python3
import json, os, pathlib, sys
request = json.load(sys.stdin)["request"]
kept = pathlib.Path(os.environ["KEEP"])
n = len(list(kept.glob("*.json")))
(kept / f"{n}.json").write_text(json.dumps(request))
if n > 0:  # the second turn fixes what the first one's check found
    pathlib.Path("answer.txt").write_text("2\\n")
check = "grep -qx 2 answer.txt || { echo 'AssertionError: expected 2, got nothing'; exit 1; }"
result = {"todo_done": True, "evidence": [{"key": "tests", "command": check}]}
if n > 0:
    result["proposals"] = [
        {"kind": "satisfy_criterion", "criterion_id": "c1",
         "evidence_ids": ["ev-" + request["turn_id"] + "-0"]},
    ]
print(json.dumps({"kind": "result", "data": result}))
"""


def _requests(kept: Path) -> list[dict[str, Any]]:
    return [json.loads((kept / f"{n}.json").read_text()) for n in range(len(list(kept.iterdir())))]


def test_a_retry_is_told_why_the_last_attempt_was_refused(user_project: UserProject) -> None:
    project = user_project
    kept = project.root.parent / "requests"
    kept.mkdir()
    project.tk("goal", "add", "Answer", "--id", "g", "-c", "the answer is 2")
    project.tk("todo", "add", "g", "Write the answer", "--id", "t1", "--requires-evidence", "tests")
    agent = project.agent("agent.py", AGENT)
    config = project.host_config(
        "agent",
        {
            "command": [str(agent)],
            "event_format": "jsonl",
            "stdin": "request",
            "env": {"KEEP": str(kept)},
        },
    )
    project.tk(
        "session", "create", "g", "--host", "subprocess", "--host-config", config,
        "--workspace", ".",
    )  # fmt: skip

    project.tk("run", "--max-turns", "2", "--json", timeout=120)

    first, second = _requests(kept)[:2]
    brief = first["brief"]
    assert brief["version"] == 1 and brief["kind"] == "start", brief
    assert brief["goal"]["criteria"] == [{"id": "c1", "text": "the answer is 2", "met": False}]
    (need,) = brief["todo"]["required_evidence"]
    assert (need["key"], need["status"]) == ("tests", "missing"), need
    assert brief["previous"] is None and brief["workspace"]["revision"], brief
    text = first["instructions"]
    assert "Start todo t1: Write the answer (attempt 1)." in text, text
    assert "- [ ] c1: the answer is 2" in text and "`tests`: missing" in text, text

    retry = second["brief"]
    previous = retry["previous"]
    refusal = next(r for r in previous["refusals"] if r["what"] == "completing the todo")
    assert refusal["reason"] == "evidence_failed", refusal
    (check,) = previous["failed_checks"]
    assert (check["key"], check["exit_code"]) == ("tests", 1), check
    assert "AssertionError: expected 2, got nothing" in check["output_tail"], check
    (need,) = retry["todo"]["required_evidence"]
    assert (need["status"], need["exit_code"]) == ("failed", 1), need
    retry_text = second["instructions"]
    assert "refused: completing the todo: evidence_failed" in retry_text, retry_text
    assert "evidence `tests` failed" in retry_text and "exited 1" in retry_text, retry_text
    assert "AssertionError: expected 2, got nothing" in retry_text, retry_text

    goal = project.tk_json("goal", "show", "g")["state"]
    assert goal["todos"]["t1"]["status"] == "done", goal["todos"]
    assert goal["goal"]["criteria"][0]["met"] is True, goal["goal"]
