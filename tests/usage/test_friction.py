"""Friction a stranger trips on (issue 39), met through the real ``turnkeeper`` command:
each command does what a first-time user most plausibly means, or says at once what
is missing, instead of refusing one missing piece at a time."""

from __future__ import annotations

import getpass
import json
import uuid
from pathlib import Path

import pytest

from tests.extensions.kit import clean_env, turnkeeper
from tests.pg import with_database
from tests.usage.project import UserProject
from tests.usage.refusals import refused

GOAL = "g1"


@pytest.fixture
def project(user_project: UserProject) -> UserProject:
    user_project.tk("goal", "add", "Ship the parser", "--id", GOAL)
    return user_project


def test_gate_resolve_needs_only_a_decision(project: UserProject) -> None:
    gate = project.tk_json("gate", "open", GOAL, "Approve the release")["gate_id"]
    # Without --decision: the one thing turnkeeper cannot guess is named, not --by.
    missing = project.tk("gate", "resolve", gate, expect=2)
    assert "--decision" in missing.stderr and "--by" not in missing.stderr, missing.stderr
    resolved = project.tk_json("gate", "resolve", gate, "--decision", "approved")
    assert resolved["gate"]["status"] == "resolved"
    assert resolved["gate"]["resolution"]["by"] == getpass.getuser()
    assert resolved["gate"]["resolution"]["decision"] == "approved"
    # --by still names someone else when given.
    other = project.tk_json("gate", "open", GOAL, "Approve the docs")["gate_id"]
    by_alice = project.tk_json("gate", "resolve", other, "--decision", "no", "--by", "alice")
    assert by_alice["gate"]["resolution"]["by"] == "alice"
    assert "login name" in project.tk("gate", "resolve", "--help").stdout


def test_monitor_readback_takes_a_plain_word(project: UserProject) -> None:
    monitor = project.tk_json("monitor", "add", GOAL, "ci", "--cadence", "60")["monitor_id"]
    plain = project.tk_json("monitor", "readback", monitor, "--value", "green")
    assert plain["monitor"]["last_readback"]["value"] == "green"
    number = project.tk_json("monitor", "readback", monitor, "--value", "3")
    assert number["monitor"]["last_readback"]["value"] == 3
    obj = project.tk_json("monitor", "readback", monitor, "--value", '{"failing": 0}')
    assert obj["monitor"]["last_readback"]["value"] == {"failing": 0}
    # Text that sets out to be JSON and is broken is still refused, not stored as prose.
    refused(project, "monitor", "readback", monitor, "--value", '{"a": b}', reason="malformed_json")
    refused(project, "monitor", "readback", monitor, "--value", "NaN", reason="malformed_json")


