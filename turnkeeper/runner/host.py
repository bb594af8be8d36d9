"""A host whose turns run in the project's runner: the :class:`Host` protocol over
:class:`~turnkeeper.runner.client.RunnerClient`.

``RunnerHost("subprocess", config, client).start(request)`` asks the runner to load
the ``subprocess`` host with ``config`` and start the turn there; the
:class:`RunnerRun` it returns streams the events the runner journaled. The turn
keeps running if this process dies: a successor reattaches with
``client.attach(turn_id)`` and reads on from the last seq it acknowledged.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

from turnkeeper.errors import Unavailable
from turnkeeper.host_reports import HostEvent, ProcessIdentity
from turnkeeper.hosts import process_tree
from turnkeeper.hosts.base import HostOutcome, KillReport, TurnRequest
from turnkeeper.runner.client import RunnerClient
from turnkeeper.runner.protocol import TurnEnd


class RunnerHost:
    def __init__(
        self, kind: str, config: Mapping[str, object] | None, client: RunnerClient
    ) -> None:
        self._kind = kind
        self._config = dict(config or {})
        self._client = client

    @property
    def kind(self) -> str:
        return self._kind

    def start(self, request: TurnRequest) -> RunnerRun:
        # The host inherits the environment of the control plane that asked for the
        # turn (the user's shell: PATH, API keys), as it would without a runner, not
        # the daemon's; the host config's ``env`` still goes over it. It is sent, not
        # kept: the runner's journal holds only a digest.
        request = request.model_copy(update={"inherited_env": dict(os.environ)})
        identity = self._client.start_turn(self._kind, self._config, request)
        return RunnerRun(self._client, request.turn_id, identity)


class RunnerRun:
    """A turn running in the runner (:class:`~turnkeeper.hosts.base.HostRun`)."""

    def __init__(self, client: RunnerClient, turn_id: str, identity: ProcessIdentity) -> None:
        self._client = client
        self.turn_id = turn_id
        self._identity = identity

    @property
    def identity(self) -> ProcessIdentity:
        return self._identity

    def events(self, after_seq: int = 0, *, follow: bool = True) -> Iterator[HostEvent]:
        return self._client.events(self.turn_id, after_seq, follow=follow)

    def wait(self, timeout: float | None = None) -> HostOutcome:
        return self.turn_end(timeout).outcome

    def turn_end(self, timeout: float | None = None) -> TurnEnd:
        """The outcome and, if the runner ended the turn, why (``end_reason``)."""
        return self._client.outcome(self.turn_id, timeout)

    def kill_tree(self) -> KillReport:
        try:
            return self._client.kill(self.turn_id)
        except Unavailable:
            # No runner to ask: its hosts die with it (parent-death signal); what is
            # left carrying the turn's marker is ended from here.
            return process_tree.kill_turn_processes(self.turn_id)

    def is_alive(self) -> bool:
        # The runner runs on this machine: the host's identity is checked here.
        return process_tree.is_alive(self._identity)

    def ack(self, seq: int) -> int:
        """Every event up to ``seq`` is durable on the caller's side."""
        return self._client.ack(self.turn_id, seq)

    def close(self) -> None:
        """The turn ended and every event was acknowledged: the runner forgets it."""
        self._client.close_turn(self.turn_id)
