"""Storage per turn stays constant: the log stores deltas, never whole states per turn.

A session runs 1,000 turns through the real controller, driver, kernels and
SQLite store, with an in-process host (no process per turn). The bytes the
store keeps for turns 901-1,000 must be no more than for turns 1-100 (times a
small factor): events carry deltas and each stream's projection is one row
replaced in place. No timing is asserted.
"""

from __future__ import annotations

import itertools
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.inprocess_host import InProcessHost
from turnkeeper.hosts import TurnRequest
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import ProgressPolicy
from turnkeeper.runtime.control.controller import Controller, ControllerConfig
from turnkeeper.runtime.services.folder import kernel_folder
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.store import open_store
from turnkeeper.store.sql import SqlEventStore

BATCH = 100
FACTOR = 1.1  # late turns may cost at most this much more than early ones


@dataclass(frozen=True)
class Usage:
    """What the store keeps, per stream kind: event payloads plus projection states."""

    events: int
    session_bytes: int
    goal_bytes: int
    session_state: int
    goal_state: int
    file_bytes: int

    @property
    def total(self) -> int:
        return self.session_bytes + self.goal_bytes


def _usage(db: Path) -> Usage:
    conn = sqlite3.connect(db)
    try:
        # Fold the WAL into the main file so its size is what the store keeps.
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0
        per_kind: dict[str, tuple[int, int, int]] = {}
        rows = conn.execute(
            "SELECT p.kind, COUNT(e.seq), COALESCE(SUM(LENGTH(e.payload)), 0),"
            " LENGTH(p.state) FROM projections p LEFT JOIN events e USING (stream_id)"
            " GROUP BY p.stream_id"
        )
        for kind, count, payload, state in rows:
            assert kind not in per_kind, "one stream per kind in this test"
            per_kind[kind] = (int(count), int(payload), int(state))
        (page_count,) = conn.execute("PRAGMA page_count").fetchone()
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    finally:
        conn.close()
    session, goal = per_kind["session"], per_kind["goal"]
    return Usage(
        events=session[0] + goal[0],
        session_bytes=session[1] + session[2],
        goal_bytes=goal[1] + goal[2],
        session_state=session[2],
        goal_state=goal[2],
        file_bytes=int(page_count) * int(page_size),
    )


@dataclass
class Project:
    db: Path
    store: SqlEventStore
    session_id: str


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=workspace, check=True)
    db = tmp_path / "tk.db"
    store = open_store(db)
    goals = GoalService(store)
    goals.create(CreateGoal(goal_id="g", title="a long-running goal"))
    goals.submit("g", AddTodo(todo=TodoSpec(todo_id="t0", title="todo 0")))
    session = SessionService(store).create("g", workspace, "inprocess")
    try:
        yield Project(db=db, store=store, session_id=session.session_id)
    finally:
        store.close()


def _run_batches(
    project: Project, host: InProcessHost, batches: int, size: int = BATCH
) -> list[Usage]:
    """Run ``batches`` controller runs of ``size`` turns; the usage before and after each."""
    usages = [_usage(project.db)]
    # The host completes nothing on purpose (storage per turn is measured, not progress).
    idle = ProgressPolicy(max_turns_without_progress=1_000_000)
    config = ControllerConfig(max_turns=size, host_loader=host.loader, progress=idle)
    for _ in range(batches):
        summary = Controller(project.store, config).run([project.session_id])
        assert (summary.turns, summary.failed_turns) == (size, 0)
        assert summary.stops == {project.session_id: "budget"}
        usages.append(_usage(project.db))
    return usages


def _per_batch(usages: list[Usage], field: str) -> list[int]:
    values = [getattr(u, field) for u in usages]
    return [after - before for before, after in itertools.pairwise(values)]


def _assert_constant(usages: list[Usage], field: str, factor: float = FACTOR) -> None:
    added = _per_batch(usages, field)
    first, last = added[0], added[-1]
    assert first > 0, f"{field}: the first batch of turns stored nothing?"
    assert last <= first * factor, f"{field} per batch of turns grew: {added}"


def test_a_thousand_turns_cost_the_same_storage_per_turn(project: Project) -> None:
    """One todo the agent keeps working on: every turn is a continuation that
    resumes the same host session (the planner's rule 6), 1,000 times."""
    host = InProcessHost()
    usages = _run_batches(project, host, batches=10)
    assert len(host.requests) == 10 * BATCH
    assert {r.kind for r in host.requests[1:]} == {"continuation"}
    handles = {r.host_session_handle for r in host.requests[1:]}
    assert len(handles) == 1 and None not in handles

    _assert_constant(usages, "total")
    _assert_constant(usages, "session_bytes")
    _assert_constant(usages, "events", factor=1.0)  # the same events per turn, exactly
    # Pages, not bytes: allow for B-tree splits landing unevenly across batches.
    _assert_constant(usages, "file_bytes", factor=1.25)
    # The session's projection is bounded: it never keeps a list of past turns.
    assert usages[-1].session_state <= usages[1].session_state * FACTOR
    assert usages[-1].goal_state == usages[1].goal_state  # the goal did not change

    state = SessionService(project.store).load(project.session_id)
    assert state.counters.turns_completed == 10 * BATCH
    assert state.counters.turns_accepted == 10 * BATCH
    assert project.store.verify(kernel_folder()).ok


def _complete_and_propose_next(request: TurnRequest) -> dict[str, Any]:
    assert request.todo_id is not None
    n = int(request.todo_id.removeprefix("t"))
    nxt = {"todo_id": f"t{n + 1}", "title": f"todo {n + 1}"}
    return {
        "summary": f"finished todo {n}",
        "todo_done": True,
        "proposals": [{"kind": "add_todo", "todo": nxt}],
    }


def test_turns_that_grow_the_goal_store_deltas_not_the_goal(project: Project) -> None:
    """Every turn completes its todo and proposes the next, so the goal itself grows.

    200 turns, not 1,000: each goal write rewrites the goal's whole projection row,
    so the time per turn grows with the goal (quadratic in total). The bytes kept
    per turn must not grow: turns 151-200 against turns 1-50.
    """
    host = InProcessHost(result_for=_complete_and_propose_next)
    size, batches = 50, 4
    usages = _run_batches(project, host, batches=batches, size=size)
    turns = size * batches
    assert [r.todo_id for r in host.requests] == [f"t{n}" for n in range(turns)]
    assert {r.kind for r in host.requests} == {"start"}

    _assert_constant(usages, "events", factor=1.0)
    _assert_constant(usages, "session_bytes")
    # The goal's bytes per batch: its events plus the growth of its state by one todo
    # per turn; neither may carry the whole goal.
    _assert_constant(usages, "goal_bytes")
    _assert_constant(usages, "total")
    _assert_constant(usages, "file_bytes", factor=1.25)

    goal = GoalService(project.store).load("g")
    assert len(goal.todos) == turns + 1
    assert sum(t.status.value == "done" for t in goal.todos.values()) == turns
    assert project.store.verify(kernel_folder()).ok
