"""``status`` and ``session list`` as a user reads them, on sessions in every state.

A project made by ``turnkeeper init``, an agent a user would write and the real
``turnkeeper run``: one session listed while its turn is in flight, then its control
plane SIGKILLed mid-turn and the turn recovered as lost by the next ``run`` (its
recovery report shows in ``status``); one session stopped by its operator; one never
run. The listings read session projections without decoding them, so each must print,
for every session, the very state ``session show`` prints from the decoded one.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.usage.project import UserProject, kill_processes_with, processes_with, wait_for

RESULT = json.dumps({"kind": "result", "data": {"summary": "done", "todo_done": True}})
WIDE = {"COLUMNS": "200"}  # one table row per session, however long its status reason
# What a script reads of every listed session (README: `status --json` says why).
KEYS = {
    "session_id",
    "goal_id",
    "host_kind",
    "status",
    "status_reason",
    "counters",
    "in_flight",
    "lease",
    "turns_without_progress",
    "replans_without_progress",
    "consecutive_host_failures",
}


@pytest.fixture
def token() -> Iterator[str]:
    """A unique sleep length: finds this test's agent processes and nothing else."""
    value = f"{3000 + uuid.uuid4().int % 5000}.{os.getpid() % 1000}"
    yield value
    kill_processes_with(f"sleep {value}")


def _session(project: UserProject, goal: str, command: list[str]) -> str:
    project.tk("goal", "add", f"goal {goal}", "--id", goal)
    project.tk("todo", "add", goal, f"the work of {goal}", "--id", f"t-{goal}")
    config = project.host_config(f"host-{goal}", {"command": command, "event_format": "jsonl"})
    created = project.tk_json(
        "session", "create", goal, "--host", "subprocess", "--host-config", config,
        "--workspace", ".",
    )  # fmt: skip
    return str(created["session_id"])


def _listed_as_shown(project: UserProject) -> list[dict[str, Any]]:
    """``session list --json``, checked against ``session show --json`` of each session
    and against ``status --json``."""
    listed: list[dict[str, Any]] = project.tk_json("session", "list")
    for session in listed:
        assert session == project.tk_json("session", "show", session["session_id"])
        assert session.keys() >= KEYS
    assert project.tk_json("status")["sessions"] == listed
    return listed


def test_listings_print_what_session_show_prints(user_project: UserProject, token: str) -> None:
    fast = user_project.root.parent / "agent.fast"
    agent = user_project.agent(
        "slow-agent",
        f"#!/bin/sh\nif [ -e '{fast}' ]; then echo '{RESULT}'; exit 0; fi\n"
        f"sleep {token} &\nsleep {token}\necho '{RESULT}'\n",
    )
    worked = _session(user_project, "worked", [str(agent)])

    run = user_project.start("run", "--json", "--session", worked)
    wait_for(lambda: len(processes_with(f"sleep {token}")) == 2, 30, "the agent to start")
    # The silent agent's start is journaled a second after it began (with no event to
    # ride on): wait for it, so the listings below all read the one state.
    wait_for(
        lambda: (
            (user_project.tk_json("session", "show", worked)["in_flight"] or {}).get("phase")
            == "host_started"
        ),
        30,
        "the agent's start in the journal",
    )
    (during,) = _listed_as_shown(user_project)
    in_flight = during["in_flight"]["envelope"]["turn_id"]
    assert during["status"] == "running" or during["lease"]["owner"], during
    assert in_flight in user_project.tk("session", "list", env=WIDE).stdout

    run.kill()  # the control plane dies mid-turn; its agent lives on, orphaned
    fast.touch()
    user_project.tk("run", "--json", "--session", worked, timeout=90)
    assert not processes_with(f"sleep {token}"), "recovery ends the lost turn's processes"
    never_run = _session(user_project, "idle", ["true"])
    stopped = _session(user_project, "paused", ["true"])
    user_project.tk("session", "stop", stopped, "--reason", "paused by me")

    listed = {s["session_id"]: s for s in _listed_as_shown(user_project)}
    assert list(listed) == [worked, never_run, stopped]  # oldest first
    assert listed[worked]["counters"]["turns_lost"] >= 1
    assert listed[worked]["latest_recovery_report"] is not None
    assert listed[worked]["in_flight"] is None
    assert (listed[never_run]["status"], listed[never_run]["status_reason"]) == ("ready", None)
    assert (listed[stopped]["status"], listed[stopped]["status_reason"]) == (
        "suspended",
        "paused by me",
    )

    status = user_project.tk("status", env=WIDE).stdout
    table = user_project.tk("session", "list", env=WIDE).stdout
    for sid, state in listed.items():
        counters = state["counters"]
        row = next(line for line in table.splitlines() if sid[:8] in line)
        cells = [cell.strip() for cell in row.strip("│ ").split("│")]
        reason = f" ({state['status_reason']})" if state["status_reason"] else ""
        assert cells == [
            sid[:8],
            state["goal_id"],
            "subprocess",
            state["status"] + reason,
            str(counters["turns_completed"]),
            str(counters["turns_lost"]),
            str(counters["turns_failed"]),
            "-",
        ], row
        if state["status"] in ("closed", "deleted"):
            assert sid[:8] not in status, "status counts a finished session, draws no row"
        else:
            assert row in status, "status shows the same session table"
    # The worked session finished (its goal closed): status counts it, and `session show`
    # still shows the recovery report of the turn it lost.
    assert listed[worked]["status"] == "closed"
    assert "1 finished session not shown" in status
    assert "Recovery report" not in status
    assert "Recovery report" in user_project.tk("session", "show", worked, env=WIDE).stdout


