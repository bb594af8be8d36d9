"""Projects for the effects tests: a git workspace, goal ``g`` with todo ``t1`` ("write a"),
and a scripted session whose one turn writes ``a.txt`` and requests effects."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnkeeper.kernel.session import SessionEvent
from turnkeeper.runtime.services.sessions import SESSION_CODEC, session_stream
from turnkeeper.store import EventStore

GOAL_ID, TODO_ID, TODO_TITLE = "g", "t1", "write a"
CLI_TIMEOUT = 120.0


def git_workspace(path: Path) -> Path:
    path.mkdir()
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=path, check=True)
    (path / "README").write_text("workspace\n")
    subprocess.run([*git, "add", "-A"], cwd=path, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=path, check=True)
    return path


def host_config(
    state_dir: Path, effects: list[Any], providers: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Scripted host config plus the session's ``effects`` section."""
    turn = {
        "match": {"todo": TODO_TITLE},
        "steps": [{"op": "write", "path": "a.txt", "content": "A\n"}],
        "result": {"todo_done": True, "effects": effects},
    }
    return {
        "state_dir": str(state_dir),
        "script": {"turns": [turn]},
        "effects": {"providers": providers},
    }


def session_events(store: EventStore, session_id: str) -> list[SessionEvent]:
    records = store.read_stream(session_stream(session_id))
    return [SESSION_CODEC.decode_event(r) for r in records]


def of_type(events: list[SessionEvent], kind: str) -> list[Any]:
    return [e for e in events if e.type == kind]


def host_runs(state_dir: Path) -> int:
    runs = state_dir / "runs.jsonl"
    return len(runs.read_text().splitlines()) if runs.exists() else 0


@dataclass
class CliProject:
    """A project driven only through the real CLI, each command its own process."""

    root: Path

    def env(self, crash_at: str | None = None) -> dict[str, str]:
        env = {
            **os.environ,
            "TURNKEEPER_DIR": str(self.root),
            "TURNKEEPER_OWNER": "tester",
            "no_proxy": "127.0.0.1,localhost",
            "NO_PROXY": "127.0.0.1,localhost",
        }
        env.pop("TURNKEEPER_CRASH_AT", None)
        env.pop("TURNKEEPER_DATABASE_URL", None)
        if crash_at is not None:
            env["TURNKEEPER_CRASH_AT"] = crash_at
        return env

    def run(self, *args: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "turnkeeper.cli.main", *args],
            cwd=self.root,
            env=self.env(crash_at),
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT,
            check=False,
        )

    def ok(self, *args: str, expect: int = 0) -> Any:
        """``turnkeeper ARGS --json``'s last document; ``expect``: its exit code (a
        ``run`` that stops at a gate exits 13, README "Errors and exit codes")."""
        done = self.run(*args, "--json")
        assert done.returncode == expect, (args, done.stdout, done.stderr)
        return last_json(done.stdout)


def last_json(text: str) -> Any:
    """The last of the JSON documents ``text`` holds (``run`` prints progress lines first)."""
    decoder, at, last = json.JSONDecoder(), 0, None
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        last, at = decoder.raw_decode(text, at)
    return last


def cli_project(root: Path, config: dict[str, Any]) -> tuple[CliProject, str]:
    """``init``, ``goal add``, ``todo add``, ``session create``: the session id."""
    project = CliProject(root)
    project.ok("init", str(root))
    project.ok("goal", "add", "effects goal", "--id", GOAL_ID)
    project.ok("todo", "add", GOAL_ID, TODO_TITLE, "--id", TODO_ID)
    workspace = git_workspace(root / "repo")
    config_file = root / "host-config.json"
    config_file.write_text(json.dumps(config))
    created = project.ok(
        "session",
        "create",
        GOAL_ID,
        "--host",
        "scripted",
        "--host-config",
        f"@{config_file}",
        "--workspace",
        str(workspace),
    )
    return project, str(created["session_id"])
