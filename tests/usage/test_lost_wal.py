"""A database that lost acknowledged writes is told apart from one that is up to date.

Three turns complete while their writes live only in SQLite's WAL (the ``run`` that
made them holds the database open); then ``run`` is SIGKILLed and the WAL is lost —
deleted, or truncated to its header — as an unclean shutdown of a careless backup or
file system can leave it. The database now knows none of the three turns, but the
workspace holds their work and git their snapshots. ``status``, ``verify`` and
``run`` must say ``DATA_LOSS`` (``database_behind_workspace``), naming the snapshot and
what the log holds; ``run`` must not do the lost turns again until the operator
accepts the loss (``turnkeeper repair --accept-loss SESSION``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.usage.project import UserProject, kill_processes_with, wait_for

GOAL = "g1"
SLEEP = f"{os.getpid() % 1000 + 500}.{os.getpid()}"
DATA_LOSS = 10

AGENT = """#!/bin/sh
# Each turn leaves a file in the state directory; the fourth works on (sleeps).
n=$(ls "{state}" | wc -l)
echo "$TURNKEEPER_TURN_ID" > "{state}/turn-$n"
if [ "$n" -eq 3 ]; then exec sleep {sleep}; fi
echo "turn $n" >> work.txt
echo '{{"kind":"result","data":{{"todo_done":true}}}}'
"""


def _lose_the_wal(database: Path, how: str) -> None:
    wal = Path(f"{database}-wal")
    assert wal.stat().st_size > 0, "the turns' writes were not in the WAL"
    if how == "deleted":
        wal.unlink()
    else:
        with wal.open("r+b") as handle:
            handle.truncate(32)  # the WAL header, no frames
    Path(f"{database}-shm").unlink(missing_ok=True)


@pytest.mark.parametrize("how", ["deleted", "truncated"])
def test_a_lost_wal_is_data_loss_and_no_completed_turn_runs_again(
    user_project: UserProject, tmp_path: Path, how: str
) -> None:
    project = user_project
    project.tk("goal", "add", "Do four things", "--id", GOAL)
    for n in range(4):
        project.tk("todo", "add", GOAL, f"Thing {n}", "--id", f"t{n}")
    state = tmp_path / "agent-state"
    state.mkdir()
    agent = project.agent("agent.sh", AGENT.format(state=state, sleep=SLEEP))
    config = project.host_config("agent", {"command": [str(agent)], "event_format": "jsonl"})
    sid = project.tk_json(
        "session", "create", GOAL, "--host", "subprocess", "--host-config", config
    )["session_id"]
    run = project.start("run")
    try:
        wait_for((state / "turn-3").exists, 90, "the fourth turn")
    finally:
        run.kill()
        kill_processes_with(SLEEP)
    snapshots = project.git("for-each-ref", "--format=%(refname)", "refs/turnkeeper/snapshots/")
    assert len(snapshots.split()) == 3, snapshots
    _lose_the_wal(project.database, how)

    status = project.tk("status", "--json", expect=DATA_LOSS)
    error = status.json()["error"]
    assert (error["code"], error["reason"]) == ("DATA_LOSS", "database_behind_workspace")
    assert "turnkeeper repair --accept-loss" in error["message"]
    behind = error["details"]["behind"]
    assert [b["snapshot"]["completed_turn"] for b in behind] == [1, 2, 3]
    assert {b["log"]["turns_completed"] for b in behind} == {0}
    assert behind[0]["ref"] in snapshots.split()

    verified = project.tk("verify", "--json", expect=DATA_LOSS).json()
    kinds = [m["kind"] for m in verified["mismatches"]]
    assert kinds == ["database_behind_workspace"] * 3, verified

    turns_before = sorted(p.name for p in state.iterdir())
    again = project.start("run", "--json")
    try:
        assert again.wait(60) == DATA_LOSS, again.output()
    finally:
        again.kill()
        kill_processes_with(SLEEP)
    assert json.loads(again.stdout())["error"]["reason"] == "database_behind_workspace"
    assert sorted(p.name for p in state.iterdir()) == turns_before  # no turn ran again
    assert (project.root / "work.txt").read_text() == "turn 0\nturn 1\nturn 2\n"

    accepted = project.tk_json("repair", "--accept-loss", sid)
    assert len(accepted["lost"]) == 3 and accepted["ok"] is True
    lost = project.git("for-each-ref", "--format=%(refname)", "refs/turnkeeper/lost/").split()
    assert sorted(lost) == sorted(accepted["lost"])
    assert project.git("for-each-ref", "refs/turnkeeper/snapshots/") == ""
    project.tk("status")  # the operator decided: the log's view holds again
    project.tk("verify")
