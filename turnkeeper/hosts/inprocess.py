"""An in-process host: a turn is a Python callable run inside the control plane.

For embedding turnkeeper in a Python program, and for benchmarks and tests that
drive many turns through the real driver, kernels and store without spawning
anything. It is not registered as a host kind: it needs a callable, not a config,
so it is handed to the driver as a ``host_loader`` (``ControllerConfig(host_loader=
host.loader)``).

The callable has the ``python`` host's shape, ``turn(request, emit)`` returning the
result dict (or None), but runs in this process instead of a child. Its result is
validated at the receipt like any host's (docs/agents.md). It runs in the
driver's thread on the first read of the run's events (or :meth:`InProcessRun.wait`),
so after ``turn.host_started`` is journaled and while the driver renews the
session's lease, as a host process would. Before it runs, the host binds the
session's handle (the request's own on a continuation), so a ``session.bound``
event always opens the turn.

Limits, all from having no process of its own:

* No isolation: an ``Exception`` from the callable fails the turn (``exit_code``),
  but whatever else it does (hang, exhaust memory, raise ``BaseException``) it does
  to the control plane.
* No timeout: ``TurnRequest.timeout_seconds`` cannot be enforced, nothing can be
  interrupted, and :meth:`InProcessRun.kill_tree` ends nothing.
* No separate recovery: the run's process identity is the control plane's, so a
  SIGKILL ends host and control plane together; on restart, recovery finds that
  process gone and marks the turn lost. There is never a live host to find by
  marker or to SIGKILL.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator

from turnkeeper.errors import NotFound, Unavailable
from turnkeeper.host_reports import HostEvent, ProcessIdentity
from turnkeeper.hosts import process_tree
from turnkeeper.hosts._events import EventLog
from turnkeeper.hosts.base import Emit, Host, HostOutcome, KillReport, TurnRequest
from turnkeeper.json_types import JsonDict, JsonMapping
from turnkeeper.vocabulary import HostErrorKind, HostStatus

TurnFunction = Callable[[TurnRequest, Emit], JsonDict | None]


class InProcessRun:
    """One turn of :class:`InProcessHost`; the callable runs at most once."""

    def __init__(
        self, request: TurnRequest, handle: str, turn: TurnFunction, identity: ProcessIdentity
    ) -> None:
        self._request = request
        self._handle = handle
        self._turn = turn
        self._identity = identity
        self._log = EventLog()
        self._outcome: HostOutcome | None = None
        self._ran = False
        self._running = False
        # Serialises the one execution: a second reader waits for it instead of
        # running the turn again.
        self._lock = threading.Lock()

    @property
    def identity(self) -> ProcessIdentity:
        return self._identity

    def events(self, after_seq: int = 0, *, follow: bool = True) -> Iterator[HostEvent]:
        # Once the turn has run every event is known, so following has nothing to wait for.
        self._outcome_once()
        return self._log.iter(after_seq, follow=False)

    def wait(self, timeout: float | None = None) -> HostOutcome:
        del timeout  # the turn runs in this call or already ran: there is nothing to bound
        return self._outcome_once()

    def kill_tree(self) -> KillReport:
        # The identity is the control plane itself, and nothing else was spawned.
        return KillReport(turn_id=self._identity.marker)

    def is_alive(self) -> bool:
        return self._running

    def _outcome_once(self) -> HostOutcome:
        with self._lock:
            if self._outcome is None:
                if self._ran:
                    # A BaseException unwound the callable: the turn has no outcome,
                    # exactly as if the control plane had died while it ran.
                    raise Unavailable(
                        f"the in-process turn {self._request.turn_id} was interrupted",
                        reason="host_interrupted",
                    )
                self._ran = self._running = True
                try:
                    self._outcome = self._execute()
                finally:
                    self._running = False
                    self._log.close()
            return self._outcome

    def _execute(self) -> HostOutcome:
        started = time.monotonic()
        resumed = self._request.host_session_handle is not None
        self._log.append("session.bound", {"handle": self._handle, "resumed": resumed})

        def emit(kind: str, data: JsonDict) -> None:
            self._log.append(kind, data)

        try:
            result = self._turn(self._request, emit)
        except Exception as exc:
            return self._failed(HostErrorKind.EXIT_CODE, f"{type(exc).__name__}: {exc}", started)
        if result is not None and not isinstance(result, dict):
            message = f"the turn returned {type(result).__name__}, not a dict"
            return self._failed(HostErrorKind.PROTOCOL, message, started)
        result = result or {}
        self._log.append("result", result)
        return HostOutcome(
            status=HostStatus.SUCCEEDED,
            host_session_handle=self._handle,
            result=result,
            last_seq=self._log.last_seq,
            duration_seconds=round(time.monotonic() - started, 3),
        )

    def _failed(self, kind: HostErrorKind, message: str, started: float) -> HostOutcome:
        # The same fatal event the ``python`` host's runner prints, so the journal
        # reads alike whichever of the two ran the callable.
        self._log.append("error", {"fatal": True, "error_kind": kind.value, "message": message})
        return HostOutcome(
            status=HostStatus.FAILED,
            error_kind=kind,
            message=message,
            host_session_handle=self._handle,
            last_seq=self._log.last_seq,
            duration_seconds=round(time.monotonic() - started, 3),
        )


class InProcessHost:
    """Runs each turn as ``turn(request, emit)`` in this process (see the module doc).

    ``kind`` is the host kind its sessions are created with; ``handle_prefix``
    starts the handles it binds for new host sessions.
    """

    def __init__(
        self, turn: TurnFunction, *, kind: str = "inprocess", handle_prefix: str = "inproc"
    ) -> None:
        self.turn = turn
        self.kind = kind
        self.handle_prefix = handle_prefix

    def start(self, request: TurnRequest) -> InProcessRun:
        handle = request.host_session_handle or f"{self.handle_prefix}-{uuid.uuid4().hex[:12]}"
        return InProcessRun(request, handle, self.turn, self.identify(request))

    def identify(self, request: TurnRequest) -> ProcessIdentity:
        """The process the turn is journaled under: this one, marked with the turn id.

        A subclass may name another process, e.g. one that is already dead, to
        leave behind what a control plane killed mid-turn leaves.
        """
        return process_tree.identify(os.getpid(), request.turn_id)

    def loader(self, kind: str, config: JsonMapping) -> Host:
        """A ``host_loader`` for the driver: this host for its own kind, nothing else.

        Another kind is ``NotFound``, as from :func:`~turnkeeper.hosts.load_host`, so
        the driver fails that turn as a spawn failure rather than leaving it in flight.
        """
        del config  # the callable is the whole configuration
        if kind != self.kind:
            raise NotFound(
                f"unknown host kind {kind!r}; this in-process host runs {self.kind!r}",
                reason="unknown_host_kind",
                details={"kind": kind, "known": [self.kind]},
            )
        return self
