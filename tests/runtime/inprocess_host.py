"""The tests' in-process host: a turn is a message and a result, with no process.

Injected through ``ControllerConfig(host_loader=...)`` / ``DriverConfig(host_loader=...)``
so tests can run thousands of turns through the real driver, kernel and store
without spawning anything (see :mod:`turnkeeper.hosts.inprocess`). On top of that
host it keeps every request it was started with, for the tests to inspect.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from turnkeeper.hosts import TurnRequest
from turnkeeper.hosts.base import Emit
from turnkeeper.hosts.inprocess import InProcessHost as _InProcessHost
from turnkeeper.hosts.inprocess import InProcessRun

ResultFor = Callable[[TurnRequest], dict[str, Any]]


def _no_result(request: TurnRequest) -> dict[str, Any]:
    return {"summary": f"turn {request.turn_id} did a little work"}


class InProcessHost(_InProcessHost):
    """Host kind ``inprocess``. ``result_for`` computes each turn's result."""

    def __init__(self, result_for: ResultFor = _no_result) -> None:
        super().__init__(self._work, kind="inprocess", handle_prefix="inproc")
        self.result_for = result_for
        self.requests: list[TurnRequest] = []

    def start(self, request: TurnRequest) -> InProcessRun:
        self.requests.append(request)
        return super().start(request)

    def _work(self, request: TurnRequest, emit: Emit) -> dict[str, Any]:
        emit("message", {"text": f"working on {request.todo_id}"})
        return self.result_for(request)
