"""Process trees through the real controller: a turn leaves no process behind.

The scripted agent starts ``sleep 600`` in a process session of its own (as agent
CLIs' shell tools do), so killing the agent alone would leave it running. After
the agent SIGKILLs itself, or hangs until the host timeout ends it, no process
carrying the turn's marker may be left, and the sleep must be gone.

Only processes this test started are ever signalled: cleanup ends processes by
the markers of this test's own turns.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from turnkeeper.hosts import process_tree
from turnkeeper.hosts.scripted_agent import PAUSE_DIR
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import HostEventsJournaled, event_from_json
from turnkeeper.kernel.session.records import ReceiptFailure
from turnkeeper.runtime.control.controller import Controller, ControllerConfig, RunSummary
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService, session_stream
from turnkeeper.store import open_store
from turnkeeper.store.sql import SqlEventStore

PAUSE = "armed"
SLEEP = "sleep 600"


def _wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def _live_marked(turn_id: str) -> list[int]:
    """Every live (not zombie) process whose environ carries ``turn_id`` as its marker."""
    return sorted(
        pid
        for pid, stat in process_tree.process_table().items()
        if not stat.dead and process_tree.read_marker(pid) == turn_id
    )


def _gone(pid: int, start_time: int) -> bool:
    stat = process_tree.read_stat(pid)
    return stat is None or stat.start_time != start_time or stat.dead


@dataclass
class Rig:
    workspace: Path
    store: SqlEventStore
    sessions: SessionService
    session_id: str
    turn_ids: list[str] = field(default_factory=list)

    def in_flight_turn(self) -> str | None:
        turn = self.sessions.load(self.session_id).in_flight
        return None if turn is None else turn.envelope.turn_id


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[Callable[[list[dict[str, Any]]], Rig]]:
    rigs: list[Rig] = []

    def make(steps: list[dict[str, Any]]) -> Rig:
        root = tmp_path / f"rig{len(rigs)}"
        workspace = root / "ws"
        workspace.mkdir(parents=True)
        subprocess.run(["git", "init", "-q"], cwd=workspace, check=True)
        store = open_store(root / "tk.db")
        goals = GoalService(store)
        sessions = SessionService(store)
        goals.create(CreateGoal(goal_id="g", title="process trees"))
        goals.submit("g", AddTodo(todo=TodoSpec(todo_id="t1", title="spawn and die")))
        config = {
            "state_dir": str(root / "host-state"),
            "script": {"turns": [{"match": {"todo": "spawn and die"}, "steps": steps}]},
        }
        session = sessions.create("g", workspace, "scripted", config)
        rig = Rig(workspace, store, sessions, session.session_id)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        (rig.workspace / PAUSE_DIR / PAUSE).unlink(missing_ok=True)
        # A test that failed early may not have noted its turn: ask the log too.
        state = rig.sessions.load(rig.session_id)
        ends = [state.last_turn_end.turn_id] if state.last_turn_end else []
        for turn_id in {*rig.turn_ids, *ends, rig.in_flight_turn()} - {None}:
            assert turn_id is not None
            # Only processes carrying this test's own turn markers (and their trees).
            process_tree.kill_turn_processes(turn_id)
        rig.store.close()


class ControllerThread:
    """``Controller.run`` in a thread, so the test can look at the turn while it runs."""

    def __init__(self, rig: Rig, config: ControllerConfig) -> None:
        self.summary: RunSummary | None = None
        self.error: BaseException | None = None
        self._controller = Controller(rig.store, config)
        self._session_id = rig.session_id
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.summary = self._controller.run([self._session_id])
        except BaseException as exc:  # re-raised in the test thread by join()
            self.error = exc

    def join(self, timeout: float) -> RunSummary:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the controller did not finish in {timeout}s"
        if self.error is not None:
            raise self.error
        assert self.summary is not None
        return self.summary


@dataclass(frozen=True)
class Seen:
    turn_id: str
    sleep_pids: list[int]
    identities: dict[int, int]  # pid -> start time of every marked process


def _arm(rig: Rig) -> Seen:
    """Wait for the agent's pause checkpoint; note every process of the turn; let it go on."""
    pause = rig.workspace / PAUSE_DIR / PAUSE
    _wait_until(pause.exists, 30, "the agent to reach its checkpoint")
    turn_id = rig.in_flight_turn()
    assert turn_id is not None
    rig.turn_ids.append(turn_id)
    # The detached shell starts before the checkpoint; give it a moment to start sleep.
    _wait_until(
        lambda: any(process_tree.read_cmdline(p) == SLEEP for p in _live_marked(turn_id)),
        10,
        "the detached sleep",
    )
    marked = _live_marked(turn_id)
    identities: dict[int, int] = {}
    for pid in marked:
        stat = process_tree.read_stat(pid)
        assert stat is not None
        identities[pid] = stat.start_time
    sleep_pids = [p for p in marked if process_tree.read_cmdline(p) == SLEEP]
    agents = [
        p for p in marked if "turnkeeper.hosts.scripted_agent" in process_tree.read_cmdline(p)
    ]
    assert sleep_pids and len(agents) == 1, [process_tree.read_cmdline(p) for p in marked]
    agent = process_tree.read_stat(agents[0])
    for pid in sleep_pids:
        stat = process_tree.read_stat(pid)
        assert stat is not None and agent is not None
        # In a process session of its own: ending the agent's session would miss it.
        assert stat.session != agent.session
    pause.unlink()
    return Seen(turn_id=turn_id, sleep_pids=sleep_pids, identities=identities)


