"""``project.sessions`` and the run loop: agents working on goals, turn by turn.

The same services the ``session`` commands and ``run`` use: session admission
(``runtime/services/session_admission.py``), operator actions (stop, resume), durable
operations (revert) and the controller. A host kind is either a registered one
(``python``, ``subprocess``, ``scripted``, ``codex``, ``claude``) or an
:class:`~turnkeeper.hosts.inprocess.InProcessHost` handed over as an object: its turns
run inside this process, so the object must be given to every later ``run`` too.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from turnkeeper.errors import InvalidArgument
from turnkeeper.hosts import Host, load_host
from turnkeeper.hosts.base import TurnLimits
from turnkeeper.hosts.inprocess import InProcessHost
from turnkeeper.json_types import JsonDict, JsonMapping
from turnkeeper.kernel.proposals import checked_input
from turnkeeper.kernel.session import ProgressPolicy, RecoveryPolicy, SessionState
from turnkeeper.project_api.goals import StoreOf
from turnkeeper.runtime.control.controller import Controller, ControllerConfig, RunSummary
from turnkeeper.runtime.control.operations import OperationResult, Operations
from turnkeeper.runtime.control.operator import OperatorActions, OperatorResult
from turnkeeper.runtime.control.stopping import stop_on_signals
from turnkeeper.runtime.services.session_admission import create_session
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.store.base import EventStore

# The bounds ``turnkeeper run`` accepts, for the same parameters here.
SESSION_LEASE_MAX_SECONDS = 24 * 3600
HOST_TIMEOUT_MAX_SECONDS = 7 * 24 * 3600
BACKOFF_MAX_SECONDS = 3600
COUNT_MAX = 1_000_000


class InProcessHosts:
    """In-process hosts by kind, in front of the registered host kinds."""

    def __init__(self) -> None:
        self._hosts: dict[str, InProcessHost] = {}

    def add(self, host: InProcessHost) -> None:
        known = self._hosts.get(host.kind)
        if known is not None and known is not host:
            raise InvalidArgument(
                f"another in-process host already runs kind {host.kind!r} here",
                reason="host_kind_taken",
                details={"kind": host.kind},
            )
        self._hosts[host.kind] = host

    def load(self, kind: str, config: JsonDict) -> Host:
        host = self._hosts.get(kind)
        return host.loader(kind, config) if host is not None else load_host(kind, config)


class Sessions:
    """Sessions: one agent host bound to one goal and one workspace."""

    def __init__(self, store: StoreOf, root: Path, hosts: InProcessHosts) -> None:
        self._store = store
        self._root = root
        self._hosts = hosts

    @property
    def _service(self) -> SessionService:
        return SessionService(self._store())

    def create(
        self,
        goal_id: str,
        *,
        host: str | InProcessHost,
        host_config: JsonMapping | None = None,
        workspace: Path | None = None,
        request_id: str | None = None,
        snapshots: bool = True,
    ) -> SessionState:
        """Bind a host to a goal and a workspace (default: the project root, which must
        be the top of a git repository unless ``snapshots=False``). A retry under the
        same ``request_id`` and arguments returns the same session."""
        if isinstance(host, InProcessHost):
            self._hosts.add(host)
            kind = host.kind
        else:
            kind = host
        return create_session(
            self._store(),
            goal_id,
            workspace or self._root,
            kind,
            dict(host_config or {}),
            request_id=request_id if request_id is not None else str(uuid.uuid4()),
            snapshots=snapshots,
            host_loader=self._hosts.load,
        )

    def show(self, session_id: str) -> SessionState:
        """A session by id or unique prefix: status, lease, turn in flight, counters."""
        return self._service.load(self._service.resolve_id(session_id))

    def list(self) -> list[SessionState]:
        """Every session."""
        return self._service.list()

    def stop(self, session_id: str, reason: str = "stopped by operator") -> OperatorResult:
        """Suspend a session now: end its running host, abandon the turn, release its
        todos. Works while another process's ``run`` drives it."""
        return OperatorActions(self._store()).stop(session_id, reason)

    def resume(self, session_id: str, reason: str = "resumed by operator") -> OperatorResult:
        """Bring a stopped, suspended, crashed or reverted session back to ready."""
        return OperatorActions(self._store()).resume(session_id, reason)

    def crash(self, session_id: str, reason: str = "marked crashed by operator") -> OperatorResult:
        """Mark a session crashed (an operator's call), so that it can be reverted."""
        return OperatorActions(self._store()).crash(session_id, reason)

    def revert(self, session_id: str, request_id: str | None = None) -> OperationResult:
        """Revert a crashed session to its last completed snapshot (workspace and host
        session); a retry under the same ``request_id`` joins the same operation."""
        rid = request_id if request_id is not None else str(uuid.uuid4())
        return Operations(self._store()).revert(session_id, rid)


def _check(name: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:  # NaN fails both comparisons: refused too
        raise InvalidArgument(
            f"{name} must be from {low} to {high}, not {value}",
            reason="out_of_range",
            details={"option": name, "value": value},
        )


def run_sessions(
    store: EventStore,
    hosts: InProcessHosts,
    *,
    sessions: Sequence[str] | None = None,
    max_turns: int | None = None,
    concurrency: int = 64,
    lease_seconds: float = 120.0,
    host_timeout_seconds: int = 3600,
    idle_turns: int = 3,
    idle_replans: int = 2,
    host_failures: int = 5,
    backoff_seconds: float = 5.0,
    progress: Callable[[str], None] | None = None,
    handle_signals: bool = False,
) -> RunSummary:
    """``turnkeeper run`` with the same defaults: recover, then drive until done."""
    _check("lease_seconds", lease_seconds, 0.001, SESSION_LEASE_MAX_SECONDS)
    _check("host_timeout_seconds", host_timeout_seconds, 1, HOST_TIMEOUT_MAX_SECONDS)
    _check("backoff_seconds", backoff_seconds, 0.1, BACKOFF_MAX_SECONDS)
    _check("concurrency", concurrency, 1, 4096)
    if max_turns is not None:
        _check("max_turns", max_turns, 1, COUNT_MAX)
    with checked_input():  # a policy value out of its range is INVALID_ARGUMENT
        policy = RecoveryPolicy(
            max_attempts=4,
            backoff_base_seconds=backoff_seconds,
            backoff_max_seconds=max(300.0, backoff_seconds),
            max_consecutive_host_failures=host_failures,
        )
        guard = ProgressPolicy(
            max_turns_without_progress=idle_turns, max_replans_without_progress=idle_replans
        )
    config = ControllerConfig(
        lease_seconds=lease_seconds,
        host_timeout_seconds=host_timeout_seconds,
        max_turns=max_turns,
        max_concurrent=concurrency,
        policy=policy,
        progress=guard,
        host_loader=hosts.load,
        turn_limits=TurnLimits(),
    )
    controller = Controller(store, config, progress=progress)
    ids = [controller.sessions.resolve_id(s) for s in sessions] if sessions else None
    if not handle_signals:
        return controller.run(ids)
    with stop_on_signals(controller, announce=progress):
        return controller.run(ids)
