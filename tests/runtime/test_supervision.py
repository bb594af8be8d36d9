"""Supervised background loops (turnkeeper/supervision.py) and where a controller
publishes them for ``status`` (runtime/control/controller_health.py).

A loop whose step raises is logged, marked down (since when, with what error), run
again after a bounded pause, and up again once a step succeeds; one whose thread ends
anyway is replaced by the next ``ensure_running``; one that idles out ends and starts
again. A controller's file says all that while it lives, is ignored once its process
is dead, and is gone after a clean exit.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from turnkeeper.errors import Unavailable
from turnkeeper.runtime.control.controller_health import (
    HealthFile,
    health_dir,
    read_controller_health,
)
from turnkeeper.runtime.control.controller_identity import controller_owner, owner_name
from turnkeeper.runtime.turn.run_progress import RunRecord
from turnkeeper.supervision import HealthRegistry, Supervised

BOUND = 10.0


def _eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.005)


class _Steps:
    """A step that raises ``failure`` while ``failing``, counting its runs."""

    def __init__(self, failure: BaseException | None = None) -> None:
        self.failure = failure
        self.failing = failure is not None
        self.runs = 0
        self.go_on = True

    def __call__(self, loop: Supervised) -> bool:
        self.runs += 1
        if self.failing and self.failure is not None:
            raise self.failure
        if loop.wait(0.005):
            return False
        return self.go_on


def test_a_step_that_raises_is_logged_marked_down_and_run_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = HealthRegistry()
    steps = _Steps(RuntimeError("a bug in the step"))
    loop = Supervised("poller", steps, registry=registry, backoff_seconds=0.001)
    with caplog.at_level(logging.ERROR, logger="turnkeeper.supervision"):
        loop.ensure_running()
        _eventually(lambda: steps.runs >= 3, "the step run again after failing")
    down = loop.health()
    assert (down.state, down.last_error) == ("down", "RuntimeError: a bug in the step")
    assert down.down_since is not None and down.restarts >= 2
    assert [h.name for h in registry.snapshot()] == ["poller"]
    # Logged once with its traceback, not once per failure.
    logged = [r for r in caplog.records if "poller failed" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert "lease" not in down.describe() and "poller down since" in down.describe()
    steps.failing = False
    _eventually(lambda: loop.health().state == "up", "up once a step succeeds")
    assert loop.health().down_since is None and loop.health().last_error is not None
    assert loop.stop(BOUND)
    assert loop.health().state == "stopped" and registry.snapshot() == []


def test_the_pause_between_failures_doubles_up_to_its_bound() -> None:
    steps = _Steps(Unavailable("the database system is starting up"))
    loop = Supervised(
        "keeper", steps, registry=HealthRegistry(), backoff_seconds=0.05, max_backoff_seconds=0.1
    )
    started = time.monotonic()
    loop.ensure_running()
    _eventually(lambda: steps.runs >= 5, "five failures")
    # 0.05 + 0.1 + 0.1 + 0.1 at least between the five runs: paced, never a spin.
    assert time.monotonic() - started >= 0.34
    assert loop.health().last_error == (
        "UNAVAILABLE (unavailable): the database system is starting up"
    )
    loop.stop(BOUND)


def test_a_fault_the_step_survived_keeps_the_loop_down_until_it_is_healthy() -> None:
    registry = HealthRegistry()
    loop = Supervised("keeper", _Steps(), registry=registry)
    loop.ensure_running()
    _eventually(lambda: loop.health().state == "up", "up")
    loop.fault(Unavailable("away"))
    assert loop.health().state == "down" and loop.running()
    loop.healthy()
    assert loop.health().state == "up" and loop.health().failures == 1
    loop.stop(BOUND)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_thread_that_dies_is_replaced_by_the_next_start() -> None:
    registry = HealthRegistry()
    steps = _Steps(SystemExit(3))  # nothing may catch it: the thread ends with it
    loop = Supervised("keeper", steps, registry=registry)
    loop.ensure_running()
    _eventually(lambda: not loop.running(), "the thread died")
    assert loop.health().state == "down" and steps.runs == 1
    assert [h.state for h in registry.snapshot()] == ["down"]  # shown while down
    steps.failing = False
    loop.ensure_running()
    _eventually(lambda: loop.health().state == "up", "a new thread, up")
    assert steps.runs > 1
    loop.stop(BOUND)


def test_a_loop_with_nothing_to_do_ends_and_starts_again() -> None:
    registry = HealthRegistry()
    steps = _Steps()
    steps.go_on = False
    loop = Supervised("keeper", steps, registry=registry)
    loop.ensure_running()
    _eventually(lambda: not loop.running(), "idled out")
    assert loop.health().state == "idle" and registry.snapshot() == []
    runs = steps.runs
    loop.ensure_running()
    _eventually(lambda: steps.runs > runs and not loop.running(), "ran again")


def test_asked_to_run_while_ending_it_runs_on() -> None:
    """An ``ensure_running`` while the last step decides to end is never lost: either
    the thread sees it and runs another step, or it has gone and a new one starts."""
    registry = HealthRegistry()
    work = threading.Event()
    done = threading.Event()

    def step(loop: Supervised) -> bool:
        if work.is_set():
            work.clear()
            done.set()
        return False  # nothing more to do after this step

    loop = Supervised("keeper", step, registry=registry)
    for _ in range(300):
        done.clear()
        work.set()
        loop.ensure_running()
        assert done.wait(BOUND)


def test_a_listener_hears_every_change() -> None:
    registry = HealthRegistry()
    heard: list[list[str]] = []
    unsubscribe = registry.subscribe(lambda: heard.append([h.state for h in registry.snapshot()]))
    steps = _Steps(RuntimeError("boom"))
    loop = Supervised("keeper", steps, registry=registry, backoff_seconds=0.001)
    loop.ensure_running()
    _eventually(lambda: ["down"] in heard, "told it went down")
    steps.failing = False
    _eventually(lambda: heard[-1] == ["up"], "told it is up again")
    loop.stop(BOUND)
    assert heard[-1] == []  # stopped: no longer shown
    unsubscribe()


# --- the controller's file ----------------------------------------------------------


def test_a_controllers_file_says_what_is_down_and_goes_at_exit(tmp_path: Path) -> None:
    registry = HealthRegistry()
    records: list[RunRecord] = []
    steps = _Steps(Unavailable("the database system is starting up"))
    owner = controller_owner()
    health = HealthFile(tmp_path, owner, "worker", report=records.append, registry=registry)
    health.open()
    loop = Supervised("lease keeper", steps, registry=registry, backoff_seconds=0.01)
    loop.ensure_running()
    _eventually(lambda: any(r.fields.get("event") == "thread_down" for r in records), "reported")
    (found,) = read_controller_health(tmp_path)
    assert (found.pid, found.owner, found.role) == (os.getpid(), owner, "worker")
    (line,) = found.describe_down()
    assert line.startswith(f"worker {os.getpid()}: lease keeper down since ")
    assert "(error: UNAVAILABLE (unavailable): the database system is starting up)" in line
    on_disk = json.loads((health_dir(tmp_path) / f"{os.getpid()}.json").read_text())
    assert on_disk["threads"][0]["state"] == "down"
    steps.failing = False
    _eventually(lambda: any(r.fields.get("event") == "thread_up" for r in records), "back up")
    assert read_controller_health(tmp_path)[0].down() == []
    loop.stop(BOUND)
    health.close()
    assert read_controller_health(tmp_path) == []
    assert list(health_dir(tmp_path).iterdir()) == []  # no file, no temporary left


def test_the_file_of_a_dead_controller_is_ignored_and_cleared(tmp_path: Path) -> None:
    # A real process that ended: its pid names nobody (or someone else) now.
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    dead_owner = owner_name(int(gone.stdout), 1)
    folder = health_dir(tmp_path)
    folder.mkdir()
    stale = {
        "pid": int(gone.stdout),
        "owner": dead_owner,
        "role": "worker",
        "started_at": "2026-01-01T00:00:00Z",
        "written_at": "2026-01-01T00:00:00Z",
        "threads": [{"name": "lease keeper", "state": "down", "last_error": "x"}],
    }
    (folder / f"{gone.stdout.strip()}.json").write_text(json.dumps(stale))
    (folder / "garbage.json").write_text("{not json")
    assert read_controller_health(tmp_path) == []  # dead, or unreadable: skipped
    health = HealthFile(tmp_path, controller_owner(), "run", registry=HealthRegistry()).open()
    try:
        # The next controller to start clears the dead one's file.
        assert not (folder / f"{gone.stdout.strip()}.json").exists()
        assert [c.pid for c in read_controller_health(tmp_path)] == [os.getpid()]
    finally:
        health.close()
