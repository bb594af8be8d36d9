"""The host dies mid-turn while the control plane stays alive.

The first attempt on todo ``t2`` writes half its work and then fails its host: a
SIGKILL of itself, a segfault, a non-zero exit, a hang past ``run --host-timeout``,
or a line that is not JSON on its event stream. One ``turnkeeper run`` must record a
failure receipt (``failed_phase: host_execute``, the error kind, a host recovery
record bound to the session), resolve that record, and continue with a continuation
turn (attempt 2) that resumes the host session with a reconcile note — never running
the failed turn's host again — until the goal closes.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.crash_support import (
    FILE_B,
    TITLE_B,
    TODO_A,
    TODO_B,
    CliResult,
    CrashProject,
    ProjectFactory,
    TurnHistory,
    assert_finished_intact,
    assert_written_back_once,
    fault_turn,
    run_side_by_side,
    standard_script,
)


@dataclass(frozen=True)
class Fault:
    step: dict[str, Any]
    error_kind: str
    exit_code: int | None = None
    signal: int | None = None
    run_args: tuple[str, ...] = ()
    # Whether the host's own transcript shows the turn unfinished (a protocol
    # failure is found by the control plane after the agent thought it was done).
    interrupted_in_transcript: bool = True


FAULTS = {
    "kill_self": Fault({"op": "kill_self"}, "signal", signal=9),
    "segfault": Fault({"op": "segfault"}, "signal", signal=11),
    "crash": Fault({"op": "crash", "exit_code": 3}, "exit_code", exit_code=3),
    # Timed out, then ended by the control plane (its whole tree, by SIGKILL). The
    # timeout holds for every turn of the run, so it leaves room for a normal turn on
    # a loaded machine (the agent alone took 3 s to start at a load average of 9).
    "hang": Fault({"op": "hang"}, "timeout", signal=9, run_args=("--host-timeout", "8")),
    # The agent finishes and exits 0; the malformed line alone fails the turn.
    "garbage": Fault({"op": "garbage"}, "protocol", exit_code=0, interrupted_in_transcript=False),
}


@dataclass
class Outcome:
    project: CrashProject
    run: CliResult


def _scenario(factory: ProjectFactory, root: Path, name: str) -> Outcome:
    fault = FAULTS[name]
    project = factory.make(root, standard_script(fault_turn(TITLE_B, FILE_B, fault.step)))
    return Outcome(project, project.run_control_plane(*fault.run_args))


@pytest.fixture(scope="module")
def outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[Outcome]]]:
    # The hang waits out its timeout and every failure its recovery backoff (5 s):
    # all side by side, those waits overlap.
    with run_side_by_side(
        request, tmp_path_factory, "name", _scenario, workers=len(FAULTS)
    ) as running:
        yield running


def _check_failure_record(project: CrashProject, fault: Fault, failed: TurnHistory) -> str:
    """The failure receipt and its host recovery record; returns the handle."""
    assert (failed.todo_id, failed.attempt, failed.terminal) == (TODO_B, 1, "turn.failed")
    receipt = failed.receipt
    assert receipt is not None
    assert (receipt["outcome"], receipt["failed_phase"]) == ("failure", "host_execute")
    assert receipt["error_kind"] == fault.error_kind
    assert (receipt["exit_code"], receipt["signal"]) == (fault.exit_code, fault.signal)
    record = receipt["host_recovery"]
    assert record["schema_version"] == "turnkeeper.host_recovery.v1"
    assert (record["kind"], record["failed_phase"]) == ("resume_session", "host_execute")
    binding = record["binding"]
    assert binding["session_id"] == project.session_id
    assert (binding["turn_id"], binding["attempt"]) == (failed.turn_id, 1)
    assert (binding["host_kind"], binding["generation"]) == ("scripted", 1)
    handle = binding["host_session_handle"]
    assert isinstance(handle, str)
    assert handle.startswith("scripted-")

    records = project.session_records()
    [failed_event] = [r.payload for r in records if r.type == "turn.failed"]
    assert (failed_event["turn_id"], failed_event["failed_phase"]) == (
        failed.turn_id,
        "host_execute",
    )
    assert failed_event["error_kind"] == fault.error_kind
    [resolved] = [r.payload for r in records if r.type == "turn.recovery_resolved"]
    resolution = resolved["resolution"]
    assert resolution["session_action"] == "resume"
    assert resolution["skip_host_for_turn"] == failed.turn_id
    assert (resolution["next"]["kind"], resolution["next"]["attempt"]) == ("continuation", 2)
    return handle


def _check_continuation(
    project: CrashProject,
    fault: Fault,
    failed: TurnHistory,
    continuation: TurnHistory,
    handle: str,
) -> None:
    """Next attempt, resumes the same host session, told to reconcile; ran once."""
    env = continuation.envelope
    assert (env["todo_id"], env["attempt"], env["kind"]) == (TODO_B, 2, "continuation")
    assert env["resume_host_session"] is True
    assert env["recovers_turn_id"] == failed.turn_id
    assert failed.turn_id in env["reconcile_note"]
    assert "will not be run again" in env["reconcile_note"]
    assert continuation.terminal == "turn.completed"
    assert_written_back_once(project, continuation.turn_id, TODO_B)
    assert project.session().host_session_handle == handle
    bound = next(
        r.payload["events"][0]
        for r in project.session_records()
        if r.type == "turn.host_events" and r.payload["turn_id"] == continuation.turn_id
    )
    assert bound["kind"] == "session.bound"
    assert (bound["data"]["handle"], bound["data"]["resumed"]) == (handle, True)
    interrupted = [failed.turn_id] if fault.interrupted_in_transcript else []
    assert bound["data"]["interrupted_turns"] == interrupted


@pytest.mark.parametrize("name", list(FAULTS))
def test_host_failure_is_recorded_and_resumed_by_a_continuation(
    name: str, outcomes: dict[str, Future[Outcome]]
) -> None:
    fault = FAULTS[name]
    outcome = outcomes[name].result()
    project = outcome.project
    summary = outcome.run.summary()
    assert summary == {
        "turns": 3,
        "failed_turns": 1,
        "reattached_turns": 0,
        "stops": {project.session_id: "goal_terminal"},
        "reasons": {},
        # A failed turn the run recovered from: the goal still closed, so run exits 0.
        "outcomes": {project.session_id: "finished"},
        "exit_code": 0,
    }, outcome.run.describe()
    assert any("resumed after failed turn" in line for line in outcome.run.progress)

    turns = assert_finished_intact(project)

    first, failed, continuation = turns.values()
    assert (first.todo_id, first.terminal) == (TODO_A, "turn.completed")
    handle = _check_failure_record(project, fault, failed)
    _check_continuation(project, fault, failed, continuation, handle)

    # The host ran the failed turn once and the continuation once: never the failed one again.
    assert [(r["turn_id"], r["attempt"], r["kind"]) for r in project.runs()] == [
        (first.turn_id, 1, "start"),
        (failed.turn_id, 1, "start"),
        (continuation.turn_id, 2, "continuation"),
    ]
