"""OpenTelemetry spans made where a turn runs (runtime/turn/spans.py).

Real turns — the scripted agent, a real subprocess, on a real SQLite project — run
in this process through the Python API, a worker and restart recovery, with an SDK
``TracerProvider`` set as the global one and an in-memory exporter, as a program
embedding turnkeeper would configure it. What is checked: one ``turnkeeper.turn``
span per turn with the turn's attributes, one child per step in order, and their
times nested and contiguous; nothing at all without the OpenTelemetry API.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from benchmarks.noop_host import CrashAfterStartHost, NoopHost, SimulatedCrash
from tests.runtime.git_calls import git
from turnkeeper import Project
from turnkeeper.hosts import process_tree
from turnkeeper.json_types import JsonDict
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import NextTurn, plan_next_turn
from turnkeeper.runtime.control.controller import Controller, ControllerConfig
from turnkeeper.runtime.control.controller_identity import owner_name
from turnkeeper.runtime.control.worker import Worker, WorkerConfig
from turnkeeper.runtime.log.streams import OUTAGES
from turnkeeper.runtime.services.turn_listing import list_turns
from turnkeeper.runtime.turn.planning import goal_view
from turnkeeper.runtime.turn.spans import TurnTracing

STEPS = ["accepted", "host_started", "receipt", "written_back", "completed"]
# Every turn writes its todo's note and says the todo is done.
NOTES: JsonDict = {
    "script": {
        "default": {
            "steps": [{"op": "write", "path": "note.md", "content": "a note\n"}],
            "result": {"todo_done": True},
        }
    }
}
# A result with evidence to check: its receipt is committed before the write-back.
CHECKED: JsonDict = {
    "script": {
        "default": {
            "steps": [{"op": "write", "path": "note.md", "content": "a note\n"}],
            "result": {
                "todo_done": True,
                "evidence": [{"key": "note", "command": "test -s note.md"}],
            },
        }
    }
}
CRASHES: JsonDict = {"script": {"default": {"steps": [{"op": "crash", "exit_code": 3}]}}}


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """The spans finished while the test runs, through the global tracer provider (set
    once per process, as OpenTelemetry allows; each test adds its own exporter)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    try:
        yield exporter
    finally:
        processor.shutdown()  # later tests' spans no longer reach this exporter


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    root = tmp_path / "work"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "commit", "-q", "--allow-empty", "-m", "start")
    with Project.init(root) as opened:
        yield opened


def _goal(project: Project, *todos: str) -> str:
    gid = project.goals.add("Notes").goal.id
    for n, title in enumerate(todos, 1):
        project.todos.add(gid, title, todo_id=f"t{n}")
    return gid


