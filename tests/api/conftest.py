"""A real project for the HTTP API, on each backend: a git repository whose
``turnkeeper init`` store is SQLite (the file in ``.turnkeeper/``) or PostgreSQL (a
fresh schema, tests/pg.py), a goal ``g`` with todos ``t1`` and ``t2``, one session of
the scripted host (a real subprocess per turn), and the admin token recorded.

``ApiProject.client`` calls the app in-process (FastAPI's TestClient: the app's own
logic, the store real); :func:`served` runs it in a real uvicorn on a free port for
what needs a socket (live events). ``digest()`` hashes every row of every table of
the store, read on a connection of its own, to prove that a call wrote nothing.
"""

from __future__ import annotations

import hashlib
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests import pg
from turnkeeper.json_types import JsonDict
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, CriterionSpec, TodoSpec
from turnkeeper.project_api.sessions import InProcessHosts, run_sessions
from turnkeeper.runtime.control.controller import RunSummary
from turnkeeper.runtime.services.access import AccessService, ShareMode
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.project import init_project
from turnkeeper.runtime.services.session_admission import create_session
from turnkeeper.server.app import create_app
from turnkeeper.store import EventStore, open_store

BACKENDS = ["sqlite", "postgresql"]
ADMIN = "tka_test-admin-token-0123456789"
GOAL = "g"
GIT = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        [*GIT, *args], cwd=repo, check=True, capture_output=True, text=True, timeout=60
    )
    return done.stdout


def write_turn(title: str, path: str, content: str, *, chatter: int = 0) -> dict[str, Any]:
    """A scripted turn that writes one file and reports its todo done with evidence;
    ``chatter`` messages first, a tenth of a second apart (a turn to watch live)."""
    talk: list[dict[str, Any]] = []
    for n in range(chatter):
        talk += [{"op": "message", "text": f"step {n}"}, {"op": "sleep", "seconds": 0.1}]
    return {
        "match": {"todo": title},
        "steps": [*talk, {"op": "write", "path": path, "content": content}],
        "result": {
            "todo_done": True,
            "evidence": [{"key": f"{path}-exists", "command": f"test -f {path}"}],
        },
    }


@dataclass
class ApiProject:
    backend: str
    root: Path
    url: str
    store: EventStore
    app: FastAPI
    client: TestClient
    session_id: str
    extra: list[EventStore] = field(default_factory=list)

    def headers(self, token: str | None = ADMIN) -> dict[str, str]:
        return {} if token is None else {"Authorization": f"Bearer {token}"}

    def share(self, session_id: str, mode: ShareMode) -> str:
        return AccessService(self.store).create_share(session_id, mode).token

    def new_session(self, request_id: str) -> str:
        state = create_session(
            self.store,
            GOAL,
            self.root,
            "scripted",
            {"state_dir": str(self.root.parent / "host-state"), "script": {"turns": []}},
            request_id=request_id,
        )
        return state.session_id

    def run_turns(self, turns: int, session_id: str | None = None) -> RunSummary:
        """Drive the session ``turns`` turns in this process, as ``run --max-turns``."""
        return run_sessions(
            self.store,
            InProcessHosts(),
            sessions=[session_id or self.session_id],
            max_turns=turns,
            lease_seconds=30,
            host_timeout_seconds=120,
        )

    def digest(self) -> str:
        """sha256 over every row of every table, read as another program would."""
        return store_digest(self.backend, self.url)


def store_digest(backend: str, url: str) -> str:
    """sha256 over every row of every table of the store at ``url``, read as another
    program would (on a connection of its own)."""
    rows: list[str] = []
    if backend == "sqlite":
        path = url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path)
        try:
            names = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
                )
            ]
            for name in names:
                found = conn.execute(f'SELECT * FROM "{name}"').fetchall()
                rows.extend(sorted(f"{name}:{row!r}" for row in found))
        finally:
            conn.close()
    else:
        names = [
            r[0]
            for r in pg.execute(
                url,
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = current_schema() ORDER BY table_name",
            )
        ]
        for name in names:
            found = pg.execute(url, f'SELECT * FROM "{name}"')
            rows.extend(sorted(f"{name}:{row!r}" for row in found))
    assert rows, "the digest saw no rows: it would prove nothing"
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()


def make_project(backend: str, tmp_path: Path, turns: list[dict[str, Any]]) -> ApiProject:
    root = tmp_path / "repo"
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "README").write_text("api test workspace\n")
    database = pg.fresh_postgres_url() if backend == "postgresql" else None
    project, _ = init_project(root, database)
    git(root, "add", "-A")  # with the .gitignore init wrote: .turnkeeper/ stays out
    git(root, "commit", "-qm", "initial")
    url = project.database_url
    store = open_store(url)
    goals = GoalService(store)
    goals.create(CreateGoal(goal_id=GOAL, title="api", criteria=[CriterionSpec(id="c1", text="x")]))
    for tid, title in (("t1", "write a"), ("t2", "write b")):
        goals.submit(GOAL, AddTodo(todo=TodoSpec(todo_id=tid, title=title)))
    config: JsonDict = {"state_dir": str(tmp_path / "host-state"), "script": {"turns": list(turns)}}
    session = create_session(store, GOAL, root, "scripted", config, request_id="create-1")
    AccessService(store).set_admin_token(ADMIN)
    app = create_app(store, root)
    return ApiProject(backend, root, url, store, app, TestClient(app), session.session_id)


STANDARD_TURNS = [write_turn("write a", "a.txt", "A\n"), write_turn("write b", "b.txt", "B\n")]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def api_project(backend: str, tmp_path: Path) -> Iterator[ApiProject]:
    project = make_project(backend, tmp_path, STANDARD_TURNS)
    try:
        yield project
    finally:
        project.client.close()
        project.store.close()


@contextmanager
def served(app: FastAPI) -> Iterator[str]:
    """``app`` in a real uvicorn on a free loopback port, in a thread; its base URL."""
    # Created as turnkeeper serve creates its socket (TCP named: asyncio then turns off
    # Nagle's algorithm on each connection, as it does for a socket it made itself).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()
