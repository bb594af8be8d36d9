"""Secrets stay out of the log and out of the agent's reach, as a user meets it.

A project made by ``turnkeeper init`` in a git repository, the real CLI. A key in a
session's ``--host-config`` (an ``env`` entry, a credential-shaped value under any
name, an http effect's header) is refused before anything is written, the refusal
never repeating it, and no table of the database holds it. Exported in the shell
``run`` starts in and named by the session's ``pass_env``, the key reaches the agent;
a variable no config names does not, and the control plane's own credentials
(``PGPASSWORD``, a database URL) never do, even when named: they are absent from the
running host's ``/proc/PID/environ``. Nothing the CLI prints, nor a handoff packet, holds the key.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.boundary.fakes import openai_key
from tests.usage.project import UserProject, wait_for

AGENT = """#!/bin/sh
# One turn: say where it runs, wait to be looked at, write the page.
set -eu
echo $$ > "$PID_FILE"
while [ ! -e "$PID_FILE.seen" ]; do sleep 0.1; done
echo "# page" > page.md
printf '{"kind": "result", "data": {"todo_done": true, "evidence": [%s]}}\\n' \\
  '{"key": "page", "command": "test -s page.md"}'
"""


def _rows_holding(database: Path, needle: str) -> list[str]:
    """Every table's rows, as text, that contain ``needle``."""
    found: list[str] = []
    with sqlite3.connect(database) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in db.execute(f'SELECT * FROM "{table}"'):  # the file's own table names
                text = " ".join(str(v) for v in row)
                if needle in text:
                    found.append(f"{table}: {text[:200]}")
    return found


def test_a_key_in_the_host_config_is_refused_and_stored_nowhere(
    user_project: UserProject,
) -> None:
    key = openai_key()
    goal = user_project.tk("goal", "add", "Page", "-c", "the page exists", "-q").stdout.strip()
    configs = {
        "env.OPENAI_API_KEY": {"command": ["./agent.sh"], "env": {"OPENAI_API_KEY": key}},
        "env.NOTES": {"command": ["./agent.sh"], "env": {"NOTES": f"use {key}"}},
        "effects.providers.http.headers.Authorization": {
            "command": ["./agent.sh"],
            "effects": {
                "providers": {
                    "http": {
                        "url": "https://orders.example/api",
                        "readback_url": "https://orders.example/api/{key}",
                        "headers": {"Authorization": f"Bearer {key}"},
                    }
                }
            },
        },
    }
    for field, config in configs.items():
        name = field.replace(".", "-")
        arg = user_project.host_config(name, config)
        refused = user_project.tk(
            "session", "create", goal, "--host", "subprocess", "--host-config", arg, "--json",
            expect=3,
        )  # fmt: skip
        error = json.loads(refused.stdout)["error"]
        assert error["reason"] == "secret_in_config" and error["details"] == {"field": field}
        assert key not in refused.stdout + refused.stderr
    assert user_project.tk_json("session", "list") in ([], {"sessions": []})
    assert _rows_holding(user_project.database, key) == []
    assert _rows_holding(user_project.database, key[:12]) == []


