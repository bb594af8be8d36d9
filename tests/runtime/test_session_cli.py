"""The session commands of the CLI, in process through Typer's ``CliRunner``.

Bad input gets its typed error (exit code and reason) and leaves every durable
row as it was; ``session show/list``, unique-prefix resolution, ``status`` and
``session stop`` followed by ``run`` behave as documented.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.cli.conftest import Invoke, durable_digest, run_json, with_json
from turnkeeper.cli.main import app
from turnkeeper.errors import EXIT_CODES, ErrorCode
from turnkeeper.runtime.services.sessions import SessionService, session_stream
from turnkeeper.store import open_store


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TURNKEEPER_DIR", str(tmp_path))
    monkeypatch.delenv("TURNKEEPER_DATABASE_URL", raising=False)
    monkeypatch.delenv("TURNKEEPER_CRASH_AT", raising=False)
    result = CliRunner().invoke(app, ["init", str(tmp_path)])
    assert result.exit_code == 0, result.output
    return tmp_path


@pytest.fixture
def tk(project: Path) -> Invoke:
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None) -> Any:
        return runner.invoke(app, list(args), input=input)

    return invoke


def _refused(tk: Invoke, project: Path, *args: str, code: ErrorCode, reason: str) -> None:
    """The command fails with ``code``/``reason`` and writes nothing."""
    before = durable_digest(project)
    result = tk(*with_json(args))
    assert result.exit_code == EXIT_CODES[code], result.output
    error = json.loads(result.stdout)["error"]
    assert (error["code"], error["reason"]) == (code.value, reason), error
    assert durable_digest(project) == before, f"{args} wrote to the store"


def _run(tk: Invoke, *args: str, expect: int = 0) -> tuple[list[str], dict[str, Any]]:
    """``run --json``: one ``{"progress": ...}`` line per step, then the summary;
    ``expect`` is its exit code (README, "Errors and exit codes")."""
    result = tk("run", *args, "--json")
    assert result.exit_code == expect, result.output
    lines = result.stdout.splitlines()
    progress = [json.loads(ln)["progress"] for ln in lines if ln.startswith('{"progress"')]
    rest = "\n".join(ln for ln in lines if not ln.startswith('{"progress"'))
    summary: dict[str, Any] = json.loads(rest)
    return progress, summary


def _goal(tk: Invoke, goal_id: str, todo_title: str) -> None:
    run_json(tk, "goal", "add", f"goal {goal_id}", "--id", goal_id)
    run_json(tk, "todo", "add", goal_id, todo_title, "--id", f"{goal_id}-t1")


def _workspace(project: Path, name: str) -> Path:
    path = project / name
    path.mkdir()
    return path


def _scripted_config(state_dir: Path, todo_title: str) -> str:
    script = {
        "turns": [
            {
                "match": {"todo": todo_title},
                "steps": [{"op": "write", "path": "out.txt", "content": "done\n"}],
                "result": {"todo_done": True},
            }
        ]
    }
    return json.dumps({"state_dir": str(state_dir), "script": script})


def test_session_create_refuses_bad_input_and_writes_nothing(project: Path, tk: Invoke) -> None:
    _goal(tk, "g1", "work")
    ws = ("--workspace", str(_workspace(project, "ws")), "--no-snapshots")
    invalid, not_found = ErrorCode.INVALID_ARGUMENT, ErrorCode.NOT_FOUND
    cases: list[tuple[tuple[str, ...], ErrorCode, str]] = [
        (("nope", *ws), not_found, "goal_not_found"),
        *(
            (("g1", *ws, "--host-config", text), invalid, "malformed_json")
            for text in ('{"state_dir": ', "[1]", '"scripted"', "not json")
        ),
        (("g1", *ws, "--host-config", f"@{project / 'nothing.json'}"), invalid, "missing_file"),
        (("g1", "--workspace", str(project / "nowhere")), invalid, "no_workspace"),
        # A host kind nobody installed, or a config the host rejects, is refused up
        # front: such a session could never run a turn.
        (("g1", *ws, "--host", "no-such-host"), not_found, "unknown_host_kind"),
        (("g1", *ws, "--host-config", '{"no_such_option": 1}'), invalid, "invalid_host_config"),
    ]
    for args, code, reason in cases:
        _refused(tk, project, "session", "create", *args, code=code, reason=reason)
    assert run_json(tk, "session", "list") == []

    # The same arguments, corrected, create the session (from a config file too).
    config_file = project / "host-config.json"
    config_file.write_text(_scripted_config(project / "host-state", "work"))
    created = run_json(tk, "session", "create", "g1", *ws, "--host-config", f"@{config_file}")
    assert created["goal_id"] == "g1"
    assert created["host_kind"] == "scripted"
    assert created["workspace"] == str((project / "ws").resolve())
    assert created["status"] == "ready"
    assert created["host_config"]["state_dir"] == str(project / "host-state")


def test_session_show_list_and_unique_prefixes(project: Path, tk: Invoke) -> None:
    _goal(tk, "g1", "work")
    ws = str(_workspace(project, "ws"))
    created = run_json(tk, "session", "create", "g1", "--workspace", ws, "--no-snapshots")
    assert created.pop("request_id")  # the create's own answer names its request id
    sid = created["session_id"]
    assert created.pop("id") == sid  # and, like every write's, the id it created

    # show adds whether the controller its lease names runs: none holds it yet.
    shown = {**created, "controller": None}
    assert run_json(tk, "session", "show", sid) == shown
    assert run_json(tk, "session", "show", sid[:8]) == shown
    listed = run_json(tk, "session", "list")
    assert [s["session_id"] for s in listed] == [sid]
    assert listed[0] == shown
    status = run_json(tk, "status")
    assert [s["session_id"] for s in status["sessions"]] == [sid]
    assert [g["id"] for g in status["goals"]] == ["g1"]

    not_found = ErrorCode.NOT_FOUND
    _refused(tk, project, "session", "show", "f" * 8, code=not_found, reason="session_not_found")
    unknown = "00000000-0000-4000-8000-000000000000"
    _refused(tk, project, "session", "show", unknown, code=not_found, reason="session_not_found")
    _refused(tk, project, "session", "stop", unknown, code=not_found, reason="session_not_found")

    # Two sessions sharing a prefix: the prefix is ambiguous, each full id is not.
    twins = [f"abcdef00-0000-4000-8000-00000000000{n}" for n in (1, 2)]
    store = open_store(project / ".turnkeeper" / "turnkeeper.db")
    try:
        sessions = SessionService(store)
        for twin in twins:
            sessions.create("g1", Path(ws), "scripted", session_id=twin)
    finally:
        store.close()
    invalid = ErrorCode.INVALID_ARGUMENT
    for args in (("session", "show", "abcdef00"), ("session", "stop", "abcdef00")):
        _refused(tk, project, *args, code=invalid, reason="ambiguous_id")
    for twin in twins:
        assert run_json(tk, "session", "show", twin)["session_id"] == twin
    # The first session's own prefix is still unique.
    assert run_json(tk, "session", "show", sid[:8])["session_id"] == sid


def test_a_stopped_session_is_left_alone_by_run(project: Path, tk: Invoke) -> None:
    ids = {}
    for name in ("stopped", "running"):
        _goal(tk, name, f"{name} work")
        config = _scripted_config(project / f"{name}-host", f"{name} work")
        ws = str(_workspace(project, f"{name}-ws"))
        ws_args = ("--workspace", ws, "--no-snapshots")
        args = ("session", "create", name, *ws_args, "--host-config", config)
        ids[name] = run_json(tk, *args)["session_id"]

    stopped = run_json(tk, "session", "stop", ids["stopped"][:8], "--reason", "not now")
    assert stopped["session_id"] == ids["stopped"]
    assert stopped["status"] == "suspended"
    # stop released the lease it took to write the status
    assert run_json(tk, "session", "show", ids["stopped"])["lease"]["owner"] is None
    store = open_store(project / ".turnkeeper" / "turnkeeper.db")
    try:
        head = store.head(session_stream(ids["stopped"]))
    finally:
        store.close()

    progress, summary = _run(tk)
    assert not [line for line in progress if ids["stopped"][:8] in line], progress
    assert summary["turns"] == 1
    assert summary["failed_turns"] == 0
    assert summary["stops"] == {ids["running"]: "goal_terminal"}
    assert summary["outcomes"] == {ids["running"]: "finished"}
    assert summary["exit_code"] == 0
    assert not (project / "stopped-host" / "runs.jsonl").exists()
    assert len((project / "running-host" / "runs.jsonl").read_text().splitlines()) == 1

    store = open_store(project / ".turnkeeper" / "turnkeeper.db")
    try:
        # `run` did not even take the stopped session's lease: its stream is untouched.
        assert store.head(session_stream(ids["stopped"])) == head
    finally:
        store.close()
    left = run_json(tk, "session", "show", ids["stopped"])
    assert left["status"] == "suspended"
    assert left["counters"]["turns_accepted"] == 0

    # Naming the stopped session explicitly still runs no turn for it; the session it
    # was asked to drive is suspended, so run exits 12 (README, "Errors and exit codes").
    _, named = _run(tk, "--session", ids["stopped"], expect=12)
    assert named == {
        "turns": 0,
        "failed_turns": 0,
        "reattached_turns": 0,
        "stops": {ids["stopped"]: "session_suspended"},
        "reasons": {},
        "outcomes": {ids["stopped"]: "suspended"},
        "exit_code": 12,
    }
    assert not (project / "stopped-host" / "runs.jsonl").exists()

    status = run_json(tk, "status")
    by_id = {s["session_id"]: s for s in status["sessions"]}
    assert by_id[ids["stopped"]]["status"] == "suspended"
    assert by_id[ids["stopped"]]["counters"]["turns_accepted"] == 0
    assert by_id[ids["running"]]["status"] == "closed"  # its goal closed, so did it
    assert by_id[ids["running"]]["counters"]["turns_completed"] == 1
    goals = {g["id"]: g["status"] for g in status["goals"]}
    assert goals == {"stopped": "open", "running": "closed"}


def test_recover_an_unknown_turn_is_not_found_and_writes_nothing(project: Path, tk: Invoke) -> None:
    _goal(tk, "g1", "work")
    ws = str(_workspace(project, "ws"))
    sid = run_json(tk, "session", "create", "g1", "--workspace", ws, "--no-snapshots")["session_id"]
    not_found = ErrorCode.NOT_FOUND
    for turn in ("turn-0000000000000000", sid, "g1-t1", "g1"):
        # Not a turn: unknown, a session id, a todo id, a goal id.
        _refused(tk, project, "recover", turn, code=not_found, reason="turn_not_found")
