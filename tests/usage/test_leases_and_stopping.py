"""Leases, controller identity and stopping, used as a user uses them.

* two sessions in one ``run``, one turn three times longer than the lease: both
  goals complete (the controller used to fence itself off: ``lease_expired``);
* a controller in another PID namespace is left alone while it lives, and taken
  over once its lease expired after it was SIGKILLed;
* the first SIGINT says what it waits for, the second ends the host's whole tree;
* ``session stop`` from another shell ends a running host and frees its todo, the
  ``run`` that drove it goes on; ``session resume`` and ``run`` finish the goal.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.usage.project import (
    Background,
    UserProject,
    kill_processes_with,
    processes_with,
    wait_for,
)
from turnkeeper.runtime.turn.fencing import fence_margin

RESULT = json.dumps({"kind": "result", "data": {"summary": "done", "todo_done": True}})


@pytest.fixture
def token() -> Iterator[str]:
    """A unique sleep length: finds this test's agent processes and nothing else."""
    value = f"{3000 + uuid.uuid4().int % 5000}.{os.getpid() % 1000}"
    yield value
    kill_processes_with(f"sleep {value}")


def _slow_agent(user_project: UserProject, name: str, token: str) -> tuple[str, Path]:
    """An agent that works until told to finish: it starts a helper process, then
    sleeps; once the file ``<name>.fast`` exists it finishes its todo at once."""
    fast = user_project.root.parent / f"{name}.fast"
    started = user_project.root.parent / f"{name}.started"
    script = f"""#!/bin/sh
if [ -e '{fast}' ]; then echo '{RESULT}'; exit 0; fi
touch '{started}'
sleep {token} &
sleep {token}
echo '{RESULT}'
"""
    agent = user_project.agent(name, script)
    return str(agent), fast


def _create(user_project: UserProject, goal: str, todos: list[str], command: list[str]) -> str:
    user_project.tk("goal", "add", f"goal {goal}", "--id", goal)
    for todo in todos:
        user_project.tk("todo", "add", goal, f"do {todo}", "--id", todo)
    config = {"command": command, "event_format": "jsonl"}
    created = user_project.tk_json(
        "session", "create", goal, "--host", "subprocess",
        "--host-config", user_project.host_config(f"host-{goal}", config), "--workspace", ".",
    )  # fmt: skip
    return str(created["session_id"])


def _summary(done_stdout: str) -> dict[str, Any]:
    lines = [line for line in done_stdout.splitlines() if line.strip()]
    summary: dict[str, Any] = json.loads(lines[-1])
    return summary


def _progress(bg: Background) -> list[str]:
    return [
        str(line["progress"])
        for line in (json.loads(ln) for ln in bg.stdout().splitlines() if ln.startswith("{"))
        if "progress" in line
    ]


def test_one_long_turn_costs_no_other_session_its_lease(user_project: UserProject) -> None:
    lease = 4.0
    slow = user_project.agent("slow-agent", f"#!/bin/sh\nsleep {3 * lease}\necho '{RESULT}'\n")
    quick = user_project.agent("quick-agent", f"#!/bin/sh\necho '{RESULT}'\n")
    long_sid = _create(user_project, "long", ["long-1"], [str(slow)])
    # Two todos: whichever session goes first, the quick one needs its lease again
    # after the long turn.
    quick_sid = _create(user_project, "quick", ["quick-1", "quick-2"], [str(quick)])

    done = user_project.tk("run", "--json", "--lease", str(lease), timeout=120)

    summary = _summary(done.stdout)
    assert summary["stops"] == {long_sid: "goal_terminal", quick_sid: "goal_terminal"}, summary
    for goal in ("long", "quick"):
        assert user_project.tk_json("goal", "show", goal)["state"]["goal"]["status"] == "closed"
    # Each lease was taken once and renewed throughout: never lost and taken again.
    for sid in (long_sid, quick_sid):
        assert user_project.tk_json("session", "show", sid)["lease"]["epoch"] == 1
    assert "expired" not in done.stdout, done.stdout