def test_the_agent_gets_the_users_key_but_not_the_control_planes_credentials(
    user_project: UserProject,
) -> None:
    key = openai_key()
    pid_file = user_project.root.parent / "agent.pid"
    agent = user_project.agent("agent.sh", AGENT)
    spec = {"command": [str(agent)], "event_format": "jsonl"}
    # The agent asks for its key by name; PGPASSWORD it may not have even when asked.
    spec["pass_env"] = ["PID_FILE", "OPENAI_API_KEY", "PGPASSWORD"]
    config = user_project.host_config("agent", spec)
    goal = user_project.tk("goal", "add", "Page", "-c", "the page exists", "-q").stdout.strip()
    user_project.tk("todo", "add", goal, "Write the page", "--requires-evidence", "page")
    created = user_project.tk_json(
        "session", "create", goal, "--host", "subprocess", "--host-config", config
    )
    session = str(created["session_id"])
    database_url = "postgresql://tk:db-password-42@db.internal/tk"
    env = {
        "PID_FILE": str(pid_file),
        "OPENAI_API_KEY": key,  # the user's own, exported in their shell
        "PGPASSWORD": "db-password-42",  # the control plane's
        "TURNKEEPER_TEST_POSTGRES_URL": database_url,
        "DEPLOY_KEY_FILE_CONTENTS": "set only where run starts",  # named by no config
    }
    run = user_project.start("run", "--json", env=env)
    wait_for(pid_file.exists, 60, "the agent to start")
    wait_for(lambda: pid_file.read_text().strip() != "", 10, "the agent's pid")
    pid = int(pid_file.read_text())
    environ = dict(
        entry.split("=", 1)
        for entry in Path(f"/proc/{pid}/environ").read_text().split("\0")
        if "=" in entry
    )
    (pid_file.parent / f"{pid_file.name}.seen").touch()
    # The agent never offers the evidence its todo needs: the session is suspended for
    # no progress, and run exits 12 (README, "Errors and exit codes").
    assert run.wait(timeout=120) == 12, run.output()
    assert run.summary()["outcomes"] == {session: "suspended"}, run.output()

    assert environ.get("OPENAI_API_KEY") == key
    assert "PGPASSWORD" not in environ and "TURNKEEPER_TEST_POSTGRES_URL" not in environ
    assert not [v for v in environ.values() if "db-password-42" in v]
    assert "DEPLOY_KEY_FILE_CONTENTS" not in environ  # not named: not passed on
    assert environ["PATH"] and environ["HOME"]  # what any program needs still is
    assert environ["TURNKEEPER_SESSION_ID"] == session

    # The key the agent had is in nothing turnkeeper kept or shows.
    assert _rows_holding(user_project.database, key) == []
    shown = [
        user_project.tk("session", "show", session, "--json").stdout,
        user_project.tk("session", "list", "--json").stdout,
        user_project.tk("logs", session, "--json").stdout,
        user_project.tk("status", "--json").stdout,
        run.output(),
    ]
    user_project.tk("handoff", goal, "-o", "packet.json")
    shown.append((user_project.root / "packet.json").read_text())
    assert not [text for text in shown if key in text]


def test_doctor_names_a_secret_stored_before_secrets_were_refused(
    user_project: UserProject,
) -> None:
    """A session an older turnkeeper created with a key in its ``env``: the event log
    keeps it (it is never rewritten), and ``doctor`` says so, with the field and the
    fix, never the value."""
    from turnkeeper.runtime.services.sessions import SessionService
    from turnkeeper.store import open_store

    key = openai_key()
    goal = user_project.tk("goal", "add", "Page", "-c", "the page exists", "-q").stdout.strip()
    config = {"command": ["./agent.sh"], "env": {"OPENAI_API_KEY": key}}
    # What `session create` wrote before it refused secrets: the record as given.
    store = open_store(f"sqlite:///{user_project.database}")
    try:
        old = SessionService(store).create(
            goal, user_project.root, "subprocess", config, request_id="made-by-an-older-version"
        )
    finally:
        store.close()

    found = user_project.tk("doctor", "--json", expect=6)
    report = json.loads(found.stdout)
    (finding,) = [f for f in report["findings"] if f["status"] == "secret_in_config"]
    assert finding["check"] == f"session {old.session_id[:8]} secrets"
    assert "env.OPENAI_API_KEY" in finding["detail"] and "rotate" in finding["fix"]
    assert old.session_id in finding["fix"]  # how to stop it, by its full id
    assert key not in found.stdout + found.stderr
    text = user_project.tk("doctor", expect=6)
    assert "secret_in_config" in text.stdout and key not in text.stdout + text.stderr
