"""A run of many short turns outlasts its lease only if the control loop renews it.

These two run on the real clock on purpose: a lease expires by the store's wall time,
and what they check is the whole control loop as ``run`` drives it, across real
leases. The keeper's own timing (once a period, never after, refusals, idling out) is
tested on an injected clock, without sleeping, in ``test_lease_keeper.py``.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.runtime.inprocess_host import InProcessHost
from turnkeeper.hosts import TurnRequest
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import ProgressPolicy
from turnkeeper.runtime.control.controller import Controller, ControllerConfig
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService
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
        config = ControllerConfig(
            lease_seconds=lease,
            max_turns=10_000,
            host_loader=host.loader,
            # The host completes nothing on purpose: this is about leases, not progress.
            progress=ProgressPolicy(max_turns_without_progress=1_000_000),
        )
        controller = Controller(store, config)
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


def _slow_work(seconds: float) -> Callable[[TurnRequest], dict[str, Any]]:
    """A turn that works for ``seconds`` before its events arrive."""

    def work(request: TurnRequest) -> dict[str, Any]:
        time.sleep(seconds)
        return {"summary": "slow work"}

    return work


def test_a_host_running_for_several_leases_keeps_its_session(tmp_path: Path) -> None:
    """While a host runs, the driver's lease keeper renews the session's lease: a turn
    three leases long completes instead of being fenced off with ``lease_expired``."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store = open_store(tmp_path / "tk.db")
    try:
        goals = GoalService(store)
        goals.create(CreateGoal(goal_id="g", title="one slow turn"))
        goals.submit("g", AddTodo(todo=TodoSpec(todo_id="t0", title="todo 0")))
        session = SessionService(store).create("g", workspace, "inprocess")
        lease = 0.6
        host = InProcessHost(result_for=_slow_work(3 * lease))
        controller = Controller(
            store, ControllerConfig(lease_seconds=lease, max_turns=2, host_loader=host.loader)
        )
        summary = controller.run([session.session_id])
        assert summary.failed_turns == 0
        assert summary.turns == 2
        records = list(store.read_stream(f"session:{session.session_id}"))
        types = [r.type for r in records]
        assert types.count("turn.completed") == 2
        # Each turn spans three leases, so the keeper renewed at least twice per turn
        # while its host ran: between the turn's acceptance and its receipt (the host's
        # start is journaled with its first events, after the renewals).
        first = types.index("turn.accepted")
        receipt = types.index("turn.receipt_recorded", first)
        assert types[first:receipt].count("session.lease_renewed") >= 2
        assert types.index("turn.host_started", first) < receipt
    finally:
        store.close()