def _unshare_works() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, check=False
    )
    return probe.returncode == 0


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.extend(int(p) for p in text)
    return found


@pytest.mark.skipif(not _unshare_works(), reason="needs root and unshare --pid")
def test_a_controller_in_another_pid_namespace_is_not_taken_for_dead(
    user_project: UserProject, token: str
) -> None:
    lease = 5.0
    agent, fast = _slow_agent(user_project, "ns-agent", token)
    sid = _create(user_project, "ns", ["ns-1"], [agent])
    inner = user_project.start(
        "run",
        "--json",
        "--lease",
        str(lease),
        prefix=("unshare", "--pid", "--fork", "--mount-proc"),
    )
    wait_for(lambda: len(processes_with(f"sleep {token}")) == 2, 30, "the agent to start")
    holder = user_project.tk_json("session", "show", sid)["lease"]["owner"]

    # Another controller on this machine: the holder's pid means another process here,
    # so it must not be declared dead; the session is left to it and its turn goes on.
    outer = user_project.tk("run", "--json", "--lease", str(lease), timeout=60)
    assert _summary(outer.stdout)["stops"] == {sid: "lease_held"}, outer.stdout
    assert len(processes_with(f"sleep {token}")) == 2, "the live controller's turn was killed"
    shown = user_project.tk_json("session", "show", sid)
    assert shown["lease"]["owner"] == holder
    assert shown["in_flight"] is not None

    # SIGKILL the controller (pid 1 of its namespace: every process in it goes too).
    (controller,) = _children(inner.pid)
    os.kill(controller, signal.SIGKILL)
    assert inner.wait(30) != 0
    fast.touch()
    # Its lease still runs: taking over now would need a proof of death it cannot have.
    early = user_project.tk("run", "--json", "--lease", str(lease), timeout=60)
    if _summary(early.stdout)["stops"] != {sid: "lease_held"}:
        pytest.fail(f"taken over before the lease expired:\n{early.stdout}")
    expires = datetime.fromisoformat(
        user_project.tk_json("session", "show", sid)["lease"]["expires_at"]
    )
    # ... and, its processes being out of sight from here, the fencing margin after it
    # (runtime/turn/fencing.py): until then only its own fence could have ended them.
    due = expires + timedelta(seconds=fence_margin(lease))
    wait_for(lambda: datetime.now(UTC) > due, lease + 10, "the lease and margin to pass")
    final = user_project.tk("run", "--json", "--lease", str(lease), timeout=60)
    assert _summary(final.stdout)["stops"] == {sid: "goal_terminal"}, final.stdout
    session = user_project.tk_json("session", "show", sid)
    assert session["counters"]["turns_lost"] == 1


def test_second_sigint_ends_the_host_tree_and_exits(user_project: UserProject, token: str) -> None:
    agent, fast = _slow_agent(user_project, "sig-agent", token)
    sid = _create(user_project, "sig", ["sig-1"], [agent])
    run = user_project.start("run", "--json")
    wait_for(lambda: len(processes_with(f"sleep {token}")) == 2, 30, "the agent to start")

    run.signal(signal.SIGINT)
    wait_for(
        lambda: any("waiting for turn" in line for line in _progress(run)),
        10,
        "run to say what it waits for",
    )
    said = next(line for line in _progress(run) if "waiting for turn" in line)
    assert sid[:8] in said and "signal again" in said, said
    time.sleep(1.0)
    assert run.proc.poll() is None, "the first SIGINT must wait for the turn in flight"

    run.signal(signal.SIGINT)
    assert run.wait(30) == -signal.SIGINT
    said_last = run.err.read_text(errors="replace")
    assert "ended the hosts of turns" in said_last, said_last
    assert "Traceback" not in said_last, said_last  # exiting on purpose is no failure
    wait_for(lambda: not processes_with(f"sleep {token}"), 10, "no agent process left")

    # The next run recovers the turn as lost and finishes the goal.
    fast.touch()
    done = user_project.tk("run", "--json", timeout=60)
    assert _summary(done.stdout)["stops"] == {sid: "goal_terminal"}, done.stdout
    assert user_project.tk_json("session", "show", sid)["counters"]["turns_lost"] == 1


