"""`session crash` after `run` was SIGKILLed mid-turn ends the agent it left running.

A controller killed mid-turn leaves its agent alive: nobody watches it any more. The
user marks the session crashed so as to revert it. Before, the mark left the agent
running, with the session's todos already free, and whatever it wrote after that
landed in the workspace unrecorded (the revert ended it later, but a `session resume`
instead of a revert let it write on until the next `run`). The mark now ends the turn's
processes first and says which; nothing the agent would have written afterwards lands.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.usage.project import UserProject, kill_processes_with, processes_with, wait_for

GOAL = "g1"
AGENT_SLEEP = f"{os.getpid() % 1000 + 300}.{os.getpid()}"  # one process of ours alone has it
LATE_WRITE_AFTER_S = 4.0

AGENT = """#!/bin/sh
echo "$TURNKEEPER_TODO_ID" >> work.txt
if [ "$TURNKEEPER_TODO_ID" = t2 ]; then
  touch "{state}/second-started"
  sleep {late}
  echo "written by an agent nobody watches" >> work.txt
  exec sleep {sleep}
fi
echo '{{"kind":"result","data":{{"todo_done":true}}}}'
"""


def _session(project: UserProject, tmp_path: Path, todos: tuple[str, ...], late: float) -> str:
    """A goal with ``todos`` and a session on it whose agent is the script above."""
    project.tk("goal", "add", "Some steps", "--id", GOAL)
    for todo in todos:
        project.tk("todo", "add", GOAL, f"Step {todo}", "--id", todo)
    state = tmp_path / "agent-state"
    state.mkdir()
    script = AGENT.format(state=state, late=late, sleep=AGENT_SLEEP)
    agent = project.agent("agent.sh", script)
    config = project.host_config("agent", {"command": [str(agent)], "event_format": "jsonl"})
    created = project.tk_json(
        "session", "create", GOAL, "--host", "subprocess", "--host-config", config
    )
    return str(created["session_id"])


def test_crash_ends_the_host_a_killed_run_left_running(
    user_project: UserProject, tmp_path: Path
) -> None:
    project = user_project
    sid = _session(project, tmp_path, ("t1", "t2"), LATE_WRITE_AFTER_S)
    state = tmp_path / "agent-state"
    run = project.start("run")
    try:
        wait_for((state / "second-started").exists, 60, "the second turn")
        run.kill()  # SIGKILL: the agent is left running
        run.wait()

        marked = project.tk_json("session", "crash", sid)

        assert marked["status"] == "crashed"
        assert marked["ended_turn"] is not None and marked["ended_turn"].startswith("turn-")
        assert marked["killed_pids"], "the agent's processes were not ended"
        time.sleep(LATE_WRITE_AFTER_S + 1.0)  # when the agent would have written again
        assert processes_with(AGENT_SLEEP) == []
        assert (project.root / "work.txt").read_text() == "t1\nt2\n"
        shown = project.tk("session", "show", sid).stdout
        assert "crashed" in shown
    finally:
        kill_processes_with(AGENT_SLEEP)  # only if the mark failed to end it


def test_crash_says_which_host_processes_it_ended(
    user_project: UserProject, tmp_path: Path
) -> None:
    project = user_project
    sid = _session(project, tmp_path, ("t2",), 0)
    run = project.start("run")
    try:
        wait_for(lambda: processes_with(AGENT_SLEEP), 60, "the agent asleep")
        pids = processes_with(AGENT_SLEEP)
        run.kill()
        run.wait()

        said = project.tk("session", "crash", sid).stdout

        assert "marked crashed: session" in said
        assert "ended host processes:" in said
        assert all(str(pid) in said for pid in pids), said
        assert processes_with(AGENT_SLEEP) == []
    finally:
        kill_processes_with(AGENT_SLEEP)
