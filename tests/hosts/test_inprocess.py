"""The in-process host runs a turn as a callable in this process, when it is read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.conftest import MakeRequest
from turnkeeper.errors import NotFound, Unavailable
from turnkeeper.hosts import HostErrorKind, TurnKind, TurnRequest
from turnkeeper.hosts.base import Emit
from turnkeeper.hosts.inprocess import InProcessHost
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.runtime.control.controller import Controller, ControllerConfig
from turnkeeper.store import open_store


def test_the_turn_runs_once_on_the_first_read_and_binds_a_handle(
    make_request: MakeRequest,
) -> None:
    calls: list[str] = []

    def turn(request: TurnRequest, emit: Emit) -> dict[str, Any]:
        calls.append(request.turn_id)
        emit("message", {"text": request.instructions})
        return {"summary": "done"}

    host = InProcessHost(turn, handle_prefix="t")
    request = make_request(instructions="docs")
    run = host.start(request)
    assert calls == []  # not before the driver has journaled the start
    assert run.identity.pid == os.getpid()
    assert run.identity.marker == request.turn_id

    events = [(e.seq, e.kind, e.data) for e in run.events(0)]
    handle = str(events[0][2]["handle"])
    assert handle.startswith("t-")
    assert events == [
        (1, "session.bound", {"handle": handle, "resumed": False}),
        (2, "message", {"text": "docs"}),
        (3, "result", {"summary": "done"}),
    ]
    outcome = run.wait()
    assert outcome.succeeded
    assert (outcome.result, outcome.host_session_handle, outcome.last_seq) == (
        {"summary": "done"},
        handle,
        3,
    )
    assert [e.seq for e in run.events(after_seq=2)] == [3]
    assert calls == [request.turn_id]
    assert not run.is_alive()
    assert run.kill_tree().killed == []

    resumed = host.start(make_request(kind=TurnKind.CONTINUATION, host_session_handle=handle))
    assert next(iter(resumed.events())).data == {"handle": handle, "resumed": True}


def test_a_raising_or_malformed_turn_fails_and_an_interrupted_one_has_no_outcome(
    make_request: MakeRequest,
) -> None:
    def raises(request: TurnRequest, emit: Emit) -> dict[str, Any]:
        raise RuntimeError("agent blew up")

    failed = InProcessHost(raises).start(make_request())
    outcome = failed.wait()
    assert outcome.error_kind is HostErrorKind.EXIT_CODE
    assert outcome.message == "RuntimeError: agent blew up"
    assert [e.kind for e in failed.events()] == ["session.bound", "error"]

    def returns_list(request: TurnRequest, emit: Emit) -> Any:
        return [1, 2]

    wrong = InProcessHost(returns_list).start(make_request())
    assert wrong.wait().error_kind is HostErrorKind.PROTOCOL

    def interrupted(request: TurnRequest, emit: Emit) -> dict[str, Any]:
        raise KeyboardInterrupt

    run = InProcessHost(interrupted).start(make_request())
    with pytest.raises(KeyboardInterrupt):
        run.wait()
    with pytest.raises(Unavailable):  # never run a second time
        run.wait()


def test_the_driver_runs_turns_through_its_loader(tmp_path: Path, workspace: Path) -> None:
    def turn(request: TurnRequest, emit: Emit) -> dict[str, Any]:
        return {"summary": f"worked on {request.todo_title}", "todo_done": True}

    host = InProcessHost(turn)
    with pytest.raises(NotFound):
        host.loader("codex", {})
    store = open_store(tmp_path / "tk.db")
    try:
        controller = Controller(store, ControllerConfig(host_loader=host.loader))
        controller.goals.create(CreateGoal(goal_id="g", title="one todo"))
        controller.goals.submit("g", AddTodo(todo=TodoSpec(todo_id="t0", title="the docs")))
        session = controller.sessions.create("g", workspace, host.kind)
        summary = controller.run([session.session_id])
        assert (summary.turns, summary.failed_turns) == (1, 0)
        todo = controller.goals.load("g").todos["t0"]
        assert todo.status == "done"
    finally:
        store.close()