def test_doctor_judges_only_the_hosts_a_project_uses(
    user_project: UserProject, tmp_path: Path
) -> None:
    """A project on the subprocess host is ready although Codex and Claude have no key
    here: theirs are listed, as not used, and fail only when asked for by name."""
    project = user_project
    project.tk("goal", "add", "Ship the parser", "--id", GOAL)
    config = project.host_config("subprocess", {"command": ["/bin/true"]})
    project.tk("session", "create", GOAL, "--host", "subprocess", "--host-config", config)
    env = clean_env(tmp_path / "home", [])  # no key, no login, no agent CLI on PATH

    done = turnkeeper("doctor", "--json", cwd=project.root, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["sessions_checked"] == 1
    assert {"codex", "claude"} <= set(report["unused"]) and "subprocess" not in report["unused"]
    codex = [f for f in report["findings"] if f["extension"] == "codex" and f["status"] != "ok"]
    assert codex, report["findings"]  # still shown, with the fix, for when it is wanted
    text = turnkeeper("doctor", cwd=project.root, env=env)
    assert text.returncode == 0 and "all ready" in text.stdout, text.stdout + text.stderr
    assert "not used by this project" in text.stdout

    # Named on the command line, Codex is wanted: its missing key is a problem.
    asked = turnkeeper("doctor", "codex", "--json", cwd=project.root, env=env)
    assert asked.returncode == 6, asked.stdout + asked.stderr
    assert json.loads(asked.stdout)["error"]["reason"] == "doctor_findings"


def test_a_host_config_without_command_names_the_field(project: UserProject) -> None:
    config = project.host_config("no-command", {"event_format": "jsonl"})
    args = ("session", "create", GOAL, "--host", "subprocess", "--host-config", config)
    error = refused(project, *args, "--workspace", ".", reason="invalid_host_config")
    assert error["message"] == (
        "invalid subprocess host config: `command` is required for the subprocess host"
    ), error
    assert error["details"]["field"] == "command"
    plain = project.tk(*args, "--workspace", ".", expect=3)
    (line,) = plain.stderr.strip().splitlines()[:1]
    assert "`command` is required for the subprocess host" in line, plain.stderr
    assert "[{" not in plain.stderr and "'loc'" not in plain.stderr, plain.stderr


def test_a_line_that_is_not_json_is_quoted_in_the_turn_failure(project: UserProject) -> None:
    project.tk("todo", "add", GOAL, "Write the tokenizer", "--id", "t1")
    # A banner an agent prints before its events, with a terminal escape in it.
    agent = project.agent(
        "chatty-agent",
        "#!/bin/sh\nprintf 'Starting up \\033[2J now\\n'\n"
        'echo \'{"kind": "result", "data": {"todo_done": true}}\'\n',
    )
    config = project.host_config("chatty", {"command": [str(agent)], "event_format": "jsonl"})
    sid = project.tk_json(
        "session", "create", GOAL, "--host", "subprocess", "--host-config", config,
        "--workspace", ".",
    )["session_id"]  # fmt: skip
    project.tk("run", "--max-turns", "1", expect=None)

    (turn,) = project.tk_json("turn", "list", sid)["turns"]
    shown = project.tk("turn", "show", turn["turn_id"]).stdout
    assert "the line: 'Starting up \\x1b[2J now'" in shown, shown
    assert "\x1b[2J" not in shown


def test_a_database_that_does_not_exist_is_not_transient(
    user_project: UserProject, postgres_url: str
) -> None:
    """The server is up but has no such database: waiting will not help, so it is
    FAILED_PRECONDITION (not UNAVAILABLE, "retry") with the ``createdb`` that fixes it."""
    name = f"tk_missing_{uuid.uuid4().hex[:12]}"
    url = with_database(postgres_url, name)
    error = refused(
        user_project, "init", "--database-url", url,
        code="FAILED_PRECONDITION", reason="database_not_found",
    )  # fmt: skip
    assert error["details"]["database"] == name
    assert "createdb" in error["message"] and name in error["details"]["fix"]
    assert not (user_project.root / ".turnkeeper" / "database-url").exists()
    # A command on a project pointed at it says the same, at once.
    env = {"TURNKEEPER_DATABASE_URL": url}
    done = user_project.tk("goal", "list", "--json", env=env, expect=6)
    assert done.json()["error"]["reason"] == "database_not_found"


def test_init_says_when_a_database_already_holds_goals(tmp_path: Path, postgres_url: str) -> None:
    first = UserProject(tmp_path / "first")
    second = UserProject(tmp_path / "second")
    try:
        quiet = first.tk("init", "--database-url", postgres_url)
        assert "already holds" not in quiet.stderr, quiet.stderr  # an empty database
        first.tk("goal", "add", "Ship the parser", "--id", GOAL)
        again = first.tk("init", "--database-url", postgres_url, "--json")
        assert "already holds" not in again.stderr  # its own database, named again
        assert "already_held" not in again.json()

        joined = second.tk("init", "--database-url", postgres_url, "--json")
        assert joined.json()["already_held"] == {"goals": 1, "sessions": 0}
        assert "already holds 1 goal(s) and 0 session(s)" in joined.stderr, joined.stderr
    finally:
        first.close()
        second.close()