def test_status_counts_finished_sessions_instead_of_drawing_them(
    user_project: UserProject,
) -> None:
    """``status`` draws the sessions still in flight; a finished one is counted, listed by
    ``session list`` and kept in ``status --json``."""
    kept = _session(user_project, "kept", ["true"])
    gone = _session(user_project, "gone", ["true"])
    user_project.tk("session", "delete", gone, "--request-id", "delete-gone")

    status = user_project.tk("status", env=WIDE).stdout
    assert kept[:8] in status and gone[:8] not in status, status
    assert "1 finished session not shown: `turnkeeper session list` lists every session" in status
    assert gone[:8] in user_project.tk("session", "list", env=WIDE).stdout
    listed = {s["session_id"]: s["status"] for s in user_project.tk_json("status")["sessions"]}
    assert listed == {kept: "ready", gone: "deleted"}

    user_project.tk("session", "delete", kept, "--request-id", "delete-kept")
    status = user_project.tk("status", env=WIDE).stdout
    assert "Sessions" not in status and kept[:8] not in status, status
    assert "2 finished sessions not shown" in status


def _cells_of_row(table: str, session_prefix: str) -> list[str]:
    """The cells of one session's row, each the text of all its lines with whitespace
    removed (a folded or wrapped cell reads the same)."""
    lines = table.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(f"│ {session_prefix} "))
    row = [lines[first]]
    for line in lines[first + 1 :]:
        if not line.startswith("│") or line.split("│")[1].strip():
            break  # a border, or the next row (its first cell not empty)
        row.append(line)
    columns = [[cell for cell in line.strip("│").split("│")] for line in row]
    return ["".join("".join(part.split()) for part in cell) for cell in zip(*columns, strict=True)]


def test_a_status_reason_is_whole_on_an_80_column_terminal(user_project: UserProject) -> None:
    """The default width of a pipe or a small terminal: the status's reason is folded
    onto more lines, never cut short with an ellipsis."""
    # An agent that does nothing on a goal with a criterion it never meets.
    user_project.tk("goal", "add", "a goal", "--id", "idle", "-c", "the work is reviewed")
    user_project.tk("todo", "add", "idle", "the work", "--id", "t-idle")
    config = user_project.host_config("host-idle", {"command": ["true"]})
    idle = user_project.tk(
        "session", "create", "idle", "--host", "subprocess", "--host-config", config,
        "--workspace", ".", "-q",
    ).stdout.strip()  # fmt: skip
    # Suspended for no progress: run exits 12 (README, "Errors and exit codes").
    user_project.tk("run", "--session", idle, timeout=90, expect=12)
    stopped = _session(user_project, "paused", ["true"])
    user_project.tk("session", "stop", stopped, "--reason", "paused by me for the weekend")
    narrow = {"COLUMNS": "80"}
    listed = {s["session_id"]: s for s in user_project.tk_json("session", "list")}
    assert listed[idle]["status_reason"] == "no_progress", listed[idle]
    for table in (
        user_project.tk("status", env=narrow).stdout,
        user_project.tk("session", "list", env=narrow).stdout,
    ):
        assert all(len(line) <= 80 for line in table.splitlines()), table
        for sid, state in listed.items():
            shown = f"{state['status']} ({state['status_reason']})"
            assert _cells_of_row(table, sid[:8])[3] == "".join(shown.split()), table
