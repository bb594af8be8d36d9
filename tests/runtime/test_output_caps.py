"""The driver journals at most the turn's output caps, whatever the host does.

Real driver, kernels and SQLite store. The hosts: one that ignores
``TurnRequest.limits`` and streams everything it is given (what a third-party host
may do), the real in-process host, and the real subprocess host, which honours the
limits itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.inprocess_host import InProcessHost
from turnkeeper.errors import NotFound
from turnkeeper.host_reports import HostEvent, ProcessIdentity
from turnkeeper.hosts import (
    Host,
    HostLoader,
    HostOutcome,
    HostStatus,
    KillReport,
    TurnRequest,
    process_tree,
)
from turnkeeper.hosts.base import TurnLimits
from turnkeeper.hosts.output_cap import OVERFLOW_EVENTS, TRUNCATED_KIND
from turnkeeper.hosts.subprocess_host import SubprocessHost
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import NextTurn, plan_next_turn
from turnkeeper.runtime.control.controller import Controller, ControllerConfig
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.turn.driver import DriverConfig, TurnDriver, TurnResult
from turnkeeper.runtime.turn.planning import goal_view
from turnkeeper.store import open_store
from turnkeeper.store.base import EventStore

Event = tuple[str, dict[str, Any]]


class UnboundedRun:
    """A host run that streams every event it was given, numbered 1, 2, 3, ...:
    it never looks at ``TurnRequest.limits``."""

    def __init__(self, request: TurnRequest, events: list[Event], result: dict[str, Any]):
        self._request = request
        self._events = events
        self._result = result
        self._identity = process_tree.identify(os.getpid(), request.turn_id)

    @property
    def identity(self) -> ProcessIdentity:
        return self._identity

    def events(self, after_seq: int = 0, *, follow: bool = True) -> Iterator[HostEvent]:
        for seq, (kind, data) in enumerate(self._events, start=1):
            if seq > after_seq:
                yield HostEvent(seq=seq, kind=kind, data=data)

    def wait(self, timeout: float | None = None) -> HostOutcome:
        return HostOutcome(
            status=HostStatus.SUCCEEDED,
            host_session_handle="unbounded-1",
            result=self._result,
            last_seq=len(self._events),
        )

    def kill_tree(self) -> KillReport:
        return KillReport(turn_id=self._request.turn_id)

    def is_alive(self) -> bool:
        return False


@dataclass
class UnboundedHost:
    events: list[Event]
    result: dict[str, Any]
    kind: str = "unbounded"

    def start(self, request: TurnRequest) -> UnboundedRun:
        self.limits = request.limits
        return UnboundedRun(request, self.events, self.result)


def _loader(kind: str, host: Host) -> HostLoader:
    def load(requested: str, config: dict[str, Any]) -> Host:
        if requested != kind:
            raise NotFound(f"no host {requested!r}", reason="unknown_host_kind")
        return host

    return load


@dataclass
class Project:
    store: EventStore
    workspace: Path

    def session(self, host_kind: str) -> str:
        goals = GoalService(self.store)
        goals.create(CreateGoal(goal_id="g", title="a chatty goal"))
        goals.submit("g", AddTodo(todo=TodoSpec(todo_id="t0", title="todo 0")))
        return SessionService(self.store).create("g", self.workspace, host_kind).session_id

    def run_turn(self, sid: str, host_kind: str, host: Host, limits: TurnLimits) -> TurnResult:
        """One turn through a real driver with ``limits``, under a real lease."""
        loader = _loader(host_kind, host)
        controller = Controller(self.store, ControllerConfig(host_loader=loader))
        driver = TurnDriver(
            controller.sessions,
            controller.goals,
            controller.token,
            DriverConfig(host_loader=loader, turn_limits=limits),
        )
        controller.acquire(sid)
        try:
            session = controller.sessions.load(sid)
            now = controller.sessions.now()
            plan = plan_next_turn(session, goal_view(controller.goals.load("g"), session, now), now)
            assert isinstance(plan, NextTurn), plan
            return driver.run_turn(session, plan)
        finally:
            controller.release(sid)

    def journaled(self, sid: str) -> list[dict[str, Any]]:
        """Every host event in the session's journal, in order."""
        out: list[dict[str, Any]] = []
        for record in self.store.read_stream(f"session:{sid}"):
            if record.type == "turn.host_events":
                out.extend(json.loads(record.payload)["events"])
        return out


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=workspace, check=True)
    store = open_store(tmp_path / "tk.db")
    try:
        yield Project(store, workspace)
    finally:
        store.close()


