"""A hung agent is ended and, after ``--max-hangs`` in a row, its session is suspended;
a silent agent that works is left alone. As a user sees it: ``turnkeeper init`` in a
git repository, an agent command, the real ``turnkeeper run --silence-timeout 2``.

* an agent that sleeps silently (no event, no CPU) fails each turn as ``hung`` within
  the timeout, its whole tree ended; after two such turns the session is suspended
  with reason ``hung`` (``status``, ``session show``, the run's summary);
* an agent that prints only non-fatal error events (Codex's "Reconnecting… n/5" while
  it cannot reach its model) is hung too, and the message quotes its last error;
* an agent that prints nothing for longer than the timeout but keeps a CPU busy (a
  long build) completes its turn.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.usage.project import UserProject, kill_processes_with, processes_with

RUN_TIMEOUT = 60.0
SUSPENDED = 12  # run's exit code when a session it drove was suspended


@pytest.fixture
def token() -> Iterator[str]:
    """A unique sleep length: finds this test's agent processes and nothing else."""
    value = f"{3000 + uuid.uuid4().int % 5000}.{os.getpid() % 1000}"
    yield value
    kill_processes_with(f"sleep {value}")


def _session(project: UserProject, goal: str, config: dict[str, Any]) -> str:
    project.tk("goal", "add", f"goal {goal}", "--id", goal)
    project.tk("todo", "add", goal, f"the work of {goal}", "--id", f"t-{goal}")
    created = project.tk_json(
        "session", "create", goal, "--host", "subprocess",
        "--host-config", project.host_config(f"host-{goal}", config), "--workspace", ".",
    )  # fmt: skip
    return str(created["session_id"])


def _run(project: UserProject, *args: str, expect: int) -> list[dict[str, Any]]:
    """``run --json`` to its end; ``expect`` is its exit code (README, "Errors and exit
    codes"), which its summary, the last record, must repeat."""
    done = project.tk(
        "run", "--json", "--backoff", "0.1", *args, timeout=RUN_TIMEOUT, expect=expect
    )
    records = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert records[-1]["exit_code"] == expect, records[-1]
    return records


def _failed(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("record") == "turn" and r.get("phase") == "failed"]


def test_a_silent_idle_agent_is_ended_as_hung_then_suspended(
    user_project: UserProject, token: str
) -> None:
    agent = user_project.agent("sleeper", f"#!/bin/sh\nsleep {token}\n")
    sid = _session(user_project, "quiet", {"command": [str(agent)]})

    records = _run(user_project, "--silence-timeout", "2", expect=SUSPENDED)

    summary = records[-1]
    assert summary["stops"] == {sid: "hung"}, summary
    assert summary["outcomes"] == {sid: "suspended"}, summary
    assert summary["turns"] == summary["failed_turns"] == 2, summary  # --max-hangs 2
    failed = _failed(records)
    assert [f["error_kind"] for f in failed] == ["hung", "hung"], failed
    for turn in failed:
        assert turn["reason"] == "no progress for 2 s: no event and no CPU", turn
        # Found within the timeout and a sample interval, not at the 3600 s host timeout.
        assert 1.5 <= turn["elapsed_seconds"] < 8, turn
    assert not processes_with(f"sleep {token}")  # the whole tree was ended
    suspended = [r for r in records if r.get("event") == "suspended"]
    assert [r["reason"] for r in suspended] == ["hung"], records

    session = user_project.tk_json("session", "show", sid)
    assert (session["status"], session["status_reason"]) == ("suspended", "hung")
    assert session["consecutive_hangs"] == 2 and session["counters"]["turns_failed"] == 2
    listed = [s for s in user_project.tk_json("status")["sessions"] if s["session_id"] == sid]
    assert [(s["status"], s["status_reason"], s["consecutive_hangs"]) for s in listed] == [
        ("suspended", "hung", 2)
    ]
    turns = user_project.tk_json("turn", "list", sid)["turns"]
    assert [(t["outcome"], t["error_kind"]) for t in turns] == [("failed", "hung")] * 2
    shown = " ".join(user_project.tk("session", "show", sid).stdout.split())  # unwrapped
    assert "suspended (hung)" in shown and "2 hung" in shown, shown
    # Not retried further by a later run; a resume starts the count again.
    assert _run(user_project, "--silence-timeout", "2", expect=0)[-1]["turns"] == 0
    user_project.tk("session", "resume", sid)
    assert user_project.tk_json("session", "show", sid)["consecutive_hangs"] == 0


def test_only_error_events_are_no_progress(user_project: UserProject) -> None:
    error = json.dumps({"kind": "error", "data": {"message": "Reconnecting… 1/5", "fatal": False}})
    # An error every 0.4 s, for a minute at most (the loop is bounded).
    script = (
        f"#!/bin/sh\nn=0\nwhile [ $n -lt 150 ]; do echo '{error}'; sleep 0.4; n=$((n + 1)); done\n"
    )
    agent = user_project.agent("reconnecting", script)
    sid = _session(user_project, "offline", {"command": [str(agent)], "event_format": "jsonl"})

    records = _run(user_project, "--silence-timeout", "2", "--max-hangs", "1", expect=SUSPENDED)

    assert records[-1]["stops"] == {sid: "hung"}, records[-1]
    assert records[-1]["outcomes"] == {sid: "suspended"}, records[-1]
    (failed,) = _failed(records)
    assert failed["error_kind"] == "hung"
    assert failed["reason"] == (
        "no progress for 2 s: only error events and no CPU (last: 'Reconnecting… 1/5')"
    ), failed
    # Each error was shown as it came.
    errors = [r for r in records if r.get("record") == "agent_error"]
    assert len(errors) >= 3 and errors[0]["message"] == "Reconnecting… 1/5", errors
    assert errors[0]["fatal"] is False and errors[0]["progress"].startswith("t-offline: agent")


def test_a_silent_agent_that_burns_cpu_is_not_ended(user_project: UserProject) -> None:
    # Four seconds of computing with nothing printed, twice the timeout: a long build.
    busy = "import time\nt = time.time()\nwhile time.time() - t < 4: pass\n"
    agent = user_project.agent("builder", f"#!/bin/sh\n{sys.executable} -c '{busy}'\necho built\n")
    sid = _session(user_project, "build", {"command": [str(agent)]})

    records = _run(user_project, "--silence-timeout", "2", expect=0)

    assert records[-1]["stops"] == {sid: "goal_terminal"}, records
    assert records[-1]["outcomes"] == {sid: "finished"}, records[-1]
    assert records[-1]["failed_turns"] == 0
    completed = [r for r in records if r.get("phase") == "completed"]
    assert len(completed) == 1 and completed[0]["elapsed_seconds"] >= 4, completed