def attrs(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


def turns(spans: tuple[ReadableSpan, ...]) -> list[ReadableSpan]:
    """The ``turnkeeper.turn`` spans, oldest first."""
    found = [s for s in spans if s.name == "turnkeeper.turn"]
    return sorted(found, key=lambda s: s.start_time or 0)


def steps_of(spans: tuple[ReadableSpan, ...], turn: ReadableSpan) -> list[ReadableSpan]:
    """``turn``'s children, in the order they began; their times checked: nested in the
    turn's, each one starting where the one before ended, the last ending the turn."""
    children = [s for s in spans if s.parent is not None and s.parent == turn.context]
    children.sort(key=lambda s: s.start_time or 0)
    assert children, turn.attributes
    assert turn.start_time is not None and turn.end_time is not None
    assert turn.start_time < turn.end_time
    assert children[0].start_time == turn.start_time
    assert children[-1].end_time == turn.end_time
    for before, after in itertools.pairwise(children):
        assert before.end_time == after.start_time
    for child in children:
        assert child.context.trace_id == turn.context.trace_id
        assert child.start_time is not None and child.end_time is not None
        assert child.start_time <= child.end_time
        assert attrs(child)["turnkeeper.turn_id"] == attrs(turn)["turnkeeper.turn_id"]
        assert f"turnkeeper.turn.{attrs(child)['turnkeeper.phase']}" == child.name
    return children


def test_a_run_through_the_python_api_makes_a_span_per_turn_and_step(
    project: Project, exporter: InMemorySpanExporter
) -> None:
    gid = _goal(project, "First note", "Second note")
    sid = project.sessions.create(gid, host="scripted", host_config=NOTES).session_id
    assert project.run(max_turns=2).turns == 2

    logged = list_turns(project.store, sid)
    spans = exporter.get_finished_spans()
    found = turns(spans)
    assert [attrs(t)["turnkeeper.turn_id"] for t in found] == [t.turn_id for t in logged]
    for turn, turn_id in zip(found, [t.turn_id for t in logged], strict=True):
        assert attrs(turn) == {
            "turnkeeper.turn_id": turn_id,
            "turnkeeper.session_id": sid,
            "turnkeeper.turn_kind": "start",
            "turnkeeper.attempt": 1,
            "turnkeeper.outcome": "completed",
        }
        assert turn.status.status_code is not StatusCode.ERROR
        assert turn.parent is None
        children = steps_of(spans, turn)
        assert [c.name.removeprefix("turnkeeper.turn.") for c in children] == STEPS
        # The host ran between its start and its receipt: that step took time.
        started, receipt = children[1], children[2]
        assert receipt.end_time is not None and started.end_time is not None
        assert receipt.end_time > started.end_time
    # One session's turns one after the other, each its own trace.
    first, second = found
    assert first.end_time is not None and second.start_time is not None
    assert first.end_time <= second.start_time
    assert first.context.trace_id != second.context.trace_id


def test_a_failed_turn_is_an_error_span_with_its_error_kind(
    project: Project, exporter: InMemorySpanExporter
) -> None:
    gid = _goal(project, "Break")
    sid = project.sessions.create(gid, host="scripted", host_config=CRASHES).session_id
    assert project.run(max_turns=1).failed_turns == 1

    (logged,) = list_turns(project.store, sid)
    spans = exporter.get_finished_spans()
    (turn,) = turns(spans)
    attributes = attrs(turn)
    assert attributes["turnkeeper.turn_id"] == logged.turn_id
    assert attributes["turnkeeper.outcome"] == "failed"
    assert attributes["turnkeeper.error_kind"] == "exit_code"
    assert turn.status.status_code is StatusCode.ERROR
    names = [c.name.removeprefix("turnkeeper.turn.") for c in steps_of(spans, turn)]
    assert names == ["accepted", "host_started", "receipt", "failed"]


def test_a_worker_makes_the_same_spans(
    project: Project, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    gid = _goal(project, "First note", "Second note")
    sid = project.sessions.create(gid, host="scripted", host_config=NOTES).session_id
    # The worker sets the process's database outage policy; this test restores it.
    monkeypatch.setattr(OUTAGES, "budget_seconds", OUTAGES.budget_seconds)
    monkeypatch.setattr(OUTAGES, "notice", OUTAGES.notice)
    controller = Controller(project.store, ControllerConfig())
    worker = Worker(controller, WorkerConfig(poll_seconds=0.1, idle_exit_seconds=0.2))
    summary = worker.run()  # both todos, then the goal closes and the worker goes idle
    assert (summary.turns, summary.stops) == (2, {sid: "goal_terminal"})

    logged = [t.turn_id for t in list_turns(project.store, sid)]
    spans = exporter.get_finished_spans()
    found = turns(spans)
    assert [attrs(t)["turnkeeper.turn_id"] for t in found] == logged
    for turn in found:
        assert attrs(turn)["turnkeeper.outcome"] == "completed"
        assert [c.name.removeprefix("turnkeeper.turn.") for c in steps_of(spans, turn)] == STEPS


def test_a_turn_its_controller_died_in_is_ended_by_recovery(
    project: Project, exporter: InMemorySpanExporter
) -> None:
    """The driver unwound mid-turn (as a killed controller would be) leaves an
    ``in_flight`` span with the exception; the restart that marks the turn lost makes
    the turn's span from its acceptance, marked recovered."""
    proc = subprocess.Popen(["sleep", "600"])
    try:
        identity = process_tree.identify(proc.pid, "spans-test")
    finally:
        proc.send_signal(signal.SIGKILL)  # our own child, by its pid
        proc.wait()
    host = CrashAfterStartHost(dead_pid=identity.pid, dead_start_time=identity.start_time)
    config = ControllerConfig(host_loader=host.loader)
    dying = Controller(project.store, config, owner=owner_name(identity.pid, identity.start_time))
    dying.goals.create(CreateGoal(goal_id="goal-1", title="goal"))
    dying.goals.submit("goal-1", AddTodo(todo=TodoSpec(todo_id="todo-1", title="work")))
    sid = dying.sessions.create("goal-1", project.root, host.kind).session_id
    dying.acquire(sid)
    session = dying.sessions.load(sid)
    now = dying.sessions.now()
    plan = plan_next_turn(session, goal_view(dying.goals.load("goal-1"), session, now), now)
    assert isinstance(plan, NextTurn), plan
    with pytest.raises(SimulatedCrash):
        dying.driver.run_turn(session, plan)
    in_flight = dying.sessions.load(sid).in_flight
    assert in_flight is not None
    turn_id = in_flight.envelope.turn_id

    (unwound,) = turns(exporter.get_finished_spans())
    attributes = attrs(unwound)
    assert (attributes["turnkeeper.turn_id"], attributes["turnkeeper.outcome"]) == (
        turn_id,
        "in_flight",
    )
    assert unwound.status.status_code is StatusCode.ERROR
    assert [e.name for e in unwound.events] == ["exception"]
    exporter.clear()

    restarted = Controller(
        project.store, ControllerConfig(host_loader=NoopHost().loader), progress=None
    )
    restarted.request_stop()  # recover, then run no turn
    restarted.run([sid])
    spans = exporter.get_finished_spans()
    (lost,) = turns(spans)
    attributes = attrs(lost)
    assert attributes["turnkeeper.turn_id"] == turn_id
    assert attributes["turnkeeper.outcome"] == "lost"
    assert attributes["turnkeeper.recovered"] is True
    assert lost.status.status_code is StatusCode.ERROR
    accepted_at = int(in_flight.accepted_at.timestamp() * 1_000_000_000)
    assert lost.start_time == accepted_at
    assert [c.name for c in steps_of(spans, lost)] == ["turnkeeper.turn.lost"]


def test_recovery_writing_back_a_receipt_makes_a_recovered_span(
    project: Project, exporter: InMemorySpanExporter
) -> None:
    """A real ``turnkeeper run`` SIGKILLed right after its receipt (its spans die with
    it); the restart here writes the receipt back and completes the turn, in a span of
    its own marked recovered."""
    gid = _goal(project, "First note")
    sid = project.sessions.create(gid, host="scripted", host_config=CHECKED).session_id
    killed = subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli.main", "run", "--max-turns", "1"],
        cwd=project.root,
        env={**os.environ, "TURNKEEPER_CRASH_AT": "receipt"},
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    in_flight = project.sessions.show(sid).in_flight
    assert in_flight is not None and in_flight.phase == "receipt"

    restarted = Controller(project.store, ControllerConfig())
    restarted.request_stop()  # recover, then run no turn
    restarted.run([sid])
    spans = exporter.get_finished_spans()
    (turn,) = turns(spans)
    attributes = attrs(turn)
    assert attributes["turnkeeper.turn_id"] == in_flight.envelope.turn_id
    assert attributes["turnkeeper.outcome"] == "completed"
    assert attributes["turnkeeper.recovered"] is True
    names = [c.name.removeprefix("turnkeeper.turn.") for c in steps_of(spans, turn)]
    assert names == ["written_back", "completed"]


def test_without_the_opentelemetry_api_there_is_nothing(
    project: Project, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process where ``opentelemetry`` cannot be imported (None in ``sys.modules``
    is how Python marks a module as not importable): the tracing is off, and a run
    makes no span although a provider is set."""
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    assert not TurnTracing().enabled
    gid = _goal(project, "First note")
    project.sessions.create(gid, host="scripted", host_config=NOTES)
    assert project.run(max_turns=1).turns == 1
    assert exporter.get_finished_spans() == ()
