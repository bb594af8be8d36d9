"""The subreaper path: adopted orphans are attributed to turns by start time, and
end with the last turn they may belong to.

Each case runs in a child interpreter that becomes a child subreaper (process-wide
and permanent, so never the test process itself) and runs two turns at once with
``TURNKEEPER_CONTAINMENT=subreaper``. Their hosts leave orphans that scrubbed the
marker and left the session (``env -i setsid``), so nothing but adoption leads to
them. The orphans are ``sleep`` commands with unique arguments; teardown ends any
that survived, by pid, after checking the command line.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from turnkeeper.hosts import cgroups, process_tree

REPO = Path(__file__).resolve().parents[2]

# argv: workspace, reap interval, early orphan's argument, late orphan's argument.
TWO_TURNS = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from turnkeeper.hosts import TurnKind, TurnRequest, process_tree, subreaper
    from turnkeeper.hosts.subprocess_host import SubprocessHost
    ws, interval, early, late = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
    assert process_tree.become_subreaper(reap_interval=interval)

    def wait_for(predicate, what):
        deadline = time.monotonic() + 20
        while not predicate():
            assert time.monotonic() < deadline, what
            time.sleep(0.02)

    def sleeper(arg):
        pids = [p for p, s in process_tree.process_table().items()
                if not s.dead and process_tree.read_cmdline(p) == f"sleep {arg}"]
        return pids[0] if pids else None

    def alive(pid):
        stat = process_tree.read_stat(pid)
        return stat is not None and not stat.dead

    def start(turn, script):
        request = TurnRequest(turn_id=turn, session_id="s", generation=1, attempt=1,
                              kind=TurnKind.START, instructions="", workspace=ws)
        config = {"command": ["sh", "-c", script], "drain_seconds": 0.2}
        return SubprocessHost(config).start(request)

    def orphan(arg):  # the subshell exits at once: the sleep is adopted by us
        return f"(env -i setsid sleep {arg} >/dev/null 2>&1 &)"

    # Turn A leaves an orphan before B's host starts, and one after.
    a = start("turn-a", f"{orphan(early)}; while [ ! -e go ]; do sleep 0.02; done; "
                        f"{orphan(late)}; while [ ! -e end-a ]; do sleep 0.02; done")
    wait_for(lambda: sleeper(early), "early orphan")
    early_pid = sleeper(early)
    time.sleep(0.05)  # start times are in clock ticks: B's host starts strictly later
    b = start("turn-b", "while [ ! -e end-b ]; do sleep 0.02; done")
    time.sleep(0.05)
    (ws / "go").touch()
    wait_for(lambda: sleeper(late), "late orphan")
    late_pid = sleeper(late)
    out = {"early_pid": early_pid, "late_pid": late_pid,
           "early_parent_is_us": process_tree.read_stat(early_pid).ppid == os.getpid()}
    time.sleep(3 * interval if interval < 1 else 0)
    out["seen_while_running"] = {str(k): sorted(v) for k, v in subreaper.orphan_turns().items()}

    (ws / "end-a").touch()
    out["a"] = a.wait(20).model_dump(mode="json")
    out["after_a"] = {"early": alive(early_pid), "late": alive(late_pid),
                      "turns": {str(k): sorted(v) for k, v in subreaper.orphan_turns().items()}}
    (ws / "end-b").touch()
    out["b"] = b.wait(20).model_dump(mode="json")
    out["after_b"] = {"early": alive(early_pid), "late": alive(late_pid)}
    print(json.dumps(out))
    """
)


@pytest.fixture
def sleeper_args() -> Iterator[tuple[str, str]]:
    base = random.randrange(100_000, 900_000)
    args = (f"{base}.{os.getpid()}", f"{base + 1}.{os.getpid()}")
    yield args
    wanted = {f"sleep {arg}" for arg in args}
    for pid, stat in process_tree.process_table().items():
        if not stat.dead and process_tree.read_cmdline(pid) in wanted:
            os.kill(pid, signal.SIGKILL)


