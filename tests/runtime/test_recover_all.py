"""Restart recovery of many sessions at once (``Controller._recover_all``).

Several sessions each have a turn in flight whose controller died: the turn was
accepted and its host started "in" a process this test started and SIGKILLed,
then the driver was unwound mid-turn (``CrashAfterStartHost``), exactly the state
a SIGKILLed control plane leaves. One ``Controller.run()`` in this process must
take every lease over from the dead controller, mark every turn lost exactly
once and write every session's recovery report — and one session failing must
neither stop the others' recovery nor be swallowed.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from benchmarks.noop_host import CrashAfterStartHost, NoopHost, SimulatedCrash
from tests.runtime.git_calls import git
from turnkeeper.hosts import process_tree
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import NextTurn, plan_next_turn
from turnkeeper.runtime.control.controller import Controller, ControllerConfig
from turnkeeper.runtime.control.controller_identity import owner_name
from turnkeeper.runtime.services.folder import kernel_folder
from turnkeeper.runtime.services.sessions import SESSION_CODEC, SessionService, session_stream
from turnkeeper.runtime.turn.planning import goal_view
from turnkeeper.store import SqlEventStore

SESSIONS = 5
LEASE_SECONDS = 600.0  # long enough that only a takeover can move these leases


@pytest.fixture
def dead() -> tuple[int, int]:
    """(pid, start time) of a process this test started, SIGKILLed and reaped."""
    proc = subprocess.Popen(["sleep", "600"])
    try:
        identity = process_tree.identify(proc.pid, "recover-all-test")
    finally:
        proc.send_signal(signal.SIGKILL)  # our own child, by its pid
        proc.wait()
    return identity.pid, identity.start_time


@dataclass
class Crashed:
    sessions: list[str]
    turns: dict[str, str]  # session id -> the turn left in flight
    dead_owner: str
    epochs: dict[str, int] = field(default_factory=dict)  # the dead controller's leases


def crash_turns(store: SqlEventStore, workspace: Path, dead: tuple[int, int], n: int) -> Crashed:
    """``n`` sessions, each with a turn in flight under a controller that is dead."""
    owner = owner_name(*dead)
    host = CrashAfterStartHost(dead_pid=dead[0], dead_start_time=dead[1])
    config = ControllerConfig(lease_seconds=LEASE_SECONDS, host_loader=host.loader)
    ctl = Controller(store, config, owner=owner)
    crashed = Crashed(sessions=[], turns={}, dead_owner=owner)
    for i in range(n):
        goal_id = f"goal-{i}"
        ctl.goals.create(CreateGoal(goal_id=goal_id, title=f"goal {i}"))
        ctl.goals.submit(goal_id, AddTodo(todo=TodoSpec(todo_id=f"todo-{i}", title="work")))
        sid = ctl.sessions.create(goal_id, workspace, host.kind).session_id
        crashed.epochs[sid] = ctl.acquire(sid).epoch
        session = ctl.sessions.load(sid)
        now = ctl.sessions.now()
        plan = plan_next_turn(session, goal_view(ctl.goals.load(goal_id), session, now), now)
        assert isinstance(plan, NextTurn), plan
        with pytest.raises(SimulatedCrash):
            ctl.driver.run_turn(session, plan)
        in_flight = ctl.sessions.load(sid).in_flight
        assert in_flight is not None and in_flight.phase == "host_started"
        crashed.sessions.append(sid)
        crashed.turns[sid] = in_flight.envelope.turn_id
    assert host.started == list(crashed.turns.values())
    return crashed


def types(store: SqlEventStore, sid: str) -> list[str]:
    return [r.type for r in store.read_stream(session_stream(sid))]


def events_of(store: SqlEventStore, sid: str, kind: str) -> list[dict[str, object]]:
    records = [r for r in store.read_stream(session_stream(sid)) if r.type == kind]
    return [SESSION_CODEC.decode_event(r).model_dump(mode="json") for r in records]


def restart(store: SqlEventStore, messages: list[str]) -> Controller:
    """A fresh controller of this (live) process that stops right after recovery."""
    lock = threading.Lock()

    def progress(line: str) -> None:
        with lock:  # called from the recovery threads
            messages.append(line)

    host = NoopHost()  # never started: the run stops before any new turn
    config = ControllerConfig(lease_seconds=LEASE_SECONDS, host_loader=host.loader)
    ctl = Controller(store, config, progress=progress)
    ctl.request_stop()  # as a signal would: recover, then run no turn
    return ctl


def assert_recovered_once(store: SqlEventStore, crashed: Crashed, sid: str, owner: str) -> None:
    turn_id = crashed.turns[sid]
    lost = events_of(store, sid, "turn.lost")
    assert [e["turn_id"] for e in lost] == [turn_id], sid
    assert lost[0]["cause"] == "lost_on_restore"
    reports = events_of(store, sid, "session.recovery_reported")
    assert len(reports) == 1, sid
    report = reports[0]["report"]
    assert isinstance(report, dict)
    actions = [(a["kind"], a["turn_id"]) for a in report["actions"]]
    assert ("turn_marked_lost", turn_id) in actions
    probes = report["probed"]["host_processes"]
    assert [p["alive"] for p in probes] == [False]  # the dead host, proven gone
    # The lease was taken over from the dead controller by the restarted one.
    acquired = events_of(store, sid, "session.lease_acquired")
    first = acquired[0]
    assert (first["owner"], first["epoch"]) == (crashed.dead_owner, crashed.epochs[sid])
    assert acquired[-1]["owner"] == owner
    assert int(str(acquired[-1]["epoch"])) > crashed.epochs[sid]
    kinds = types(store, sid)
    takeover_at = max(i for i, kind in enumerate(kinds) if kind == "session.lease_acquired")
    assert takeover_at < kinds.index("turn.lost")  # taken over first, then marked lost
    assert SessionService(store).load(sid).in_flight is None


def test_one_run_recovers_every_session_once(
    store: SqlEventStore, tmp_path: Path, dead: tuple[int, int]
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    git(workspace, "init", "-q")
    crashed = crash_turns(store, workspace, dead, SESSIONS)

    messages: list[str] = []
    ctl = restart(store, messages)
    summary = ctl.run(crashed.sessions)

    assert summary.turns == 0
    assert summary.stops == dict.fromkeys(crashed.sessions, "signalled")
    for sid in crashed.sessions:
        assert_recovered_once(store, crashed, sid, ctl.owner)
        recovered = [m for m in messages if m.startswith(f"session {sid[:8]}: recovered")]
        assert len(recovered) == 1, messages
        assert "turn_marked_lost" in recovered[0]
        # The run's end released what it took.
        assert types(store, sid)[-1] == "session.lease_released"
    takeovers = [m for m in messages if m.startswith("taking over the lease of dead controller")]
    assert len(takeovers) == SESSIONS
    assert store.verify(kernel_folder()).ok

    # A second restart finds nothing left to recover: still one loss per turn.
    again = restart(store, [])
    again.run(crashed.sessions)
    for sid in crashed.sessions:
        assert len(events_of(store, sid, "turn.lost")) == 1
        reports = events_of(store, sid, "session.recovery_reported")
        assert len(reports) == 2
        second = reports[1]["report"]
        assert isinstance(second, dict)
        assert [a["kind"] for a in second["actions"]] == ["nothing_to_do"]


def test_a_session_another_controller_holds_is_left_to_it_and_the_others_recover(
    store: SqlEventStore, tmp_path: Path, dead: tuple[int, int]
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    git(workspace, "init", "-q")
    crashed = crash_turns(store, workspace, dead, SESSIONS)
    # A session whose live lease belongs to a controller on another machine: no
    # proof of its death is possible here, so it is that controller's to drive. It is
    # first in line, so recovering one session after the other and stopping at the
    # first refusal would leave all the rest unrecovered.
    other_machine = Controller(
        store,
        ControllerConfig(lease_seconds=LEASE_SECONDS),
        owner="ctl:another-machine.example:boot:4026531836:4242:4242",
    )
    other_machine.goals.create(CreateGoal(goal_id="goal-held", title="held elsewhere"))
    blocked = other_machine.sessions.create("goal-held", workspace, "noop").session_id
    other_machine.acquire(blocked)
    before = types(store, blocked)

    messages: list[str] = []
    ctl = restart(store, messages)
    summary = ctl.run([blocked, *crashed.sessions])
    assert summary.stops[blocked] == "lease_held"
    assert summary.reasons[blocked] == other_machine.owner

    for sid in crashed.sessions:
        assert_recovered_once(store, crashed, sid, ctl.owner)
        assert types(store, sid)[-1] == "session.lease_released"  # not left held
    assert types(store, blocked) == before  # untouched: still the other machine's
    assert len([m for m in messages if ": recovered (" in m]) == SESSIONS
    assert store.verify(kernel_folder()).ok
