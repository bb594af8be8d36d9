"""An in-process fake host: a turn is a couple of events and a success, with no process.

Injected through ``ControllerConfig(host_loader=...)`` / ``DriverConfig(host_loader=...)``
so tests can run thousands of turns through the real driver, kernel and store
without spawning anything. Its process identity is the test process itself (a
real, live identity), and ``kill_tree`` never signals it: nothing here was spawned.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from turnkeeper.hosts import (
    Host,
    HostEvent,
    HostOutcome,
    HostStatus,
    KillReport,
    ProcessIdentity,
    TurnRequest,
    process_tree,
)

ResultFor = Callable[[TurnRequest], dict[str, Any]]


def _no_result(request: TurnRequest) -> dict[str, Any]:
    return {"summary": f"turn {request.turn_id} did a little work"}


class InProcessRun:
    """A finished run: its events and outcome are known before the driver asks."""

    def __init__(self, request: TurnRequest, handle: str, result: dict[str, Any]) -> None:
        self._identity = process_tree.identify(os.getpid(), request.turn_id)
        resumed = request.host_session_handle is not None
        self._events = [
            HostEvent(seq=1, kind="session.bound", data={"handle": handle, "resumed": resumed}),
            HostEvent(seq=2, kind="message", data={"text": f"working on {request.todo_id}"}),
            HostEvent(seq=3, kind="result", data=result),
        ]
        self._outcome = HostOutcome(
            status=HostStatus.SUCCEEDED,
            host_session_handle=handle,
            result=result,
            last_seq=len(self._events),
        )

    @property
    def identity(self) -> ProcessIdentity:
        return self._identity

    def events(self, after_seq: int = 0, *, follow: bool = True) -> Iterator[HostEvent]:
        del follow  # the run is over: every event is available now
        return iter([e for e in self._events if e.seq > after_seq])

    def wait(self, timeout: float | None = None) -> HostOutcome:
        del timeout
        return self._outcome

    def kill_tree(self) -> KillReport:
        # The identity is the test process: there is nothing of ours to end.
        return KillReport(turn_id=self._identity.marker)

    def is_alive(self) -> bool:
        return False


@dataclass
class InProcessHost:
    """Host kind ``inprocess``. ``result_for`` computes each turn's result."""

    result_for: ResultFor = _no_result
    kind: str = "inprocess"
    requests: list[TurnRequest] = field(default_factory=list)

    def start(self, request: TurnRequest) -> InProcessRun:
        self.requests.append(request)
        handle = request.host_session_handle or f"inproc-{uuid.uuid4().hex[:12]}"
        return InProcessRun(request, handle, self.result_for(request))

    def loader(self, kind: str, config: dict[str, Any]) -> Host:
        """A ``host_loader``: this host for its own kind, nothing else."""
        del config
        if kind != self.kind:
            raise AssertionError(f"the in-process host was asked for host kind {kind!r}")
        return self
