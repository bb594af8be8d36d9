"""An agent CLI host that cannot run here is refused before it costs a turn, with what
``turnkeeper doctor`` would say and its fix.

* ``session create --host codex`` with no key the CLI would use is refused
  (``FAILED_PRECONDITION``, ``host_not_ready``), naming the finding and the fix, and
  writes nothing; with the key exported it is created;
* ``run`` checks each such session before its first turn: one whose key is gone is
  suspended with reason ``host_not_ready`` (no turn accepted, no attempt spent) while
  another session runs to its end.

The Codex CLI here is a stand-in that answers ``--version`` as the pinned one does: the
checks are the doctor's, and no turn of it ever runs.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from tests.usage.project import UserProject

CODEX_FIX = "set OPENAI_API_KEY (or CODEX_API_KEY) or run `codex login`"


def _codex_config(project: UserProject, tmp_path: Path) -> str:
    """A Codex host config with a CLI that is found and of the tested version, and a
    Codex home of its own holding no login."""
    binary = tmp_path / "bin" / "codex"
    binary.parent.mkdir()
    binary.write_text('#!/bin/sh\necho "codex-cli 0.171.0"\n')
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    home = tmp_path / "codex-home"
    home.mkdir()
    return project.host_config("codex", {"binary": str(binary), "codex_home": str(home)})


def _without_keys(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The user's environment with no OpenAI key set (an empty value is unset to the
    checks, as to the CLI) and a HOME with no login in it."""
    home = tmp_path / "user-home"
    home.mkdir(exist_ok=True)
    return {"OPENAI_API_KEY": "", "CODEX_API_KEY": "", "HOME": str(home), **extra}


def test_session_create_refuses_a_codex_host_without_a_key(
    user_project: UserProject, tmp_path: Path
) -> None:
    user_project.tk("goal", "add", "Fix the parser", "--id", "parser")
    config = _codex_config(user_project, tmp_path)
    before = user_project.durable_digest()
    exclude = (user_project.root / ".git" / "info" / "exclude").read_text()

    refused = user_project.tk(
        "session", "create", "parser", "--host", "codex", "--host-config", config,
        "--workspace", ".", "--json", expect=6, env=_without_keys(tmp_path),
    )  # fmt: skip
    error = json.loads(refused.stdout)["error"]
    assert (error["code"], error["reason"]) == ("FAILED_PRECONDITION", "host_not_ready"), error
    assert "no key or login found" in error["message"] and CODEX_FIX in error["message"]
    (finding,) = error["details"]["findings"]
    assert (finding["check"], finding["status"], finding["fix"]) == ("key", "no_key", CODEX_FIX)
    # Refused before anything was written: no event, no session, no git exclude.
    assert user_project.durable_digest() == before
    assert user_project.tk_json("session", "list") == []
    assert (user_project.root / ".git" / "info" / "exclude").read_text() == exclude
    # The same without --json: the finding and the fix on stderr.
    plain = user_project.tk(
        "session", "create", "parser", "--host", "codex", "--host-config", config,
        "--workspace", ".", expect=6, env=_without_keys(tmp_path),
    )  # fmt: skip
    assert "host_not_ready" in plain.stderr and "codex login" in plain.stderr, plain.stderr

    # With the key exported where the command runs, the same session is created.
    keyed = _without_keys(tmp_path, OPENAI_API_KEY="sk-test")
    created = user_project.tk(
        "session", "create", "parser", "--host", "codex", "--host-config", config,
        "--workspace", ".", "--json", env=keyed,
    )  # fmt: skip
    assert json.loads(created.stdout)["host_kind"] == "codex"


def test_run_suspends_a_session_whose_cli_is_not_ready_and_drives_the_others(
    user_project: UserProject, tmp_path: Path
) -> None:
    user_project.tk("goal", "add", "Fix the parser", "--id", "parser")
    user_project.tk("todo", "add", "parser", "Fix it", "--id", "t-fix")
    keyed = _without_keys(tmp_path, OPENAI_API_KEY="sk-test")
    codex = user_project.tk(
        "session", "create", "parser", "--host", "codex",
        "--host-config", _codex_config(user_project, tmp_path), "--workspace", ".", "--json",
        env=keyed,
    ).json()  # fmt: skip
    user_project.tk("goal", "add", "Write notes", "--id", "notes")
    user_project.tk("todo", "add", "notes", "Write them", "--id", "t-notes")
    plain = user_project.tk_json(
        "session", "create", "notes", "--host", "subprocess",
        "--host-config", user_project.host_config("plain", {"command": ["true"]}),
        "--workspace", ".",
    )  # fmt: skip

    # The key is not exported in the shell this run starts from. A session suspended
    # makes the run exit 12 (README, "Errors and exit codes"), the other one finished.
    done = user_project.tk("run", "--json", env=_without_keys(tmp_path), timeout=60, expect=12)
    records = [json.loads(line) for line in done.stdout.splitlines()]
    summary: dict[str, Any] = records[-1]
    assert summary["stops"] == {
        codex["session_id"]: "host_not_ready",
        plain["session_id"]: "goal_terminal",
    }, summary
    assert summary["outcomes"] == {
        codex["session_id"]: "suspended",
        plain["session_id"]: "finished",
    }, summary
    assert summary["exit_code"] == 12, summary
    assert summary["turns"] == 1 and summary["failed_turns"] == 0, summary
    said = [r for r in records if r.get("event") == "host_not_ready"]
    assert len(said) == 1 and CODEX_FIX in said[0]["progress"], records
    assert said[0]["findings"][0]["status"] == "no_key"

    session = user_project.tk_json("session", "show", codex["session_id"])
    assert session["status"] == "suspended"
    assert session["status_reason"].startswith("host_not_ready: ") and (
        CODEX_FIX in session["status_reason"]
    ), session["status_reason"]
    assert session["counters"]["turns_accepted"] == 0  # no turn, no attempt spent
    assert session["recovery"] is None and session["consecutive_host_failures"] == 0
