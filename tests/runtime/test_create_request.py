"""``session create`` as a durable operation under a client request id.

Same request id and payload: the same session, and nothing written the second time.
Same id, another payload: ``ALREADY_EXISTS`` (exit code 8). ``operation show`` finds
the create. Without ``--request-id`` one is generated and returned. A request id is
one request: reused for another kind of operation it is ``ALREADY_EXISTS`` too.
Concurrent creates under one id make one session (the append at sequence 0 is the
compare-and-swap).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.cli.conftest import Invoke, durable_digest, run_json, with_json
from turnkeeper.cli.main import app
from turnkeeper.errors import EXIT_CODES, AlreadyExists, ErrorCode, InvalidArgument
from turnkeeper.runtime.control.operations import Operations
from turnkeeper.runtime.log.request_ids import session_id_for_request
from turnkeeper.runtime.services.sessions import SessionService, session_stream
from turnkeeper.store import open_store
from turnkeeper.store.base import EventStore


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TURNKEEPER_DIR", str(tmp_path))
    monkeypatch.delenv("TURNKEEPER_DATABASE_URL", raising=False)
    monkeypatch.delenv("TURNKEEPER_CRASH_AT", raising=False)
    result = CliRunner().invoke(app, ["init", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (tmp_path / "ws").mkdir()
    (tmp_path / "other-ws").mkdir()
    return tmp_path


@pytest.fixture
def tk(project: Path) -> Invoke:
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None) -> Any:
        return runner.invoke(app, list(args), input=input)

    run_json(invoke, "goal", "add", "the goal", "--id", "g1")
    return invoke


def create_args(project: Path, request_id: str | None, workspace: str = "ws") -> list[str]:
    args = ["session", "create", "g1", "--workspace", str(project / workspace), "--no-snapshots"]
    return args if request_id is None else [*args, "--request-id", request_id]


def refused(tk: Invoke, project: Path, args: list[str]) -> dict[str, Any]:
    """The command fails, writes nothing, and its JSON error is returned."""
    before = durable_digest(project)
    result = tk(*with_json(tuple(args)))
    error: dict[str, Any] = json.loads(result.stdout)["error"]
    assert result.exit_code == EXIT_CODES[ErrorCode(error["code"])], result.output
    assert durable_digest(project) == before, f"{args} wrote to the store"
    return error


def store_of(project: Path) -> EventStore:
    return open_store(project / ".turnkeeper" / "turnkeeper.db")


def test_a_retried_create_returns_the_same_session_and_writes_nothing(
    project: Path, tk: Invoke
) -> None:
    first = run_json(tk, *create_args(project, "c1"))
    assert first["request_id"] == "c1"
    assert first["session_id"] == session_id_for_request("c1")
    before = durable_digest(project)
    again = run_json(tk, *create_args(project, "c1"))
    assert again == first
    assert durable_digest(project) == before  # no second write
    store = store_of(project)
    try:
        assert store.head(session_stream(first["session_id"])) == 1
    finally:
        store.close()
    shown = run_json(tk, "operation", "show", "c1")
    assert (shown["kind"], shown["status"], shown["outcome"]) == ("create", "finished", "created")
    assert (shown["session_id"], shown["generation"]) == (first["session_id"], 1)
    assert shown["payload_digest"]
    assert [s["session_id"] for s in run_json(tk, "session", "list")] == [first["session_id"]]


def test_the_same_request_id_with_another_payload_is_already_exists(
    project: Path, tk: Invoke
) -> None:
    run_json(tk, *create_args(project, "c1"))
    for args in (
        create_args(project, "c1", workspace="other-ws"),
        [*create_args(project, "c1"), "--host-config", '{"state_dir": "/elsewhere"}'],
    ):
        error = refused(tk, project, args)
        assert (error["code"], error["reason"]) == ("ALREADY_EXISTS", "request_id_reused")
    assert EXIT_CODES[ErrorCode.ALREADY_EXISTS] == 8


def test_without_a_request_id_one_is_generated_and_returned(project: Path, tk: Invoke) -> None:
    created = run_json(tk, *create_args(project, None))
    request_id = created["request_id"]
    assert created["session_id"] == session_id_for_request(request_id)
    assert run_json(tk, "operation", "show", request_id)["session_id"] == created["session_id"]
    # Two creates without an id are two requests: two sessions.
    other = run_json(tk, *create_args(project, None))
    assert other["session_id"] != created["session_id"]


def test_a_request_id_names_one_request_across_operation_kinds(project: Path, tk: Invoke) -> None:
    sid = run_json(tk, *create_args(project, "c1"))["session_id"]
    other = run_json(tk, *create_args(project, "c2", workspace="other-ws"))["session_id"]
    # The create's id reused for a delete of its own session, or of another one.
    for args in (
        ["session", "delete", sid, "--request-id", "c1"],
        ["session", "delete", other, "--request-id", "c1"],
        ["session", "revert", sid, "--request-id", "c1"],
    ):
        error = refused(tk, project, args)
        assert (error["code"], error["reason"]) == ("ALREADY_EXISTS", "request_id_reused")
    # A delete's id reused for a create; a session id used as a request id.
    assert run_json(tk, "session", "delete", other, "--request-id", "d1")["result"] == "deleted"
    for request_id in ("d1", sid):
        error = refused(tk, project, create_args(project, request_id))
        assert (error["code"], error["reason"]) == ("ALREADY_EXISTS", "request_id_reused")


def test_a_create_retried_after_its_session_was_deleted_does_not_bring_it_back(
    project: Path, tk: Invoke
) -> None:
    sid = run_json(tk, *create_args(project, "c1"))["session_id"]
    run_json(tk, "session", "delete", sid, "--request-id", "d1")
    again = run_json(tk, *create_args(project, "c1"))
    assert (again["session_id"], again["status"]) == (sid, "deleted")


def test_bad_request_ids_are_invalid_argument(project: Path, tk: Invoke) -> None:
    for request_id in ("", "x" * 201, "tab\there"):
        error = refused(tk, project, create_args(project, request_id))
        assert (error["code"], error["reason"]) == ("INVALID_ARGUMENT", "bad_id")
    store = store_of(project)
    try:
        with pytest.raises(InvalidArgument) as both:
            SessionService(store).create(
                "g1", project / "ws", "scripted", session_id=session_id_for_request("c1"),
                request_id="c1",
            )  # fmt: skip
        assert both.value.reason == "session_id_with_request_id"
        with pytest.raises(InvalidArgument):
            Operations(store).show("")
    finally:
        store.close()


def test_concurrent_creates_under_one_request_id_make_one_session(
    project: Path, tk: Invoke
) -> None:
    store = store_of(project)
    try:
        sessions = SessionService(store)
        outcomes: list[str] = []
        lock = threading.Lock()

        def create(workspace: str) -> None:
            try:
                sid = sessions.create("g1", project / workspace, "scripted", request_id="c1")
                outcome = sid.session_id
            except AlreadyExists as exc:
                outcome = exc.reason
            with lock:
                outcomes.append(outcome)

        # Half ask for one payload, half for another: exactly one payload wins, every
        # request with it gets the session, every other one ALREADY_EXISTS.
        workspaces = ["ws", "other-ws"] * 4
        threads = [threading.Thread(target=create, args=(w,)) for w in workspaces]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        sid = session_id_for_request("c1")
        assert store.head(session_stream(sid)) == 1
        assert sorted(set(outcomes)) == sorted({sid, "request_id_reused"})
        assert outcomes.count(sid) == 4
        assert outcomes.count("request_id_reused") == 4
        won = sessions.load(sid).workspace
        assert won in (str((project / "ws").resolve()), str((project / "other-ws").resolve()))
    finally:
        store.close()