def _two_turns(tmp_path: Path, interval: float, args: tuple[str, str]) -> dict[str, Any]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", TWO_TURNS, str(workspace), str(interval), *args],
        cwd=REPO,
        env={**os.environ, "TURNKEEPER_CONTAINMENT": "subreaper"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def _check_ending(out: dict[str, Any]) -> None:
    early, late = str(out["early_pid"]), str(out["late_pid"])
    # Turn A ends: its early orphan with it; the late one may be B's too, so it stays.
    assert out["a"]["containment"] == "subreaper"
    assert out["a"]["status"] == "succeeded"
    assert out["early_pid"] in out["a"]["stragglers_killed"]
    assert out["late_pid"] not in out["a"]["stragglers_killed"]
    assert out["after_a"] == {"early": False, "late": True, "turns": {late: ["turn-b"]}}
    # Turn B ends: the late orphan's last candidate turn is over.
    assert out["late_pid"] in out["b"]["stragglers_killed"]
    assert out["after_b"] == {"early": False, "late": False}
    assert early != late


def test_orphans_are_attributed_by_start_time_to_the_turns_in_flight(
    tmp_path: Path, sleeper_args: tuple[str, str]
) -> None:
    out = _two_turns(tmp_path, 0.05, sleeper_args)
    assert out["early_parent_is_us"]  # adopted by the subreaper
    early, late = str(out["early_pid"]), str(out["late_pid"])
    # Started before B's host: A's only. Started after: either turn's.
    assert out["seen_while_running"] == {early: ["turn-a"], late: ["turn-a", "turn-b"]}
    _check_ending(out)


def test_an_orphan_adopted_between_two_scans_is_still_attributed(
    tmp_path: Path, sleeper_args: tuple[str, str]
) -> None:
    # No periodic scan ever runs (interval of an hour): the orphans are first seen by
    # the last scan at turn A's end, and their start times alone say whose they are.
    out = _two_turns(tmp_path, 3600.0, sleeper_args)
    assert out["seen_while_running"] == {}
    _check_ending(out)


IDLE_THEN_BUSY = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from turnkeeper.hosts import TurnKind, TurnRequest, process_tree, subreaper
    from turnkeeper.hosts.subprocess_host import SubprocessHost
    scans = []
    real = subreaper.child_pids
    subreaper.child_pids = lambda: scans.append(1) or real()
    assert process_tree.become_subreaper(reap_interval=0.02)
    time.sleep(0.5)
    idle = len(scans)
    request = TurnRequest(turn_id="busy", session_id="s", generation=1, attempt=1,
                          kind=TurnKind.START, instructions="", workspace=Path(sys.argv[1]))
    run = SubprocessHost({"command": ["sleep", "0.5"]}).start(request)
    run.wait(20)
    busy = len(scans) - idle
    time.sleep(0.3)
    print(json.dumps({"idle": idle, "busy": busy, "after": len(scans) - idle - busy}))
    """
)


def test_the_reaper_scans_only_while_a_turn_is_in_flight(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", IDLE_THEN_BUSY, str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "TURNKEEPER_CONTAINMENT": "subreaper"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    counts = json.loads(done.stdout)
    # 25 intervals idle and 15 after the turn: no scan. Half a second in flight: scans.
    assert counts["idle"] == 0
    assert counts["busy"] >= 5
    assert counts["after"] == 0


CGROUP_TURN = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from turnkeeper.hosts import TurnKind, TurnRequest, process_tree, subreaper
    from turnkeeper.hosts.subprocess_host import SubprocessHost
    scans = []
    real = subreaper.child_pids
    subreaper.child_pids = lambda: scans.append(1) or real()
    assert process_tree.become_subreaper(reap_interval=0.02)
    ws = Path(sys.argv[1])
    request = TurnRequest(turn_id=sys.argv[2], session_id="s", generation=1, attempt=1,
                          kind=TurnKind.START, instructions="", workspace=ws)
    # The host leaves an orphan (adopted by us) that ends while the turn runs on.
    script = "(setsid sh -c 'echo $$ > orphan; sleep 0.2' &); sleep 1.5"
    run = SubprocessHost({"command": ["sh", "-c", script]}).start(request)
    deadline = time.monotonic() + 1.2
    while not (ws / "orphan").exists() or not (ws / "orphan").read_text().strip():
        time.sleep(0.01)
    orphan = int((ws / "orphan").read_text())
    while process_tree.read_stat(orphan) is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    reaped = process_tree.read_stat(orphan) is None
    outcome = run.wait(20)
    print(json.dumps({"containment": outcome.containment, "reaped_in_flight": reaped,
                      "scans": len(scans)}))
    """
)


@pytest.mark.skipif(cgroups.unavailable_reason() is not None, reason="no writable cgroup2 here")
def test_a_cgroup_turn_needs_no_scans_and_its_dead_orphans_are_still_reaped(
    tmp_path: Path,
) -> None:
    turn_id = f"cg-orphan-{os.getpid()}-{random.randrange(1_000_000)}"
    try:
        done = subprocess.run(
            [sys.executable, "-c", CGROUP_TURN, str(tmp_path), turn_id],
            cwd=REPO,
            env={**os.environ, "TURNKEEPER_CONTAINMENT": "cgroup"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        process_tree.kill_turn_processes(turn_id)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout)
    assert out["containment"] == "cgroup"
    assert out["reaped_in_flight"]  # a dead child showed, and was reaped
    # 75 intervals in flight: a scan for the dead orphan (and any other child that
    # died meanwhile), not one each interval.
    assert out["scans"] <= 5
