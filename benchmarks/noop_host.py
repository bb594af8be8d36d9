"""In-process hosts for the benchmarks: a turn costs no process and no model call.

Both are :class:`~turnkeeper.hosts.inprocess.InProcessHost` with a turn of their own.

:class:`NoopHost`: a turn is three events (session bound, a message, the result)
and a success, so what a benchmark times is turnkeeper alone — the driver, both
kernels and the store. Its process identity is this process (a real, live
identity) and ``kill_tree`` never signals it.

:class:`CrashAfterStartHost` starts a turn whose process is already dead (the
identity of a process the benchmark started and SIGKILLed) and then "crashes the
control plane": after its first event (the host session bound, which the driver
journals at once, and the host's start with it), reading the next raises
:class:`SimulatedCrash`, a ``BaseException`` that unwinds through the driver like a
SIGKILL would stop it, leaving the turn accepted and host-started with no receipt.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from turnkeeper.host_reports import HostEvent, ProcessIdentity
from turnkeeper.hosts import TurnRequest, process_tree
from turnkeeper.hosts.base import Emit
from turnkeeper.hosts.inprocess import InProcessHost, InProcessRun

DEFAULT_REPLY = "Worked on the todo: read the failing test, patched the parser, re-ran the suite."


class NoopHost(InProcessHost):
    """Host kind ``noop``: every turn succeeds at once and replies ``reply``.

    The result carries no ``todo_done``, so the todo never finishes and every
    turn after the first is a continuation of the same host session.
    """

    def __init__(self, reply: str = DEFAULT_REPLY) -> None:
        super().__init__(self._reply, kind="noop", handle_prefix="noop")
        self.reply = reply
        self.turns = 0

    def start(self, request: TurnRequest) -> InProcessRun:
        self.turns += 1
        return super().start(request)

    def _reply(self, request: TurnRequest, emit: Emit) -> dict[str, Any]:
        emit("message", {"text": self.reply})
        return {"summary": self.reply}


class SimulatedCrash(BaseException):
    """Raised out of a run's event stream: the control plane "dies" mid-turn."""


def _crash(request: TurnRequest, emit: Emit) -> dict[str, Any]:
    raise SimulatedCrash("the control plane was killed while the host ran")


class CrashAfterStartHost(InProcessHost):
    """Host kind ``noop``: starts a turn "in" a dead process, then crashes the driver.

    ``dead_pid``/``dead_start_time`` name a process that existed and was SIGKILLed,
    so recovery's probe finds it gone (not a pid that merely never existed).
    """

    def __init__(self, dead_pid: int, dead_start_time: int) -> None:
        super().__init__(_crash, kind="noop", handle_prefix="noop")
        self.dead_pid = dead_pid
        self.dead_start_time = dead_start_time
        self.started: list[str] = []

    def start(self, request: TurnRequest) -> InProcessRun:
        self.started.append(request.turn_id)
        handle = request.host_session_handle or f"noop-{request.turn_id}"
        return _CrashAfterStartRun(request, handle, _crash, self.identify(request))

    def identify(self, request: TurnRequest) -> ProcessIdentity:
        return ProcessIdentity(
            pid=self.dead_pid,
            start_time=self.dead_start_time,
            boot_id=process_tree.boot_id(),
            marker=request.turn_id,
        )


class _CrashAfterStartRun(InProcessRun):
    """Binds the host session, then "kills the control plane" as it reads on."""

    def events(self, after_seq: int = 0, *, follow: bool = True) -> Iterator[HostEvent]:
        del follow
        if after_seq < 1:
            yield HostEvent(seq=1, kind="session.bound", data={"handle": self._handle})
        raise SimulatedCrash("the control plane was killed while the host ran")
