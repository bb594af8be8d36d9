"""Every process a turn starts ends with the turn, on both containment paths.

A user's agent is a shell script that leaves three sleepers behind the ways careless
tools do: one with a scrubbed environment in a process session of its own (``env -i
setsid``), one behind a double fork, and one under ``nohup``; then it exits 0. After
``turnkeeper run`` has ended, none of them may be alive: with
``TURNKEEPER_CONTAINMENT=cgroup`` a cgroup per turn holds them all, with ``subreaper``
the control plane adopts the orphans and ends them with the turn.

Each sleeper is named by a unique argument; teardown ends only processes whose
command line is exactly one of those, so a failing run leaves nothing behind.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Iterator

import pytest

from tests.usage.project import UserProject, wait_for
from turnkeeper.hosts import cgroups
from turnkeeper.hosts.procfs import process_table, read_cmdline, read_stat

AGENT = """#!/bin/sh
# Starts helpers that outlive it, as many tools do, and exits at once.
cat /proc/self/cgroup > "{log}"
env -i setsid sleep {setsid} &
( (sleep {double} &) & )
nohup sleep {nohup} >/dev/null 2>&1 &
sleep 1
echo '{{"kind": "result", "data": {{"summary": "started three helpers"}}}}'
exit 0
"""


def _sleepers(args: list[str]) -> dict[int, int]:
    """pid -> start time of every live process whose command line is ``sleep ARG``."""
    wanted = {f"sleep {arg}" for arg in args}
    return {
        pid: stat.start_time
        for pid, stat in process_table().items()
        if not stat.dead and read_cmdline(pid) in wanted
    }


@pytest.fixture
def sleeper_args() -> Iterator[list[str]]:
    # Unique durations: no other process on the machine runs ``sleep`` with these.
    base = random.randrange(100_000, 900_000)
    args = [f"{base + i}.{os.getpid()}" for i in range(3)]
    yield args
    for pid, start in _sleepers(args).items():
        stat = read_stat(pid)
        if stat is not None and stat.start_time == start:
            os.kill(pid, signal.SIGKILL)


def _run_agent_turn(project: UserProject, args: list[str], containment: str) -> str:
    """One turn of the agent under ``containment``; the agent's own ``/proc/self/cgroup``."""
    log = project.root.parent / "agent-cgroup.log"
    script = AGENT.format(log=log, setsid=args[0], double=args[1], nohup=args[2])
    agent = project.agent("helpers.sh", script)
    project.tk("goal", "add", "Start the helpers", "--id", "helpers", "-c", "they ran")
    project.tk("todo", "add", "helpers", "Start them", "--id", "start")
    config = project.host_config("agent", {"command": [str(agent)], "event_format": "jsonl"})
    project.tk("session", "create", "helpers", "--host", "subprocess", "--host-config", config)
    run = project.start("run", "--max-turns", "1", env={"TURNKEEPER_CONTAINMENT": containment})
    # Seen alive while the turn runs: the helpers did start.
    wait_for(lambda: len(_sleepers(args)) == 3, 30, "the three helpers to start")
    assert run.wait(60) == 0, run.output()
    assert log.exists(), "the agent never ran"
    return log.read_text()


def test_cgroup_containment_ends_every_process_of_the_turn(
    user_project: UserProject, sleeper_args: list[str]
) -> None:
    if (reason := cgroups.unavailable_reason()) is not None:
        pytest.skip(f"cgroup v2 is not writable here: {reason}")
    own_cgroup = _run_agent_turn(user_project, sleeper_args, "cgroup")
    assert "/turnkeeper.turns/" in own_cgroup  # the agent ran inside its turn's cgroup
    assert _sleepers(sleeper_args) == {}


def test_subreaper_containment_ends_every_process_of_the_turn(
    user_project: UserProject, sleeper_args: list[str]
) -> None:
    own_cgroup = _run_agent_turn(user_project, sleeper_args, "subreaper")
    assert "/turnkeeper.turns/" not in own_cgroup
    assert _sleepers(sleeper_args) == {}
