"""The control plane SIGKILLed mid-turn, then again while it recovers — and again.

Every sequence starts the same way: the first ``turnkeeper run`` dies by SIGKILL
while the first turn on ``t2`` is paused mid-turn, its host and a detached
``sleep 600`` alive. The next run dies inside restart recovery
(``recovery.killed``: survivors ended, loss not recorded; ``recovery.lost``: loss
recorded, nothing run; ``recovery.reported``: report recorded), or — in the longest
sequence — the continuations are killed too. A last clean run must still finish the
goal with every invariant intact and no host step run twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.crash_support import (
    CRASH_PAUSED_ON_T2,
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
    paused_on_t2_script,
    run_side_by_side,
    snapshot,
)
from turnkeeper.kernel import GoalState
from turnkeeper.kernel.session import SessionState

SEQUENCES: dict[str, tuple[str, ...]] = {
    "recovery.killed": (CRASH_PAUSED_ON_T2, "recovery.killed"),
    "recovery.lost": (CRASH_PAUSED_ON_T2, "recovery.lost"),
    "recovery.reported": (CRASH_PAUSED_ON_T2, "recovery.reported"),
    # Killed four times in a row, at four different points: mid-turn, inside recovery,
    # right after the continuation was accepted, mid-write-back of the next one.
    "four-kills": (CRASH_PAUSED_ON_T2, "recovery.killed", "turn.accepted", "receipt"),
}


@dataclass(frozen=True)
class Stage:
    """What one control-plane run left behind."""

    crash_at: str | None
    result: CliResult
    turns: dict[str, TurnHistory]
    session: SessionState
    runs: list[dict[str, Any]]
    survivors: dict[int, str]
    snapshot: RunSnapshot
    goal: GoalState

    @property
    def turn_list(self) -> list[TurnHistory]:
        return list(self.turns.values())


@dataclass
class Outcome:
    project: CrashProject
    stages: list[Stage] = field(default_factory=list)

    @property
    def final(self) -> Stage:
        return self.stages[-1]


def _stage(project: CrashProject, crash_at: str | None) -> Stage:
    result = project.run_control_plane(crash_at=crash_at)
    in_flight = project.session().in_flight
    if crash_at is not None and crash_at.startswith(("host.spawned", "host.started")):
        assert in_flight is not None
        project.wait_for_orphans(in_flight.envelope.turn_id)  # see test_crash_turn_points
    return Stage(
        crash_at=crash_at,
        result=result,
        turns=project.turns(),
        session=project.session(),
        runs=project.runs(),
        survivors=project.live_processes(),
        snapshot=snapshot(project),
        goal=project.goal(),
    )


def _scenario(factory: ProjectFactory, root: Path, sequence: str) -> Outcome:
    project = factory.make(root, paused_on_t2_script())
    outcome = Outcome(project)
    for crash_at in (*SEQUENCES[sequence], None):
        outcome.stages.append(_stage(project, crash_at))
    return outcome


@pytest.fixture(scope="module")
def outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[Outcome]]]:
    with run_side_by_side(request, tmp_path_factory, "sequence", _scenario) as running:
        yield running


def _check_paused_kill(stage: Stage) -> TurnHistory:
    """The first run died with turn 2 paused mid-turn; its processes outlived it."""
    first, paused = stage.turn_list
    assert (first.todo_id, first.terminal) == (TODO_A, "turn.completed")
    assert (paused.todo_id, paused.attempt, paused.terminals) == (TODO_B, 1, [])
    assert_left_paused_mid_turn(stage.session, stage.runs, stage.survivors, paused.turn_id)
    return paused


def _check_final(outcome: Outcome, expected_turns: int) -> dict[str, TurnHistory]:
    project, final = outcome.project, outcome.final
    assert final.result.summary()["stops"] == {project.session_id: "goal_terminal"}
    assert final.survivors == {}
    turns = assert_finished_intact(project, [stage.snapshot for stage in outcome.stages])
    assert len(turns) == expected_turns
    first = next(iter(turns.values()))
    assert_written_back_once(project, first.turn_id, TODO_A)
    return turns


def _check_killed_while_recovering(
    sequence: str, paused_kill: Stage, recovery_kill: Stage, paused: TurnHistory
) -> None:
    """What the second run left: it ended the survivors before it died, wherever."""
    assert recovery_kill.survivors == {}
    assert len(recovery_kill.runs) == len(paused_kill.runs)  # no host ran in between
    reports_before = paused_kill.session.counters.recovery_reports
    lost_turn = recovery_kill.turns[paused.turn_id]
    if sequence == "recovery.killed":
        # Died before recording the loss: the turn is still in flight.
        assert lost_turn.terminals == []
        in_flight = recovery_kill.session.in_flight
        assert in_flight is not None
        assert in_flight.envelope.turn_id == paused.turn_id
        assert recovery_kill.session.counters.recovery_reports == reports_before
        return
    # The loss is durable, with the pids that were ended, and the continuation it
    # calls for is decided — but no continuation turn was accepted yet.
    assert lost_turn.terminals == ["turn.lost"]
    proof = lost_turn.lost_proof
    assert proof is not None
    assert proof["ended"] == "killed"
    assert set(paused_kill.survivors) <= set(proof["killed_pids"])
    assert len(recovery_kill.turns) == 2
    pending = recovery_kill.session.recovery
    assert pending is not None
    assert (pending.turn_id, pending.cause, pending.status) == (paused.turn_id, "lost", "resolved")
    reported = 1 if sequence == "recovery.reported" else 0
    assert recovery_kill.session.counters.recovery_reports == reports_before + reported
    if sequence == "recovery.reported":
        report = recovery_kill.session.latest_recovery_report
        assert report is not None
        kinds = [a.kind for a in report.actions]
        assert kinds == ["killed_process", "turn_marked_lost", "continuation_queued"]


@pytest.mark.parametrize("sequence", ["recovery.killed", "recovery.lost", "recovery.reported"])
def test_killed_again_while_recovering_still_completes(
    sequence: str, outcomes: dict[str, Future[Outcome]]
) -> None:
    outcome = outcomes[sequence].result()
    paused_kill, recovery_kill, final = outcome.stages
    paused = _check_paused_kill(paused_kill)
    _check_killed_while_recovering(sequence, paused_kill, recovery_kill, paused)

    turns = _check_final(outcome, expected_turns=3)
    assert turns[paused.turn_id].terminal == "turn.lost"
    continuation = list(turns.values())[-1]
    env = continuation.envelope
    assert (env["todo_id"], env["attempt"], env["kind"]) == (TODO_B, 2, "continuation")
    assert env["recovers_turn_id"] == paused.turn_id
    assert continuation.terminal == "turn.completed"
    assert_written_back_once(outcome.project, continuation.turn_id, TODO_B)
    counts = outcome.project.run_counts()
    assert (counts[paused.turn_id], counts[continuation.turn_id]) == (1, 1)
    assert final.result.summary()["turns"] == 1

    report = final.session.latest_recovery_report
    assert report is not None
    kinds = [a.kind for a in report.actions]
    if sequence == "recovery.killed":
        # Nothing was left to end: the loss is proven by absence this time.
        assert kinds == ["turn_marked_lost", "continuation_queued"]
        proof = turns[paused.turn_id].lost_proof
        assert proof is not None
        assert proof["ended"] == "proven_gone"
        assert [p.alive for p in report.probed.host_processes] == [False]
    else:
        assert kinds == ["nothing_to_do"]


@pytest.mark.parametrize("sequence", ["four-kills"])
def test_killed_four_times_in_a_row_at_different_points(
    sequence: str, outcomes: dict[str, Future[Outcome]]
) -> None:
    outcome = outcomes[sequence].result()
    paused_kill, recovery_kill, accept_kill, writeback_kill, final = outcome.stages
    paused = _check_paused_kill(paused_kill)

    # Run 2: survivors ended, then killed before the loss was recorded.
    assert recovery_kill.survivors == {}
    assert recovery_kill.turns[paused.turn_id].terminals == []

    # Run 3: the paused turn recorded lost (proven gone this time); its continuation
    # accepted, then the kill, before any host was started for it.
    assert accept_kill.turns[paused.turn_id].terminals == ["turn.lost"]
    first_continuation = accept_kill.turn_list[-1]
    env = first_continuation.envelope
    assert (env["attempt"], env["kind"], env["recovers_turn_id"]) == (
        2,
        "continuation",
        paused.turn_id,
    )
    assert accept_kill.session.in_flight is not None
    assert accept_kill.session.in_flight.phase == "accepted"
    assert accept_kill.runs == recovery_kill.runs == paused_kill.runs

    # Run 4: that continuation is lost in turn; the next one ran, and its write-back
    # reached the goal before the kill, but the session was never told.
    assert writeback_kill.turns[first_continuation.turn_id].terminals == ["turn.lost"]
    second_continuation = writeback_kill.turn_list[-1]
    env = second_continuation.envelope
    assert (env["attempt"], env["kind"], env["recovers_turn_id"]) == (
        3,
        "continuation",
        first_continuation.turn_id,
    )
    assert writeback_kill.session.in_flight is not None
    assert writeback_kill.session.in_flight.phase == "receipt"
    assert writeback_kill.runs[len(accept_kill.runs) :] == [
        {
            "turn_id": second_continuation.turn_id,
            "attempt": 3,
            "pid": writeback_kill.runs[-1]["pid"],
            "kind": "continuation",
        }
    ]
    # Killed with the receipt durable and nothing written back yet.
    assert writeback_kill.goal.todos[TODO_B].completion is None

    # Run 5: written back from the durable receipt, once; the host is not run again.
    turns = _check_final(outcome, expected_turns=4)
    assert [t.terminal for t in turns.values()] == [
        "turn.completed",
        "turn.lost",
        "turn.lost",
        "turn.completed",
    ]
    for turn in (paused, first_continuation):
        proof = turns[turn.turn_id].lost_proof
        assert proof is not None
        assert proof["ended"] == "proven_gone"
    assert_written_back_once(outcome.project, second_continuation.turn_id, TODO_B)
    counts = outcome.project.run_counts()
    assert counts == {t: 1 for t in turns if t != first_continuation.turn_id}
    assert final.result.summary()["turns"] == 0
    report = final.session.latest_recovery_report
    assert report is not None
    assert [a.kind for a in report.actions] == ["receipt_written_back"]
    assert final.session.counters.turns_lost == 2
