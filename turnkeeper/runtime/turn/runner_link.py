"""The control plane's side of the runner (turnkeeper/runner/): hosts that run there,
and turns found running there after a restart.

With a runner, a turn's host process belongs to the runner, not to ``run``: when the
control plane dies the host goes on, its events kept in the runner's journal. The
restarted control plane's recovery asks the runner about the turn in flight; if the
runner has it — running, or ended while nobody listened — the turn is reattached:
its events after the last one the session journaled are read from the runner and the
turn finishes as if nothing had happened (the recovery report says "reattached at
seq N"). If the runner is gone, its hosts are proven ended first (pid, start time and
boot id; a recycled pid is never signalled) and the turn is lost as without a runner.

A host run that acknowledges (``ack``) is journaled durably before each
acknowledgement: the runner forgets what it was told is kept.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from turnkeeper.errors import NotFound, TurnkeeperError
from turnkeeper.hosts import HostLoader
from turnkeeper.hosts.base import Host, HostRun
from turnkeeper.json_types import JsonDict
from turnkeeper.kernel.session import SessionState

log = logging.getLogger(__name__)

# How long recovery waits for a turn the runner is still starting: 50 x 0.1 s.
_STARTING_TRIES = 50
_STARTING_PAUSE_S = 0.1


@dataclass(frozen=True)
class Reattached:
    """A turn in flight that the runner still has: its run, and the seq to read after."""

    run: HostRun
    after_seq: int


class RunnerLink:
    """The project's runner, seen from the control plane (``state_dir``: .turnkeeper/)."""

    def __init__(self, state_dir: Path, *, required: bool = False) -> None:
        self.state_dir = state_dir
        # Required (``run --runner require``): no host runs here when the runner is away.
        self.required = required

    def available(self) -> bool:
        from turnkeeper.runner import runner_available

        return runner_available(self.state_dir)

    def loader(self, fallback: HostLoader | None = None) -> HostLoader:
        """A host loader whose hosts run their turns in the runner; while no runner
        answers, ``fallback``'s run them here (None: the turn's start fails)."""
        from turnkeeper.runner import RunnerClient, RunnerHost

        def load(kind: str, config: JsonDict) -> Host:
            if fallback is not None and not self.available():
                return fallback(kind, config)
            return RunnerHost(kind, config, RunnerClient(self.state_dir))

        return load

    def reattach(self, session: SessionState) -> Reattached | None:
        """The runner's run of ``session``'s turn in flight, or None: no turn in flight,
        no runner answering, a runner that never had this turn, or one whose
        predecessor died under it (``runner_lost``)."""
        turn = session.in_flight
        if turn is None or turn.phase not in ("accepted", "host_started"):
            return None
        from turnkeeper.runner import RunnerClient
        from turnkeeper.runner.turns import RUNNER_LOST

        client = RunnerClient(self.state_dir)
        # A turn the runner is still starting (the control plane died in its start)
        # has no host identity yet: asked again for a bounded while, then it is lost.
        for _ in range(_STARTING_TRIES):
            try:
                if client.turn(turn.envelope.turn_id).end_reason == RUNNER_LOST:
                    # Its runner died under it (a successor recorded so): the host is
                    # gone and its last events with it; lost on restore, as with none.
                    client.close()
                    return None
                run = client.attach(turn.envelope.turn_id)
            except NotFound:
                client.close()
                return None  # started before the runner, or never reached it
            except TurnkeeperError as error:
                if error.reason == "host_starting":
                    time.sleep(_STARTING_PAUSE_S)
                    continue
                client.close()
                if error.reason == "runner_unavailable":
                    return None  # no runner: the turn is lost as without one
                raise
            return Reattached(run=run, after_seq=turn.last_host_seq)
        client.close()
        log.warning("turn %s: the runner never finished starting it", turn.envelope.turn_id)
        return None

    def prove_hosts_ended(self) -> list[str]:
        """With the runner dead: end what is left of its hosts and say what was proven
        (one line per turn); nothing when a runner is alive or there never was one."""
        from turnkeeper.runner import prove_hosts_ended

        if not (self.state_dir / "runner").exists():
            return []
        try:
            proofs = prove_hosts_ended(self.state_dir)
        except TurnkeeperError as error:
            if error.reason == "runner_alive":
                return []
            raise
        return [f"{p.turn_id}: host {p.host}" for p in proofs]


@dataclass(frozen=True)
class RunnerAway:
    """A session waiting for a required runner: how long, and whether to say so now."""

    waited_s: float
    announce: bool  # the outage's first look, then every ``ANNOUNCE_EVERY_S``


class RunnerWait:
    """``run --runner require``: a session whose next turn needs the runner waits while
    none answers, looking again every ``POLL_S``, for at most ``limit_s`` seconds of one
    outage; then it stops (``runner_unavailable``). Nothing is accepted meanwhile, so
    an outage spends no attempt and loses no turn."""

    POLL_S = 1.0
    ANNOUNCE_EVERY_S = 30.0

    def __init__(
        self, link: RunnerLink, limit_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.link = link
        self.limit_s = limit_s
        self._clock = clock
        # session id -> (when it found no runner, when that was last said)
        self._away: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def check(self, sid: str) -> RunnerAway | None:
        """None if the session may go on (a runner answers, or none is required)."""
        if not self.link.required or self.link.available():
            with self._lock:
                self._away.pop(sid, None)
            return None
        now = self._clock()
        with self._lock:
            since, said = self._away.get(sid, (now, -1.0))
            announce = said < 0 or now - said >= self.ANNOUNCE_EVERY_S
            self._away[sid] = (since, now if announce else said)
        return RunnerAway(waited_s=now - since, announce=announce)

    def exhausted(self, away: RunnerAway) -> bool:
        return away.waited_s >= self.limit_s


def forget_turn(run: HostRun) -> None:
    """Tell a runner its finished turn is fully kept (other runs: nothing to do). A
    failure leaves the turn in the runner's journal, where it does no harm: logged."""
    close = getattr(run, "close", None)
    if close is None:
        return
    try:
        close()
    except TurnkeeperError as error:
        log.warning("the runner kept a finished turn: %s", error.message)
