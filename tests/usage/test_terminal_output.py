"""What people read: text from users, agents and the database never acts on the terminal.

A title with an escape sequence (recorded before titles were checked, or by any
other writer of the store) and a title with Rich markup in it are shown as typed
by ``goal show``, ``goal list`` and ``status``: the escape as ``\\x1b``, the markup
literally. ``--json`` output carries the exact text. And what people copy — ids, paths,
refs and commands — stays whole on its line at a pipe's default 80 columns.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from tests.usage.project import UserProject
from tests.usage.refusals import record_as_an_older_version_did
from turnkeeper.kernel.events import GoalCreated, TodoAdded

RED = "\x1b[31mred alert\x1b[0m"
SHOWN_RED = "\\x1b[31mred alert\\x1b[0m"
MARKUP = "[bold]not bold[/]"
WIDE = {"COLUMNS": "250"}  # no table cell is cut short


@pytest.fixture
def project(user_project: UserProject) -> UserProject:
    user_project.tk("goal", "add", MARKUP, "--id", "markup")
    now = datetime.now(UTC)
    record_as_an_older_version_did(
        user_project,
        "escape",
        GoalCreated(
            goal_id="escape",
            title=RED,
            objective="",
            criteria=[],
            agents_requiring_vision=[],
            at=now,
        ),
    )
    record_as_an_older_version_did(
        user_project,
        "markup",
        TodoAdded(
            todo_id="t-red",
            title=RED,
            depends_on=[],
            required_evidence=[],
            successor_required=False,
            successor_of=None,
            at=now,
        ),
    )
    user_project.tk("todo", "add", "markup", MARKUP, "--id", "t-markup")
    return user_project


def shown(project: UserProject, *args: str) -> str:
    done = project.tk(*args, env=WIDE)
    assert "\x1b" not in done.stdout, repr(done.stdout)
    assert "Traceback" not in done.stderr
    return done.stdout


def test_goal_show_prints_escapes_and_markup_as_typed(project: UserProject) -> None:
    out = shown(project, "goal", "show", "markup")
    assert out.startswith(f"{MARKUP}  markup"), out  # the goal's title
    assert f"t-markup │ {MARKUP}" in out, out  # the todo's, in the table
    assert f"t-red    │ {SHOWN_RED}" in out, out
    assert f"todo '{MARKUP}' is open" in out, out  # and in the audit's blockers
    assert SHOWN_RED in shown(project, "goal", "show", "escape")


def test_status_and_goal_list_print_escapes_and_markup_as_typed(project: UserProject) -> None:
    for args in (("status",), ("goal", "list")):
        out = shown(project, *args)
        assert MARKUP in out, out
        assert SHOWN_RED in out, out


def test_json_output_keeps_the_exact_text(project: UserProject) -> None:
    state = project.tk_json("goal", "show", "markup")["state"]
    assert state["goal"]["title"] == MARKUP
    assert state["todos"]["t-red"]["title"] == RED
    titles = {g["id"]: g["title"] for g in project.tk_json("status")["goals"]}
    assert titles == {"markup": MARKUP, "escape": RED}


def test_init_prints_its_paths_on_one_line_on_a_narrow_terminal(user_project: UserProject) -> None:
    """A path is copied from the terminal: never broken over lines, whatever the width."""
    deep = user_project.root / ("a-rather-long-directory-name-" * 3) / "project"
    deep.mkdir(parents=True)
    user_project.git("-C", str(deep), "init", "-q")
    done = user_project.tk("init", str(deep), env={"COLUMNS": "80"})
    state_dir = deep / ".turnkeeper"
    database = f"sqlite:///{state_dir / 'turnkeeper.db'}"
    assert done.stdout == f"initialised {state_dir} (database {database})\n", done.stdout


def test_session_and_turn_show_keep_refs_and_paths_whole_at_80_columns(
    user_project: UserProject,
) -> None:
    """The snapshot ref, the workspace and the last snapshot's line are read and copied
    whole: a narrow terminal (a pipe's default) does not break them over lines."""
    user_project.tk("goal", "add", "a goal", "--id", "g")
    user_project.tk("todo", "add", "g", "one", "--id", "t")
    config = user_project.host_config("host", {"command": ["true"]})
    sid = user_project.tk(
        "session", "create", "g", "--host", "subprocess", "--host-config", config, "-q"
    ).stdout.strip()
    user_project.tk("run", "--max-turns", "1", timeout=90)
    (snapshot,) = user_project.tk_json("session", "snapshots", sid)["snapshots"]
    narrow = {"COLUMNS": "80"}

    turn = user_project.tk("turn", "show", snapshot["turn_id"], env=narrow).stdout
    lines = turn.splitlines()
    assert f"Snapshot: {snapshot['snapshot_ref']} commit {snapshot['workspace_commit'][:12]}" in (
        lines
    ), turn
    assert any(line.startswith(f"  session {sid}  goal g  todo t") for line in lines), turn

    listed = user_project.tk("session", "snapshots", sid, env=narrow).stdout
    row = f"│ {snapshot['turn_id']} │ "
    assert any(
        line.startswith(row) and f" │ {snapshot['workspace_commit'][:12]} │ " in line
        for line in listed.splitlines()
    ), listed
    assert "…" not in listed, listed

    shown = user_project.tk("session", "show", sid, env=narrow).stdout.splitlines()
    assert f"  workspace {user_project.root}" in shown, shown
    last = re.compile(
        rf"  last snapshot: turn {snapshot['turn_id']}, kernel seq \d+, "
        rf"snapshot {snapshot['workspace_commit'][:12]} "
        rf"\(tree {snapshot['workspace_tree'][:12]}, on HEAD \w{{12}}\)"
    )
    assert any(last.fullmatch(line) for line in shown), shown


def test_plain_lines_with_ids_and_paths_are_whole_at_80_columns(
    user_project: UserProject,
) -> None:
    """A created session, an operator's action, a doctor's finding and an error name ids,
    paths and commands that people copy: at a pipe's default width each stays on its
    line (a terminal wraps it for the eye; the text keeps no line break)."""
    narrow = {"COLUMNS": "80"}
    user_project.tk("goal", "add", "a goal", "--id", "g")
    config = user_project.host_config("host", {"command": ["true"]})
    created = user_project.tk(
        "session", "create", "g", "--host", "subprocess", "--host-config", config,
        "--request-id", "a-request-id-long-enough-to-reach-past-eighty-columns", env=narrow,
    ).stdout  # fmt: skip
    (sid,) = [s["session_id"] for s in user_project.tk_json("session", "list")]
    assert created == (
        f"created session {sid} on goal g "
        "(request a-request-id-long-enough-to-reach-past-eighty-columns)\n"
    ), created

    stopped = user_project.tk("session", "stop", sid, env=narrow).stdout.splitlines()
    assert stopped[0] == f"stopped session {sid} (suspended)", stopped

    doctor = user_project.tk("doctor", "subprocess", env=narrow).stdout.splitlines()
    assert any(
        line.endswith("host kind turnkeeper.hosts.subprocess_host:SubprocessHost loads; "
                      "it needs nothing outside turnkeeper")
        for line in doctor
    ), doctor  # fmt: skip

    refused = user_project.tk("runner", "status", expect=None, env=narrow)
    socket = user_project.root / ".turnkeeper" / "runner" / "runner.sock"
    lines = refused.stderr.splitlines()
    assert lines[0] == (
        "UNAVAILABLE (runner_not_running): no runner runs for this project "
        "(`turnkeeper runner start`)"
    ), lines
    assert lines[1].startswith(f"  cause: no runner answers at {socket}: "), lines


def test_evidence_ids_are_whole_in_goal_show_and_evidence_list_at_80_columns(
    user_project: UserProject,
) -> None:
    """An agent's evidence ids (``ev-turn-<turn>-<n>``) are what a user passes to
    ``--evidence``: at a pipe's default width the tables show them whole, and the two
    of one turn, which share all but their last digit, stay told apart."""
    user_project.tk("goal", "add", "a goal", "--id", "g", "-c", "checked twice")
    user_project.tk("todo", "add", "g", "one", "--id", "t")
    result = (
        '{"kind": "result", "data": {"todo_done": true, "evidence": ['
        '{"key": "first", "command": "true"}, {"key": "second", "command": "true"}]}}'
    )
    agent = user_project.agent("agent.sh", f"#!/bin/sh\necho '{result}'\n")
    config = user_project.host_config("host", {"command": [str(agent)], "event_format": "jsonl"})
    user_project.tk("session", "create", "g", "--host", "subprocess", "--host-config", config)
    user_project.tk("run", "--max-turns", "1", timeout=90)
    ids = [row["id"] for row in user_project.tk_json("evidence", "list", "g")["evidence"]]
    assert len(ids) == 2 and all(i.startswith("ev-turn-") for i in ids), ids

    narrow = {"COLUMNS": "80"}
    for shown in (
        user_project.tk("goal", "show", "g", env=narrow).stdout,
        user_project.tk("evidence", "list", "g", env=narrow).stdout,
    ):
        for evidence_id in ids:
            assert f"│ {evidence_id} │" in shown, shown
