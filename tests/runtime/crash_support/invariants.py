"""The invariants every crash scenario must end with, read from the project's log,
its store and the host's own run log (``runs.jsonl``).

Numbered as the suite numbers them: every accepted turn ends exactly once (1), no
lost or failed host step runs again (2), streams are contiguous and checksummed
(4) and every projection equals its fold (5).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tests.runtime.crash_support.project import CrashProject
from tests.runtime.crash_support.scripts import (
    CONTENT_A,
    CONTENT_B,
    FILE_A,
    FILE_B,
    GOAL_ID,
    PAUSED_LAST_SEQ,
)
from tests.runtime.crash_support.turn_log import TurnHistory
from turnkeeper.kernel.session import SessionState
from turnkeeper.runtime.services.folder import kernel_folder
from turnkeeper.runtime.services.goals import GoalService, goal_stream
from turnkeeper.runtime.services.sessions import session_stream


def assert_goal_completed(project: CrashProject) -> None:
    """The goal closed through its terminal audit, with the files the work promised."""
    with project.store() as store:
        goals = GoalService(store)
        state = goals.load(GOAL_ID)
        audit = goals.audit(GOAL_ID)
    assert state.is_closed, f"goal still {state.goal.status}"
    assert audit.terminal, audit.blockers
    assert (project.repo / FILE_A).read_text() == CONTENT_A
    assert (project.repo / FILE_B).read_text() == CONTENT_B
    closed = [r for r in project.goal_records() if r.type == "goal_closed"]
    assert len(closed) == 1


def assert_every_turn_terminal(project: CrashProject) -> dict[str, TurnHistory]:
    """Invariant 1: every accepted turn ends in exactly one terminal event; none in flight."""
    turns = project.turns()
    for turn in turns.values():
        assert len(turn.terminals) == 1, f"turn {turn.turn_id} terminals: {turn.terminals}"
    session = project.session()
    assert session.in_flight is None
    assert session.recovery is None
    counters = session.counters
    assert counters.turns_accepted == len(turns)
    ended = Counter(t.terminal for t in turns.values())
    assert counters.turns_completed == ended["turn.completed"]
    assert counters.turns_failed == ended["turn.failed"]
    assert counters.turns_lost == ended["turn.lost"]
    return turns


@dataclass(frozen=True)
class RunSnapshot:
    """The host runs and the accepted turns at one moment (e.g. right after a crash)."""

    runs: list[dict[str, Any]]
    accepted: frozenset[str]


def snapshot(project: CrashProject) -> RunSnapshot:
    return RunSnapshot(project.runs(), frozenset(project.turns()))


def assert_host_never_rerun(project: CrashProject, snapshots: Iterable[RunSnapshot] = ()) -> None:
    """Invariant 2: a host step whose failure or loss was recorded never runs again.

    From ``runs.jsonl``: each turn's host ran at most once, only for a turn the session
    accepted, in the order turns were accepted. With ``snapshots`` taken after crashes:
    the run log only grew, and no turn already accepted at a snapshot that ended lost
    or failed ran after it — a restart never (re)runs the turn it recovers."""
    runs = project.runs()
    counts = Counter(str(r["turn_id"]) for r in runs)
    assert all(n == 1 for n in counts.values()), f"a turn's host ran twice: {counts}"
    turns = project.turns()
    assert set(counts) <= set(turns), "a host ran a turn the session never accepted"
    order = list(turns)
    for run in runs:
        turn = turns[str(run["turn_id"])]
        assert (run["attempt"], run["kind"]) == (turn.attempt, turn.envelope["kind"])
    positions = [order.index(str(r["turn_id"])) for r in runs]
    assert positions == sorted(positions), "hosts ran out of the order turns were accepted"
    ended_badly = {t for t, h in turns.items() if h.terminal in ("turn.lost", "turn.failed")}
    for snap in snapshots:
        assert runs[: len(snap.runs)] == snap.runs, "the run log lost lines"
        for run in runs[len(snap.runs) :]:
            turn_id = str(run["turn_id"])
            assert not (turn_id in snap.accepted and turn_id in ended_badly), (
                f"turn {turn_id}, accepted before a crash and recorded lost/failed, ran "
                f"after it: {run}"
            )


def assert_store_consistent(project: CrashProject) -> None:
    """Invariants 4 and 5: checksums, contiguous seqs, every projection equals the fold
    of its events up to its head, which is at most the stream's (verify checks the fold:
    a large goal's projection may lag its stream)."""
    with project.store() as store:
        report = store.verify(kernel_folder())
        assert report.ok, report.mismatches
        assert report.streams_checked >= 2
        for stream in (session_stream(project.session_id), goal_stream(GOAL_ID)):
            seqs = [r.seq for r in store.read_stream(stream)]
            assert seqs == list(range(1, len(seqs) + 1)), f"{stream}: {seqs}"
            assert store.head(stream) == len(seqs)
            projection = store.read_projection(stream)
            assert projection is not None
            assert 1 <= projection.head_seq <= len(seqs)


def assert_written_back_once(project: CrashProject, turn_id: str, todo_id: str) -> None:
    """The turn's write-back reached the goal exactly once: one evidence record per
    ``ev-<turn>-<n>`` and one completion of the todo, naming that evidence."""
    records = project.goal_records()
    evidence = Counter(
        str(r.payload["evidence_id"]) for r in records if r.type == "evidence_recorded"
    )
    mine = {eid: n for eid, n in evidence.items() if eid.startswith(f"ev-{turn_id}-")}
    assert mine == {f"ev-{turn_id}-0": 1}, evidence
    completions = [
        r.payload for r in records if r.type == "todo_completed" and r.payload["todo_id"] == todo_id
    ]
    assert len(completions) == 1, completions
    assert completions[0]["evidence_ids"] == [f"ev-{turn_id}-0"]
    written = [
        r
        for r in project.session_records()
        if r.type == "turn.written_back" and r.payload["turn_id"] == turn_id
    ]
    assert len(written) == 1


def assert_finished_intact(
    project: CrashProject, snapshots: Iterable[RunSnapshot] = ()
) -> dict[str, TurnHistory]:
    """What every scenario ends with after its last, clean run: the goal completed,
    invariants 1, 2, 4 and 5, and no process of the project's turns still running.
    Returns the turns, in the order they were accepted."""
    assert_goal_completed(project)
    turns = assert_every_turn_terminal(project)
    assert_host_never_rerun(project, snapshots)
    assert_store_consistent(project)
    assert project.live_processes() == {}, "a process of one of this test's turns survived"
    return turns


def assert_left_paused_mid_turn(
    session: SessionState, runs: list[dict[str, Any]], survivors: dict[int, str], turn_id: str
) -> None:
    """What a kill at ``CRASH_PAUSED_ON_T2`` leaves: ``turn_id`` in flight with its host's
    events journaled up to the pause, and of the project's turns only that host and its
    detached child still running (``survivors``: live marked processes, pid -> turn)."""
    in_flight = session.in_flight
    assert in_flight is not None
    assert (in_flight.envelope.turn_id, in_flight.phase) == (turn_id, "host_started")
    assert in_flight.last_host_seq == PAUSED_LAST_SEQ
    host_pid = next(r["pid"] for r in runs if r["turn_id"] == turn_id)
    assert host_pid in survivors
    assert set(survivors.values()) == {turn_id}
    assert len(survivors) >= 2  # the host and its detached `sleep 600`
