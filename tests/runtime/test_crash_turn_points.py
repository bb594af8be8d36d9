"""The real control plane SIGKILLed at every durable boundary of the turn transaction.

For each name in ``TURN_POINTS`` (but the effect points of step 6) the control
plane (``turnkeeper run --json``, a subprocess) dies by its own SIGKILL on the
first turn of todo ``t2`` (the second turn of the run; turn 1 on ``t1`` completed
normally), then runs again without the crash variable. Each case checks the
recovery table row for that point — how often the host ran, what was recorded,
what restart did — and the invariants: every accepted turn ends exactly once (1),
no lost/failed host step runs again (2), contiguous checksummed streams whose
projections equal their folds (4, 5). Every case runs on each backend: the project's
store is its SQLite file, or a PostgreSQL database of its own (``crash_support.databases``).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.runtime.crash_support import (
    BACKENDS,
    CRASH_PAUSED_ON_T2,
    SQLITE,
    TITLE_B,
    TODO_A,
    TODO_B,
    CliResult,
    CrashProject,
    ProjectFactory,
    RunSnapshot,
    TurnHistory,
    assert_finished_intact,
    assert_left_paused_mid_turn,
    assert_written_back_once,
    bound_then_silent_turn,
    paused_on_t2_script,
    run_side_by_side_on_backends,
    snapshot,
    standard_script,
)
from turnkeeper.crashpoints import TURN_POINTS

# Where the crash lands: the n-th hit of the point in the crashing process is the
# first turn on t2 (turn 1 on t1 hit every point once; host.events twice).
CRASH_AT = {
    "turn.accepted": "turn.accepted@2",
    "host.spawned": "host.spawned@2",
    "host.started": "host.started@2",
    "host.events": CRASH_PAUSED_ON_T2,
    "receipt": "receipt@2",
    "written_back": "written_back@2",
    "completed": "completed@2",
}
# The in-flight phase each point leaves in the log (None: the turn already ended).
PHASE_LEFT = {
    "turn.accepted": "accepted",
    "host.spawned": "accepted",
    "host.started": "host_started",
    "host.events": "host_started",
    "receipt": "receipt",
    "written_back": "written_back",
    "completed": None,
}
# Rows of the recovery table: no receipt -> lost + continuation; receipt -> write back.
LOST_POINTS = frozenset({"turn.accepted", "host.spawned", "host.started", "host.events"})
# How often the killed turn's host had run when the control plane died, as a set of
# possible counts. At host.spawned the host process exists, but the control plane
# hands it its request on stdin from a writer thread: a kill that lands before that
# thread ran leaves a host with no request, which exits without running a step (and
# without a line in runs.jsonl). At host.started the same holds when the start was
# journaled alone, after a second of silence (a loaded machine). Either way it never
# runs after the crash.
RUNS_AT_CRASH = {
    "turn.accepted": {0},
    "host.spawned": {0, 1},
    "host.started": {0, 1},
    "host.events": {1},
    "receipt": {1},
    "written_back": {1},
    "completed": {1},
}


# Step 6 (effects) needs a turn that asks for effects and a provider to run them: those
# points are the effects suite's. Every other point of the transaction is covered here.
EFFECT_POINTS = tuple(p for p in TURN_POINTS if p.startswith("effect."))
POINTS = tuple(p for p in TURN_POINTS if p not in EFFECT_POINTS)


def test_every_turn_point_has_a_case() -> None:
    assert set(CRASH_AT) == set(POINTS) == set(PHASE_LEFT) == set(RUNS_AT_CRASH)


def _crash(project: CrashProject, point: str) -> tuple[TurnHistory, dict[int, str]]:
    """Kill the control plane at ``point``; return the killed turn and its survivors."""
    project.run_control_plane(crash_at=CRASH_AT[point])
    turns = project.turns()
    first, killed = list(turns.values())
    assert first.todo_id == TODO_A
    assert first.terminals == ["turn.completed"]
    assert killed.todo_id == TODO_B
    assert (killed.attempt, killed.envelope["kind"]) == (1, "start")
    session = project.session()
    in_flight = session.in_flight
    if PHASE_LEFT[point] is None:
        assert in_flight is None
        assert killed.terminals == ["turn.completed"]
    else:
        assert in_flight is not None
        assert in_flight.envelope.turn_id == killed.turn_id
        assert in_flight.phase == PHASE_LEFT[point]
        assert killed.terminals == []
    said_nothing = point == "host.spawned" or (
        # The start is journaled with the host's first event (its session bound), or
        # alone once the host has been silent for a second (a loaded machine).
        point == "host.started" and in_flight is not None and in_flight.last_host_seq == 0
    )
    if said_nothing:
        # Killed before the host emitted anything: it exits at its first event (its
        # stdout pipe has no reader). Wait for that, so the count below is final.
        project.wait_for_orphans(killed.turn_id)
    survivors = project.live_processes([killed.turn_id])
    runs = project.run_counts()
    assert runs[first.turn_id] == 1
    assert runs[killed.turn_id] in RUNS_AT_CRASH[point]
    if point == "host.events":
        # Paused mid-turn: the host and its setsid `sleep 600` outlived the control plane.
        assert_left_paused_mid_turn(session, project.runs(), survivors, killed.turn_id)
        assert project.pause_file.exists()
    elif point == "host.started" and not said_nothing:
        # Killed right after the host's start was journaled with its first event (the
        # session bound): the host sleeps on without a word, alive for the restart to
        # end, and nothing else of the project runs.
        assert in_flight is not None and in_flight.last_host_seq == 1
        host_pid = next(r["pid"] for r in project.runs() if r["turn_id"] == killed.turn_id)
        assert survivors == {host_pid: killed.turn_id}
    else:
        assert survivors == {}
    return killed, survivors


@dataclass
class Outcome:
    project: CrashProject
    killed: TurnHistory
    survivors: dict[int, str]
    after_crash: RunSnapshot
    restarted: CliResult


def _scenario(factory: ProjectFactory, root: Path, point: str) -> Outcome:
    if point == "host.started":
        script = standard_script(bound_then_silent_turn(TITLE_B))
    else:
        script = paused_on_t2_script() if point in LOST_POINTS else standard_script()
    project = factory.make(root, script)
    killed, survivors = _crash(project, point)
    after_crash = snapshot(project)
    restarted = project.run_control_plane()
    return Outcome(project, killed, survivors, after_crash, restarted)


@pytest.fixture(scope="module")
def outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[tuple[str, str], Future[Outcome]]]:
    """Every selected (backend, crash point) scenario, run side by side (each its own
    project)."""
    with run_side_by_side_on_backends(request, tmp_path_factory, "point", _scenario) as running:
        yield running


def _check_lost_row(point: str, outcome: Outcome, turns: dict[str, TurnHistory]) -> None:
    """No receipt: the turn is lost on restore, its host not replayed; a continuation
    resumes the host session with a reconcile note, under the next attempt number."""
    project, killed = outcome.project, outcome.killed
    runs = project.run_counts()
    assert turns[killed.turn_id].terminal == "turn.lost"
    # The restart did not run the lost turn's host (whether or not it had run).
    ran_before = sum(r["turn_id"] == killed.turn_id for r in outcome.after_crash.runs)
    assert runs[killed.turn_id] == ran_before
    assert len(turns) == 3
    continuation = list(turns.values())[-1]
    env = continuation.envelope
    assert env["recovers_turn_id"] == killed.turn_id
    assert (env["todo_id"], env["attempt"]) == (TODO_B, 2)
    assert (env["kind"], env["resume_host_session"]) == ("continuation", True)
    assert killed.turn_id in env["reconcile_note"]
    assert continuation.terminal == "turn.completed"
    assert runs[continuation.turn_id] == 1
    assert outcome.restarted.summary()["turns"] == 1
    assert_written_back_once(project, continuation.turn_id, TODO_B)

    report = project.session().latest_recovery_report
    assert report is not None
    kinds = [a.kind for a in report.actions]
    lost_action = next(a for a in report.actions if a.kind == "turn_marked_lost")
    assert (lost_action.turn_id, lost_action.detail) == (killed.turn_id, "lost_on_restore")
    proof = turns[killed.turn_id].lost_proof
    assert proof is not None
    probed_alive = [p.alive for p in report.probed.host_processes]
    if outcome.survivors:
        # The survivors (the host, with its detached child at host.events) were found
        # by marker and ended.
        assert proof["ended"] == "killed"
        assert set(outcome.survivors) <= set(proof["killed_pids"])
        killed_action = next(a for a in report.actions if a.kind == "killed_process")
        assert set(outcome.survivors) <= set(killed_action.pids)
        assert kinds == ["killed_process", "turn_marked_lost", "continuation_queued"]
        assert probed_alive == [True]
    else:
        assert proof["ended"] == "proven_gone"
        assert kinds == ["turn_marked_lost", "continuation_queued"]
        # The identity journaled at host.started names a process that is gone.
        assert probed_alive == ([False] if point == "host.started" else [])


def _check_receipt_row(point: str, outcome: Outcome, turns: dict[str, TurnHistory]) -> None:
    """A durable receipt: written back from it (once), the host never runs again."""
    project, killed = outcome.project, outcome.killed
    assert len(turns) == 2
    assert turns[killed.turn_id].terminal == "turn.completed"
    assert project.run_counts()[killed.turn_id] == 1
    assert outcome.restarted.summary()["turns"] == 0
    assert_written_back_once(project, killed.turn_id, TODO_B)
    report = project.session().latest_recovery_report
    assert report is not None
    expected = ["nothing_to_do"] if point == "completed" else ["receipt_written_back"]
    assert [a.kind for a in report.actions] == expected


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_control_plane_killed_at_turn_point_recovers(
    backend: str, point: str, outcomes: dict[tuple[str, str], Future[Outcome]]
) -> None:
    outcome = outcomes[backend, point].result()
    project, restarted = outcome.project, outcome.restarted
    # The control planes kept their state where the backend says (a PostgreSQL project
    # that fell back to a SQLite file would leave one behind).
    assert project.db_path.exists() == (backend == SQLITE)
    summary = restarted.summary()
    assert summary["stops"] == {project.session_id: "goal_terminal"}, restarted.describe()
    assert summary["failed_turns"] == 0

    turns = assert_finished_intact(project, [outcome.after_crash])
    first = next(iter(turns.values()))
    assert_written_back_once(project, first.turn_id, TODO_A)

    if point in LOST_POINTS:
        _check_lost_row(point, outcome, turns)
    else:
        _check_receipt_row(point, outcome, turns)
