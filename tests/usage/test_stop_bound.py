"""A graceful stop has a bound: a paused host does not keep ``run`` waiting forever.

``run`` drives a turn whose agent is then paused (SIGSTOP, as a debugger or a
suspended terminal job leaves it). SIGTERM asks ``run`` to stop after the turn in
flight; before the fix it said "stopping after the turn in flight…" and waited for a
host that would never go on. Now, --stop-timeout seconds later, the host's whole
process tree is ended, the turn is recorded as failed with the reason, and ``run``
exits; no process of the agent is left.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.usage.project import UserProject, kill_processes_with, processes_with, wait_for

RESULT = json.dumps({"kind": "result", "data": {"summary": "done", "todo_done": True}})
STOP_TIMEOUT = 3.0
SLACK = 20.0  # ending the tree, recording the turn, the process exiting on a busy CI


@pytest.fixture
def token() -> Iterator[str]:
    """A unique sleep length: finds this test's agent processes and nothing else."""
    value = f"{3000 + uuid.uuid4().int % 5000}.{os.getpid() % 1000}"
    yield value
    kill_processes_with(f"sleep {value}")


def test_sigterm_ends_a_paused_host_at_the_stop_bound(
    user_project: UserProject, token: str
) -> None:
    project = user_project
    agent = project.agent(
        "paused-agent", f"#!/bin/sh\nsleep {token} &\nsleep {token}\necho '{RESULT}'\n"
    )
    project.tk("goal", "add", "a goal", "--id", "g")
    project.tk("todo", "add", "g", "do it", "--id", "t1")
    config = project.host_config("host", {"command": [str(agent)], "event_format": "jsonl"})
    sid = project.tk_json(
        "session", "create", "g", "--host", "subprocess", "--host-config", config
    )["session_id"]
    run = project.start("run", "--json", "--stop-timeout", str(STOP_TIMEOUT))
    try:
        wait_for(lambda: len(processes_with(f"sleep {token}")) == 2, 30, "the agent to start")
        paused = [*processes_with(str(agent)), *processes_with(f"sleep {token}")]
        for pid in paused:  # the agent and its child, each a process this test started
            os.kill(pid, signal.SIGSTOP)

        asked = time.monotonic()
        run.signal(signal.SIGTERM)
        code = run.wait(STOP_TIMEOUT + SLACK)
        took = time.monotonic() - asked
    finally:
        run.kill()
        kill_processes_with(str(agent))
    assert code == 0, run.output()
    assert STOP_TIMEOUT <= took < STOP_TIMEOUT + SLACK, took
    assert "stop bound" in run.stdout(), run.output()
    assert "Traceback" not in run.err.read_text(), run.output()
    assert processes_with(f"sleep {token}") == [], "the agent's tree outlived run"
    assert processes_with(str(agent)) == []

    (turn,) = project.tk_json("turn", "list", sid)["turns"]
    assert turn["outcome"] == "failed", turn
    assert "stop bound" in turn["reason"] and "--stop-timeout" in turn["reason"], turn
    summary = run.summary()
    assert summary["stops"] == {sid: "signalled"}, summary