def test_session_stop_then_resume_then_run_finishes_the_goal(
    user_project: UserProject, token: str
) -> None:
    agent, fast = _slow_agent(user_project, "stop-agent", token)
    sid = _create(user_project, "stop", ["stop-1"], [agent])
    run = user_project.start("run", "--json")
    wait_for(lambda: len(processes_with(f"sleep {token}")) == 2, 30, "the agent to start")

    stopped = user_project.tk_json("session", "stop", sid)

    assert stopped["status"] == "suspended", stopped
    assert stopped["taken_from"] and stopped["taken_from"].startswith("ctl:"), stopped
    assert stopped["ended_turn"] and stopped["killed_pids"], stopped
    assert stopped["released_todos"] == ["stop-1"], stopped
    assert not processes_with(f"sleep {token}"), "session stop left the host running"
    # The run that drove it lets it go and ends (it had nothing else to drive).
    assert run.wait(30) == 0, run.output()
    assert run.summary()["stops"] == {sid: "lease_lost"}, run.output()
    goal = user_project.tk_json("goal", "show", "stop")["state"]
    assert goal["todos"]["stop-1"]["status"] == "open"
    # Suspended: `run` leaves it alone until it is resumed.
    assert _summary(user_project.tk("run", "--json").stdout)["turns"] == 0

    resumed = user_project.tk_json("session", "resume", sid)
    assert resumed["status"] == "ready", resumed
    fast.touch()
    done = user_project.tk("run", "--json", timeout=60)
    assert _summary(done.stdout)["stops"] == {sid: "goal_terminal"}, done.stdout
    assert user_project.tk_json("goal", "show", "stop")["state"]["goal"]["status"] == "closed"


def test_a_run_lets_go_of_a_session_it_no_longer_drives(
    user_project: UserProject, token: str
) -> None:
    """While ``run`` drives session A, session B — whose agent always fails — ends
    (crashed or suspended); the run gives B's lease back at once, so the operator's
    ``session resume``, ``stop`` and ``crash`` on B work while A's turn goes on."""
    agent, fast = _slow_agent(user_project, "busy-agent", token)
    failing = user_project.agent("failing-agent", "#!/bin/sh\necho 'no luck' >&2\nexit 3\n")
    busy = _create(user_project, "busy", ["busy-1"], [agent])
    broken = _create(user_project, "broken", ["broken-1"], [str(failing)])
    run = user_project.start("run", "--json")
    wait_for(lambda: len(processes_with(f"sleep {token}")) == 2, 30, "A's agent to start")

    def ended() -> bool:
        status = user_project.tk_json("session", "show", broken)["status"]
        return status not in ("ready", "running")

    wait_for(ended, 60, "B to stop being driven", interval=0.5)
    assert len(processes_with(f"sleep {token}")) == 2, "A's turn goes on"
    lease = user_project.tk_json("session", "show", broken)["lease"]
    assert lease["owner"] is None, f"the run still holds B's lease: {lease}"
    resumed = user_project.tk_json("session", "resume", broken)
    assert resumed["status"] == "ready", resumed
    stopped = user_project.tk_json("session", "stop", broken)
    assert stopped["status"] == "suspended", stopped
    crashed = user_project.tk_json("session", "crash", broken)
    assert crashed["status"] == "crashed", crashed
    assert user_project.tk_json("session", "show", busy)["in_flight"] is not None
    fast.touch()
    kill_processes_with(f"sleep {token}")  # A's agent finishes (its next run is fast)
    run.wait(60)
