"""The whole story through the CLI only: set up, crash mid-turn, restart, inspect.

The project is made with ``turnkeeper init / goal add / todo add / session create``;
``turnkeeper run`` is SIGKILLed while the first turn on ``t2`` is paused mid-turn (its
host and a detached ``sleep 600`` alive); after a clean ``run``, ``session show
--json`` and ``status --json`` must expose the recovery report: what was replayed from
the log, what was probed again, and the actions — the pids killed, the turn marked
lost, the continuation queued.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime.crash_support import (
    CRASH_PAUSED_ON_T2,
    GOAL_ID,
    TODO_A,
    TODO_B,
    ProjectFactory,
    assert_finished_intact,
    paused_on_t2_script,
    project_factory,
    snapshot,
)


@pytest.fixture
def projects() -> Iterator[ProjectFactory]:
    with project_factory() as factory:
        yield factory


def test_cli_exposes_the_recovery_report_after_a_crash(
    tmp_path: Path, projects: ProjectFactory
) -> None:
    project = projects.make(tmp_path / "p", paused_on_t2_script(), via_cli=True)
    project.run_control_plane(crash_at=CRASH_PAUSED_ON_T2)
    killed = project.last_turn()
    assert killed.todo_id == TODO_B
    survivors = project.live_processes([killed.turn_id])
    host_pid = next(r["pid"] for r in project.runs() if r["turn_id"] == killed.turn_id)
    assert host_pid in survivors
    assert len(survivors) >= 2
    after_crash = snapshot(project)

    restarted = project.run_control_plane()
    assert "recovered (killed_process, turn_marked_lost, continuation_queued)" in "\n".join(
        restarted.progress
    )
    turns = assert_finished_intact(project, [after_crash])
    continuation = list(turns.values())[-1]

    shown = project.cli("session", "show", project.session_id[:8], "--json").json()
    assert shown["session_id"] == project.session_id
    assert shown["in_flight"] is None
    assert shown["counters"]["turns_lost"] == 1
    assert shown["counters"]["turns_recovered"] == 1
    assert shown["last_recovered"]["turn_id"] == killed.turn_id
    assert shown["last_recovered"]["continued_by"] == continuation.turn_id
    report = shown["latest_recovery_report"]

    replayed = report["replayed"]
    assert replayed["goal_id"] == GOAL_ID
    assert set(replayed["todo_lineage"]) == {TODO_A, TODO_B}
    first = next(iter(turns))
    assert replayed["receipts"] == [first]  # the last turn that ended before the crash

    probed = report["probed"]
    assert isinstance(probed["workspace_revision"], str)
    assert len(probed["workspace_revision"]) == 40
    [probe] = probed["host_processes"]
    assert (probe["process"]["pid"], probe["process"]["marker"]) == (host_pid, killed.turn_id)
    assert probe["alive"] is True

    actions = report["actions"]
    assert [a["kind"] for a in actions] == [
        "killed_process",
        "turn_marked_lost",
        "continuation_queued",
    ]
    assert all(a["turn_id"] == killed.turn_id for a in actions)
    assert set(survivors) <= set(actions[0]["pids"])
    assert actions[1]["detail"] == "lost_on_restore"

    status = project.cli("status", "--json").json()
    [session] = status["sessions"]
    assert session["session_id"] == project.session_id
    assert session["latest_recovery_report"] == report
    [goal] = status["goals"]
    assert (goal["id"], goal["status"]) == (GOAL_ID, "closed")
    assert goal["audit"]["terminal"] is True