def _journaled_command_pids(rig: Rig, turn_id: str) -> list[int]:
    pids: list[int] = []
    for record in rig.store.read_stream(session_stream(rig.session_id)):
        event = event_from_json(record.payload)
        if isinstance(event, HostEventsJournaled) and event.turn_id == turn_id:
            for host_event in event.events:
                if host_event.kind == "command":
                    pid = host_event.data["pid"]
                    assert isinstance(pid, int)
                    pids.append(pid)
    return pids


def _assert_nothing_left(rig: Rig, seen: Seen) -> None:
    assert _live_marked(seen.turn_id) == []
    for pid, start_time in seen.identities.items():
        assert _gone(pid, start_time), f"pid {pid} ({process_tree.read_cmdline(pid)}) survived"
    # The detached shell the agent reported in its own output is gone as well (a pid
    # recycled since would not carry this turn's marker).
    reported = _journaled_command_pids(rig, seen.turn_id)
    assert len(reported) == 1
    stat = process_tree.read_stat(reported[0])
    assert stat is None or stat.dead or process_tree.read_marker(reported[0]) != seen.turn_id
    # The orphaned sleep was adopted by the controller's process and reaped, not left
    # behind as a zombie.
    _wait_until(
        lambda: all(
            (s := process_tree.read_stat(pid)) is None or s.start_time != seen.identities[pid]
            for pid in seen.sleep_pids
        ),
        10,
        "the sleep to be reaped",
    )


def _failed_receipt(rig: Rig, turn_id: str) -> ReceiptFailure:
    receipt = rig.sessions.receipt_event(rig.session_id, turn_id).receipt
    assert isinstance(receipt, ReceiptFailure)
    return receipt


STEPS_BEFORE_FAULT: list[dict[str, Any]] = [
    {"op": "shell", "command": SLEEP, "detach": True},
    {"op": "checkpoint", "name": PAUSE, "pause": True},
]


def test_agent_killing_itself_leaves_no_process(
    make_rig: Callable[[list[dict[str, Any]]], Rig],
) -> None:
    rig = make_rig([*STEPS_BEFORE_FAULT, {"op": "kill_self"}])
    run = ControllerThread(rig, ControllerConfig(max_turns=1))
    seen = _arm(rig)
    summary = run.join(60)
    assert (summary.turns, summary.failed_turns) == (1, 1)

    receipt = _failed_receipt(rig, seen.turn_id)
    assert (receipt.error_kind, receipt.signal) == ("signal", 9)
    assert receipt.host_recovery.binding.turn_id == seen.turn_id
    _assert_nothing_left(rig, seen)


def test_host_timeout_leaves_no_process(
    make_rig: Callable[[list[dict[str, Any]]], Rig],
) -> None:
    rig = make_rig([*STEPS_BEFORE_FAULT, {"op": "hang"}])
    run = ControllerThread(rig, ControllerConfig(max_turns=1, host_timeout_seconds=5))
    seen = _arm(rig)
    assert _live_marked(seen.turn_id), "the hung agent and its sleep run until the timeout"
    summary = run.join(60)
    assert (summary.turns, summary.failed_turns) == (1, 1)

    receipt = _failed_receipt(rig, seen.turn_id)
    assert receipt.error_kind == "timeout"  # ended by the timeout, not by anything else
    assert "exceeded 5" in receipt.message
    _assert_nothing_left(rig, seen)
