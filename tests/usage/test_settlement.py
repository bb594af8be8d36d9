"""A session that cannot settle is quarantined alone; the other sessions go on.

As a user has it: ``turnkeeper init`` in a git repository, two goals, a session each in
a git workspace of its own, shell agents, one ``turnkeeper run``. One agent leaves a
process behind that SIGKILL cannot end — here one frozen by the cgroup-v1 freezer,
as the kernel holds a process stuck on a hung network mount. That session's goal is
done, but it is not closed: it is suspended with ``quarantined: pid P of turn T still
running after SIGKILL``, and ``session revert`` is refused while the process lives;
the other session's turns complete and it closes. Once the process is let go, ``session
resume`` and the next ``run`` close it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.usage.project import GIT_IDENTITY, UserProject, wait_for

FREEZER_ROOT = Path("/sys/fs/cgroup/freezer")

AGENT = """#!/bin/sh
# One turn: write the todo's page and say the todo is done with it as evidence.
set -eu
page="$TURNKEEPER_TODO_ID.md"
echo "# $TURNKEEPER_TODO_ID" > "$page"
met="\\"criterion_id\\": \\"c1\\", \\"evidence_ids\\": [\\"ev-$TURNKEEPER_TURN_ID-0\\"]"
printf '{"kind": "result", "data": {"todo_done": true, "evidence": [%s], "proposals": [%s]}}\\n' \\
  "{\\"key\\": \\"page\\", \\"command\\": \\"test -s $page\\"}" \\
  "{\\"kind\\": \\"satisfy_criterion\\", $met}"
"""

# The same, leaving a detached process (as an agent's shell tool does) that it then
# freezes: SIGKILL stays pending on it until the freezer lets it go.
STUCK_AGENT = AGENT.replace(
    "set -eu\n",
    """set -eu
setsid sh -c 'exec sleep 600' </dev/null >/dev/null 2>&1 &
echo "$!" > "$FREEZER/tasks"
echo FROZEN > "$FREEZER/freezer.state"
echo "$!" > "$STUCK_PID"
""",
)


@pytest.fixture
def freezer() -> Iterator[Path]:
    if not os.access(FREEZER_ROOT, os.W_OK):
        pytest.skip("needs the cgroup-v1 freezer (a process SIGKILL cannot end)")
    group = FREEZER_ROOT / f"turnkeeper-test-{uuid.uuid4().hex[:12]}"
    group.mkdir()
    try:
        yield group
    finally:
        _thaw(group)
        wait_for(lambda: not (group / "tasks").read_text().split(), 30, "the frozen to die")
        group.rmdir()


def _thaw(group: Path) -> None:
    with contextlib.suppress(OSError):
        (group / "freezer.state").write_text("THAWED")


def _session(project: UserProject, n: int, agent: Path) -> tuple[str, str]:
    goal = project.tk("goal", "add", f"Page {n}", "-c", "the page exists", "-q").stdout.strip()
    project.tk("todo", "add", goal, "Write the page", "--requires-evidence", "page", "-q")
    workspace = project.root.parent / f"ws{n}"
    workspace.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "start"]):
        subprocess.run(["git", *args], cwd=workspace, env=GIT_IDENTITY, check=True, timeout=60)
    spec = {"command": [str(agent)], "event_format": "jsonl", "pass_env": ["FREEZER", "STUCK_PID"]}
    config = project.host_config(f"agent{n}", spec)
    created = project.tk_json(
        "session", "create", goal, "--host", "subprocess", "--host-config", config,
        "--workspace", str(workspace),
    )  # fmt: skip
    return goal, str(created["session_id"])


def _status(project: UserProject, session: str) -> tuple[str, str]:
    shown = project.tk_json("session", "show", session)
    return str(shown["status"]), str(shown.get("status_reason") or "")


def test_a_session_that_cannot_settle_is_quarantined_and_the_others_close(
    user_project: UserProject, freezer: Path
) -> None:
    stuck_pid = user_project.root.parent / "stuck.pid"
    stuck_goal, stuck = _session(user_project, 1, user_project.agent("stuck.sh", STUCK_AGENT))
    fine_goal, fine = _session(user_project, 2, user_project.agent("agent.sh", AGENT))
    env = {"FREEZER": str(freezer), "STUCK_PID": str(stuck_pid)}
    run = user_project.start("run", "--json", env=env)
    # The quarantined session is suspended: run exits 12 (README, "Errors and exit codes").
    assert run.wait(timeout=180) == 12, run.output()
    pid = int(stuck_pid.read_text())

    summary = run.summary()
    assert summary["stops"] == {stuck: "quarantined", fine: "goal_terminal"}, summary
    assert summary["outcomes"] == {stuck: "suspended", fine: "finished"}, summary
    status, reason = _status(user_project, stuck)
    assert status == "suspended", (status, reason)
    assert reason.startswith(f"quarantined: pid {pid} of turn ") and "after SIGKILL" in reason
    assert _status(user_project, fine)[0] == "closed"
    # The other goal's work was done and recorded as done.
    for goal in (stuck_goal, fine_goal):
        assert user_project.tk_json("audit", goal)["audit"]["terminal"] is True
    said = [r for r in run.json_lines() if r.get("event") == "quarantined"]
    assert said and said[0]["processes"] == [reason.split(": ", 1)[1].split(" still")[0]], said

    # A revert would restore the workspace under the live process: refused.
    user_project.tk("session", "crash", stuck, "--reason", "operator check")
    refused = user_project.tk("session", "revert", stuck, "--request-id", "r1", expect=6)
    assert "session_unsettled" in refused.stderr + refused.stdout, refused
    assert _status(user_project, stuck)[0] == "crashed"

    _thaw(freezer)  # the process is let go: its pending SIGKILL ends it
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), 30, "the released process to end")
    user_project.tk("session", "resume", stuck)
    again = user_project.start("run", "--json", env=env)
    assert again.wait(timeout=120) == 0, again.output()
    assert _status(user_project, stuck)[0] == "closed"
    assert again.summary()["turns"] == 0  # nothing ran again: the session only settled
