"""In-process hosts for the benchmarks: a turn costs no process and no model call.

:class:`NoopHost` is a copy of the tests' in-process host (benchmarks do not
import from ``tests``): a turn is three events (session bound, a message, the
result) and a success, known before the driver asks, so what a benchmark times
is turnkeeper alone — the driver, both kernels and the store. Its process
identity is this process (a real, live identity) and ``kill_tree`` never signals
it.

:class:`CrashAfterStartHost` starts a turn whose process is already dead (the
identity of a process the benchmark started and SIGKILLed) and then "crashes the
control plane": reading the host's events raises :class:`SimulatedCrash`, a
``BaseException`` that unwinds through the driver like a SIGKILL would stop it,
leaving the turn accepted and host-started with no receipt.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
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

DEFAULT_REPLY = "Worked on the todo: read the failing test, patched the parser, re-ran the suite."


class NoopRun:
    """A finished run: its events and outcome are known before the driver asks."""

    def __init__(self, request: TurnRequest, handle: str, reply: str) -> None:
        self._identity = process_tree.identify(os.getpid(), request.turn_id)
        resumed = request.host_session_handle is not None
        result: dict[str, Any] = {"summary": reply}
        self._events = [
            HostEvent(seq=1, kind="session.bound", data={"handle": handle, "resumed": resumed}),
            HostEvent(seq=2, kind="message", data={"text": reply}),
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
        # The identity is this process: there is nothing of ours to end.
        return KillReport(turn_id=self._identity.marker)

    def is_alive(self) -> bool:
        return False


@dataclass
class NoopHost:
    """Host kind ``noop``: every turn succeeds at once and replies ``reply``.

    The result carries no ``todo_done``, so the todo never finishes and every
    turn after the first is a continuation of the same host session.
    """

    reply: str = DEFAULT_REPLY
    kind: str = "noop"
    turns: int = 0

    def start(self, request: TurnRequest) -> NoopRun:
        self.turns += 1
        handle = request.host_session_handle or f"noop-{uuid.uuid4().hex[:12]}"
        return NoopRun(request, handle, self.reply)

    def loader(self, kind: str, config: dict[str, Any]) -> Host:
        """A ``host_loader``: this host for its own kind, nothing else."""
        del config
        if kind != self.kind:
            raise AssertionError(f"the no-op host was asked for host kind {kind!r}")
        return self


class SimulatedCrash(BaseException):
    """Raised out of a run's event stream: the control plane "dies" mid-turn."""


class CrashedRun:
    def __init__(self, identity: ProcessIdentity) -> None:
        self._identity = identity

    @property
    def identity(self) -> ProcessIdentity:
        return self._identity

    def events(self, after_seq: int = 0, *, follow: bool = True) -> Iterator[HostEvent]:
        del after_seq, follow
        raise SimulatedCrash("the control plane was killed while the host ran")

    def wait(self, timeout: float | None = None) -> HostOutcome:
        raise SimulatedCrash("the control plane was killed while the host ran")

    def kill_tree(self) -> KillReport:
        return KillReport(turn_id=self._identity.marker)

    def is_alive(self) -> bool:
        return False


@dataclass
class CrashAfterStartHost:
    """Host kind ``noop``: starts a turn "in" a dead process, then crashes the driver.

    ``dead_pid``/``dead_start_time`` name a process that existed and was SIGKILLed,
    so recovery's probe finds it gone (not a pid that merely never existed).
    """

    dead_pid: int
    dead_start_time: int
    kind: str = "noop"
    started: list[str] = field(default_factory=list)

    def start(self, request: TurnRequest) -> CrashedRun:
        self.started.append(request.turn_id)
        identity = ProcessIdentity(
            pid=self.dead_pid,
            start_time=self.dead_start_time,
            boot_id=process_tree.boot_id(),
            marker=request.turn_id,
        )
        return CrashedRun(identity)

    def loader(self, kind: str, config: dict[str, Any]) -> Host:
        del config
        if kind != self.kind:
            raise AssertionError(f"the crashing host was asked for host kind {kind!r}")
        return self
