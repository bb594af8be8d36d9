"""Every read refuses a database known to be behind its workspace, as ``status`` does.

Two turns complete (two snapshots in git), then the database is put back to the copy
taken before them, as a restore from an older backup does: the log has lost both
turns, the workspace and its snapshots hold them. ``status`` and ``verify`` already
said DATA_LOSS (``database_behind_workspace``); ``goal show`` and the other reads
answered from the old copy as if it were the project's state. Now each refuses the
same way (exit 10), before it resolves what it was asked for; once the operator
accepts the loss (``repair --accept-loss``), each answers again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.usage.project import UserProject

DATA_LOSS = 10
RESULT = json.dumps({"kind": "result", "data": {"summary": "done", "todo_done": True}})


def _reads(sid: str) -> list[tuple[str, ...]]:
    return [
        ("goal", "show", "g"),
        ("goal", "list"),
        ("audit", "g"),
        ("todo", "list", "g"),
        ("todo", "show", "t1"),
        ("gate", "list", "g"),
        ("evidence", "list", "g"),
        ("session", "show", sid),
        ("session", "list"),
        ("session", "snapshots", sid),
        ("turn", "list", sid),
        ("turn", "show", "turn-that-the-log-lost"),  # refused before it is looked up
        ("logs", sid),
        ("operation", "show", "create-1"),
        ("handoff", "g"),
    ]


def _restore(database: Path, copy: Path) -> None:
    for suffix in ("-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(copy, database)


def test_reads_refuse_a_database_behind_its_workspace(user_project: UserProject) -> None:
    project = user_project
    agent = project.agent("agent", f"#!/bin/sh\necho work >> work.txt\necho '{RESULT}'\n")
    project.tk("goal", "add", "Two things", "--id", "g")
    for todo in ("t1", "t2"):
        project.tk("todo", "add", "g", f"do {todo}", "--id", todo)
    config = project.host_config("agent", {"command": [str(agent)], "event_format": "jsonl"})
    sid = project.tk_json(
        "session", "create", "g", "--host", "subprocess", "--host-config", config,
        "--request-id", "create-1",
    )["session_id"]  # fmt: skip
    for suffix in ("-wal", "-shm"):  # every write is in the file: a clean copy
        assert not Path(f"{project.database}{suffix}").exists()
    older = project.root.parent / "turnkeeper.db.before-the-turns"
    shutil.copyfile(project.database, older)

    done = project.tk("run", "--json", timeout=120)
    assert json.loads(done.stdout.splitlines()[-1])["turns"] == 2, done.stdout
    _restore(project.database, older)

    status = project.tk("status", "--json", expect=DATA_LOSS).json()["error"]
    assert status["reason"] == "database_behind_workspace", status
    for read in _reads(sid):
        refused = project.tk(*read, "--json", expect=DATA_LOSS)
        error = json.loads(refused.stdout)["error"]
        assert (error["code"], error["reason"]) == ("DATA_LOSS", "database_behind_workspace"), (
            read,
            error,
        )
        assert error["message"] == status["message"], read  # the same refusal as status
        assert "Traceback" not in refused.stderr, refused.stderr

    # The operator accepts the loss: the log's view holds, and each read answers.
    project.tk("repair", "--accept-loss", sid)
    for read in _reads(sid):
        if read[:2] == ("turn", "show"):
            project.tk(*read, expect=4)  # the turn the log lost: NOT_FOUND
            continue
        project.tk(*read, "--json")
