"""A run of many short turns outlasts its lease only if the control loop renews it."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

from tests.runtime.inprocess_host import InProcessHost
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.runtime.controller import Controller, ControllerConfig
from turnkeeper.runtime.goals import GoalService
from turnkeeper.runtime.sessions import SessionService
from turnkeeper.store import open_store


def test_short_turns_for_longer_than_the_lease_keep_running(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=workspace, check=True)
    store = open_store(tmp_path / "tk.db")
    try:
        goals = GoalService(store)
        goals.create(CreateGoal(goal_id="g", title="never done"))
        goals.submit("g", AddTodo(todo=TodoSpec(todo_id="t0", title="todo 0")))
        session = SessionService(store).create("g", workspace, "inprocess")
        host = InProcessHost()
        lease = 1.0
        controller = Controller(
            store, ControllerConfig(lease_seconds=lease, max_turns=10_000, host_loader=host.loader)
        )
        # Stop once the run has lasted three leases: without renewal between turns
        # the first expiry would fence the controller off with ABORTED lease_expired.
        stopper = _stop_after(controller, seconds=3 * lease)
        summary = controller.run([session.session_id])
        stopper.join()
        assert summary.failed_turns == 0
        assert summary.stops == {session.session_id: "signalled"}
        assert summary.turns > 0
        renewals = [
            r
            for r in store.read_stream(f"session:{session.session_id}")
            if r.type == "session.lease_renewed"
        ]
        assert len(renewals) >= 2
    finally:
        store.close()


def _stop_after(controller: Controller, seconds: float) -> threading.Thread:
    def stop() -> None:
        time.sleep(seconds)
        controller.request_stop()

    thread = threading.Thread(target=stop, daemon=True)
    thread.start()
    return thread
