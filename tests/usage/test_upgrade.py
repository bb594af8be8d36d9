"""An upgrade in the middle of a turn: the previous release's ``run`` is SIGKILLed while
its agent works, and this release's ``run`` recovers the turn and goes on.

The previous release journaled a host process as ``start_fingerprint`` (session event
schema version 1); this one writes ``boot_id`` and ``start_time`` (version 2) and
still reads version 1. The old code is the last release's ``turnkeeper/`` package,
exported from this repository's history with ``git archive`` and put first on
``PYTHONPATH``, run through the entry point that release installed (``cli.main:app``;
this one installs ``cli.main:main``), and checked: each side reports where
``turnkeeper`` was imported from. The test then asks the old code to read
the stream the new one wrote: a typed refusal, and its repair changes nothing.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.commands_bench import export_code, imported_from
from tests.usage.project import UserProject, kill_processes_with, processes_with, wait_for

# The last commit whose session events were all version 1 (the release before the
# process identity became one record shared by hosts and kernel).
PREVIOUS_RELEASE = "d26e658"
GOAL = "upgrade"
# The previous release's console script, as its own pyproject.toml declared it.
PREVIOUS_COMMAND = (
    sys.executable,
    "-c",
    "import sys; sys.argv[0] = 'turnkeeper'; from turnkeeper.cli.main import app; sys.exit(app())",
)
AGENT_SLEEP = f"{os.getpid() % 1000 + 300}.{os.getpid()}"  # ours alone, to find and end

AGENT = """#!/bin/sh
if [ -e "{state}/first-started" ]; then
  echo '{{"kind":"result","data":{{"summary":"done after the upgrade","todo_done":true}}}}'
  exit 0
fi
touch "{state}/first-started"
exec sleep {sleep}
"""


def _export_previous_release(into: Path) -> Path:
    try:
        return export_code(PREVIOUS_RELEASE, into)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no git history to export the previous release from: {exc}")


def _host_started_rows(database: Path) -> list[tuple[int, dict[str, object]]]:
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT schema_version, payload FROM events WHERE type = 'turn.host_started' "
            "ORDER BY recorded_at, seq"
        ).fetchall()
    return [(int(version), json.loads(payload)) for version, payload in rows]


def _old_run_dies_mid_turn(project: UserProject, old: dict[str, str], state: Path) -> str:
    """A session made and run by the previous release, SIGKILLed with its agent's turn
    in flight; the session's id."""
    agent = project.agent("agent.sh", AGENT.format(state=state, sleep=AGENT_SLEEP))
    config = project.host_config("agent", {"command": [str(agent)], "event_format": "jsonl"})
    project.tk(
        "goal", "add", "Survive an upgrade", "--id", GOAL, env=old, executable=PREVIOUS_COMMAND
    )
    project.tk(
        "todo", "add", GOAL, "Finish the work", "--id", "t1", env=old, executable=PREVIOUS_COMMAND
    )
    create = ("session", "create", GOAL, "--host", "subprocess", "--host-config", config)
    sid: str = project.tk(*create, "--json", env=old, executable=PREVIOUS_COMMAND).json()[
        "session_id"
    ]
    old_run = project.start("run", env=old, executable=PREVIOUS_COMMAND)
    try:
        wait_for(lambda: _host_started_rows(project.database), 60, "the old host_started")
        wait_for(lambda: processes_with(f"sleep {AGENT_SLEEP}"), 60, "the old agent")
    finally:
        old_run.kill()
    return sid


def _previous_release_refuses(project: UserProject, old: dict[str, str], sid: str) -> None:
    """The previous release cannot read what this one wrote. It says so with a typed
    error (it checks no projection version, so it finds the state undecodable), and
    the repair it suggests refuses by the events' version and changes nothing."""
    before = project.durable_digest()
    refused = project.tk(
        "session", "show", sid, "--json", env=old, executable=PREVIOUS_COMMAND, expect=None
    )
    assert refused.returncode == 10, refused
    assert json.loads(refused.stdout)["error"]["reason"] == "undecodable_projection"
    repaired = project.tk("repair", "--json", env=old, executable=PREVIOUS_COMMAND, expect=None)
    assert "Traceback" not in repaired.stderr + refused.stderr
    assert repaired.returncode == 6, repaired  # FAILED_PRECONDITION, naming why
    assert "schema version 2 is not one this code reads" in repaired.stdout
    assert project.durable_digest() == before, repaired
    assert project.tk_json("verify")["ok"] is True


def test_a_turn_in_flight_under_the_previous_release_is_recovered_by_this_one(
    user_project: UserProject, tmp_path: Path
) -> None:
    project = user_project
    old_code = _export_previous_release(tmp_path / "previous-release")
    old = {"PYTHONPATH": str(old_code)}
    assert imported_from(project.env(**old), project.root) == old_code / "turnkeeper"
    assert imported_from(project.env(), project.root) != old_code / "turnkeeper"
    state = tmp_path / "agent-state"
    state.mkdir()
    sid = _old_run_dies_mid_turn(project, old, state)
    [(version, written)] = _host_started_rows(project.database)
    assert version == 1
    process = written["process"]
    assert isinstance(process, dict)
    assert set(process) == {"pid", "start_fingerprint", "marker"}
    orphan = int(str(process["pid"]))
    assert processes_with(f"sleep {AGENT_SLEEP}") == [orphan]  # it outlived its controller

    try:
        summary = project.tk("run", "--json", "--max-turns", "5").stdout.splitlines()[-1]
    finally:
        left = kill_processes_with(f"sleep {AGENT_SLEEP}")
    assert left == [], "this release's recovery left the old agent running"
    assert json.loads(summary)["turns"] >= 1, summary

    shown = project.tk_json("session", "show", sid)
    assert shown["in_flight"] is None
    assert shown["counters"]["turns_lost"] == 1
    assert shown["counters"]["turns_completed"] == 1
    lost = shown["latest_recovery_report"]["probed"]["host_processes"]
    assert [p["process"]["pid"] for p in lost] == [orphan]
    assert {"boot_id", "start_time"} <= set(lost[0]["process"])  # read as version 2
    audit = project.tk_json("audit", GOAL)["audit"]
    assert audit["open_todos"] == 0, audit  # the todo was done after the upgrade
    assert project.tk_json("verify")["ok"] is True
    assert [v for v, _ in _host_started_rows(project.database)] == [1, 2]
    _previous_release_refuses(project, old, sid)