def _encoded(kind: str, data: dict[str, Any]) -> bytes:
    obj = {"kind": kind, "data": data}
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def test_the_driver_caps_a_host_that_ignores_the_limits(project: Project) -> None:
    notes = [("note", {"i": i, "text": "n" * (i % 7)}) for i in range(1000)]
    events: list[Event] = [
        ("session.bound", {"handle": "unbounded-1"}),
        *notes[:500],
        ("error", {"fatal": True, "message": "reported, not fatal here"}),
        *notes[500:],
        ("result", {"summary": "worked"}),
    ]
    host = UnboundedHost(events, {"summary": "worked"})
    sid = project.session(host.kind)
    limits = TurnLimits(max_events=50)
    result = project.run_turn(sid, host.kind, host, limits)

    assert result.succeeded
    assert host.limits == limits  # the request carried them; this host ignored them
    journal = project.journaled(sid)
    # Seqs stay contiguous although 950 events between them were dropped: the
    # events kept after the cut are re-sequenced by the driver.
    assert [e["seq"] for e in journal] == list(range(1, len(journal) + 1))
    kinds = [e["kind"] for e in journal]
    assert kinds == ["session.bound"] + ["note"] * 49 + ["error", "result", TRUNCATED_KIND]
    assert [e["data"]["i"] for e in journal[1:50]] == list(range(49))
    dropped = notes[49:]
    truncated = journal[-1]["data"]
    assert truncated["dropped_events"] == len(dropped) == 951
    assert truncated["dropped_bytes"] == sum(len(_encoded(*e)) for e in dropped)
    expected = hashlib.sha256(b"".join(_encoded(*e) + b"\n" for e in dropped)).hexdigest()
    assert truncated["sha256"] == expected
    assert truncated["limit"]["reached"] == "max_events"

    state = SessionService(project.store).load(sid)
    assert state.counters.turns_completed == 1
    assert state.counters.host_events == len(journal)
    assert state.host_session_handle == "unbounded-1"


def test_the_driver_bounds_meaningful_events_past_the_cap(project: Project) -> None:
    """A host printing nothing but results cannot bypass the cap through the driver."""
    events = [("result", {"n": n}) for n in range(500)]
    host = UnboundedHost(events, {"n": 499})
    sid = project.session(host.kind)
    result = project.run_turn(sid, host.kind, host, TurnLimits(max_events=10))
    assert result.succeeded
    journal = project.journaled(sid)
    assert len(journal) == 10 + OVERFLOW_EVENTS + 1
    assert journal[-1]["kind"] == TRUNCATED_KIND
    assert journal[-1]["data"]["dropped_events"] == 500 - 10 - OVERFLOW_EVENTS


def test_a_host_that_honours_the_limits_has_nothing_cut_again(project: Project) -> None:
    """The subprocess host applies the request's limits itself: the driver journals
    its events with their own seqs and its one ``output.truncated``."""
    code = (
        "import json\n"
        "print(json.dumps({'kind': 'session.bound', 'data': {'handle': 'sub-1'}}))\n"
        "for i in range(3000):\n"
        "    print(json.dumps({'kind': 'note', 'data': {'i': i, 'pad': 'p' * 200}}))\n"
        "print(json.dumps({'kind': 'result', 'data': {'summary': 'ok'}}))\n"
    )
    host = SubprocessHost({"command": [sys.executable, "-c", code], "event_format": "jsonl"})
    sid = project.session("subprocess")
    limits = TurnLimits(max_events=5000, max_output_bytes=100_000)
    result = project.run_turn(sid, "subprocess", host, limits)

    assert result.succeeded
    journal = project.journaled(sid)
    assert [e["seq"] for e in journal] == list(range(1, len(journal) + 1))
    assert result.outcome.last_seq == len(journal)  # the host's seqs, unchanged
    assert [e["kind"] for e in journal].count(TRUNCATED_KIND) == 1
    assert journal[-2]["kind"] == "result" and journal[-1]["kind"] == TRUNCATED_KIND
    notes = [e for e in journal if e["kind"] == "note"]
    kept_bytes = sum(len(_encoded(e["kind"], e["data"])) for e in journal[: len(notes) + 1])
    assert kept_bytes <= 100_000
    assert journal[-1]["data"]["dropped_events"] == 3000 - len(notes)
    assert journal[-1]["data"]["limit"]["reached"] == "max_output_bytes"


def test_a_result_over_the_limit_fails_the_turn_as_protocol(project: Project) -> None:
    host = InProcessHost(result_for=lambda request: {"summary": "s" * 5000})
    sid = project.session("inprocess")
    result = project.run_turn(sid, "inprocess", host, TurnLimits(max_result_bytes=1024))

    assert not result.succeeded
    receipt = SessionService(project.store).receipt_event(sid, result.turn_id).receipt
    assert receipt.outcome == "failure"
    assert receipt.error_kind == "protocol"
    assert "max_result_bytes" in receipt.message and "1024" in receipt.message
    state = SessionService(project.store).load(sid)
    assert state.counters.turns_failed == 1 and state.counters.turns_completed == 0


def test_a_result_within_the_limit_completes_the_turn(project: Project) -> None:
    host = InProcessHost(result_for=lambda request: {"summary": "s" * 900})
    sid = project.session("inprocess")
    result = project.run_turn(sid, "inprocess", host, TurnLimits(max_result_bytes=1024))
    assert result.succeeded
    assert SessionService(project.store).load(sid).counters.turns_completed == 1
