"""The runner's turns: starting hosts, journaling their events, back pressure, the end.

Each live turn has one pump thread. It takes the host's events in batches, commits
each batch to the journal and only then wakes the streams that send them on, so no
client ever sees an event a crash could lose. The host's outcome is journaled after
its last event.

Back pressure: past ``max_unacked_events`` or ``max_unacked_bytes`` journaled but
unacknowledged, the pump stops taking the host's events, so the journal stops
growing (the host's own output caps, :class:`~turnkeeper.hosts.base.TurnLimits`,
bound what it holds meanwhile). When no ack has come for ``backpressure_seconds``
the runner ends the turn: its tree is killed and it finishes with ``end_reason``
``runner_backpressure``; nothing past the cap is ever written.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from turnkeeper.crashpoints import crash_point
from turnkeeper.errors import AlreadyExists, FailedPrecondition, TurnkeeperError, Unavailable
from turnkeeper.host_reports import HostEvent
from turnkeeper.hosts import process_tree
from turnkeeper.hosts.base import HostOutcome, HostRun
from turnkeeper.hosts.registry import load_host
from turnkeeper.json_types import JsonDict
from turnkeeper.runner.journal import Journal
from turnkeeper.runner.protocol import (
    Ack,
    AckResult,
    Close,
    Kill,
    StartTurn,
    TurnEnd,
    command_digest,
)
from turnkeeper.vocabulary import HostErrorKind, HostStatus

log = logging.getLogger(__name__)
T = TypeVar("T")

BACKPRESSURE = "runner_backpressure"
RUNNER_LOST = "runner_lost"
RUNNER_STOPPED = "runner_stopped"
_BATCH = 500


class RunnerSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_unacked_events: int = Field(default=50_000, ge=1)
    max_unacked_bytes: int = Field(default=64 * 1024 * 1024, ge=1)
    # How long a turn may stay paused at the cap with no ack before it is ended.
    backpressure_seconds: float = Field(default=600.0, gt=0)


class Spawner:
    """One long-lived thread that starts every host.

    ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child ends, not the
    process: hosts forked from a short-lived connection thread would be killed with it.
    """

    def __init__(self) -> None:
        # Each job runs one call and hands its result or exception to its caller.
        self._queue: queue.Queue[Callable[[], None]] = queue.Queue()
        threading.Thread(target=self._run, name="turnkeeper-runner-spawner", daemon=True).start()

    def call(self, fn: Callable[[], T]) -> T:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def job() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the caller, which re-raises it
                future.set_exception(exc)

        self._queue.put(job)
        return future.result()

    def _run(self) -> None:
        # Unbounded on purpose: the one spawner thread blocks on its queue between jobs
        # and lives as long as the runner process (a daemon thread, ended with it).
        while True:
            self._queue.get()()


@dataclass
class LiveTurn:
    turn_id: str
    run: HostRun
    last_seq: int = 0
    acked_seq: int = 0
    unacked_bytes: int = 0
    last_ack: float = field(default_factory=time.monotonic)
    paused_since: float | None = None
    end_reason: str | None = None
    end: TurnEnd | None = None
    cond: threading.Condition = field(default_factory=threading.Condition)
    pump: threading.Thread | None = None


class Turns:
    def __init__(self, journal: Journal, settings: RunnerSettings) -> None:
        self.journal = journal
        self.settings = settings
        self.spawner = Spawner()
        self._lock = threading.Lock()
        self._live: dict[str, LiveTurn] = {}

    # --- restart ------------------------------------------------------------------

    def recover(self) -> list[str]:
        """A predecessor's pending commands become indeterminate; its unfinished turns
        are ended (whatever of them still runs is killed) and finish ``runner_lost``."""
        self.journal.mark_indeterminate()
        lost: list[str] = []
        for row in self.journal.turns():
            if row.state == "finished":
                continue
            report = process_tree.kill_turn_processes(row.turn_id, row.identity)
            outcome = HostOutcome(
                status=HostStatus.FAILED,
                error_kind=HostErrorKind.SIGNAL,
                message=f"{RUNNER_LOST}: the runner ended while the turn ran "
                f"({len(report.killed)} leftover process(es) killed)",
                last_seq=row.last_seq,
            )
            self.journal.finish_turn(row.turn_id, TurnEnd(outcome=outcome, end_reason=RUNNER_LOST))
            lost.append(row.turn_id)
        return lost

    # --- queries ------------------------------------------------------------------

    def live(self, turn_id: str) -> LiveTurn | None:
        with self._lock:
            return self._live.get(turn_id)

    def live_turns(self) -> list[LiveTurn]:
        with self._lock:
            return list(self._live.values())

    def end_of(self, turn_id: str) -> TurnEnd | None:
        """The turn's end, or None while it runs (``NotFound`` if unknown)."""
        live = self.live(turn_id)
        if live is not None:
            with live.cond:
                return live.end
        return self.journal.turn(turn_id).turn_end

    def wait_end(self, turn_id: str, timeout: float | None) -> TurnEnd:
        live = self.live(turn_id)
        end = self.end_of(turn_id) if live is None else None
        if live is not None:
            with live.cond:
                live.cond.wait_for(lambda: live.end is not None, timeout)
                end = live.end
        if end is None:
            raise Unavailable(f"turn {turn_id} is still running", reason="host_running")
        return end

    # --- commands -----------------------------------------------------------------

    def start(self, cmd: StartTurn) -> JsonDict:
        """Called with the command journaled pending: start the host, journal its turn."""
        turn_id = cmd.request.turn_id
        host = load_host(cmd.host_kind, cmd.host_config)
        self.journal.add_turn(turn_id, cmd.host_kind)
        try:
            run = self.spawner.call(lambda: host.start(cmd.request))
        except BaseException:
            self.journal.forget_turn(turn_id)  # no process ran: nothing to end later
            raise
        crash_point("runner.host_started")
        self.journal.turn_started(turn_id, run.identity)
        live = LiveTurn(turn_id=turn_id, run=run)
        live.pump = threading.Thread(
            target=self._pump, args=(live,), name=f"turnkeeper-runner-{turn_id}", daemon=True
        )
        with self._lock:
            self._live[turn_id] = live
        live.pump.start()
        return run.identity.model_dump(mode="json")

    def check_new_turn(self, cmd: StartTurn) -> None:
        try:
            self.journal.turn(cmd.request.turn_id)
        except TurnkeeperError:
            return
        raise AlreadyExists(
            f"the runner already has turn {cmd.request.turn_id}", reason="turn_exists"
        )

    def kill(self, cmd: Kill) -> JsonDict:
        live = self.live(cmd.turn_id)
        if live is not None:
            report = live.run.kill_tree()
        else:
            row = self.journal.turn(cmd.turn_id)
            report = process_tree.kill_turn_processes(row.turn_id, row.identity)
        return report.model_dump(mode="json")

    def ack(self, cmd: Ack) -> JsonDict:
        def effect(conn: sqlite3.Connection) -> JsonDict:
            row = self.journal.turn(cmd.turn_id)
            if cmd.seq < row.acked_seq:
                raise FailedPrecondition(
                    f"ack {cmd.seq} is behind the turn's ack {row.acked_seq}",
                    reason="ack_regressed",
                    details={"acked_seq": row.acked_seq, "seq": cmd.seq},
                )
            if cmd.seq > row.last_seq:
                raise FailedPrecondition(
                    f"ack {cmd.seq} is past the last event produced ({row.last_seq})",
                    reason="ack_beyond_produced",
                    details={"last_seq": row.last_seq, "seq": cmd.seq},
                )
            Journal.apply_ack(conn, cmd.turn_id, cmd.seq)
            return AckResult(turn_id=cmd.turn_id, acked_seq=cmd.seq).model_dump(mode="json")

        result = self.journal.atomic_command(
            cmd.command_id, cmd.op, cmd.turn_id, command_digest(cmd), effect
        )
        live = self.live(cmd.turn_id)
        if live is not None:
            unacked = self.journal.unacked_bytes(cmd.turn_id)
            with live.cond:
                live.acked_seq = max(live.acked_seq, cmd.seq)
                live.unacked_bytes = unacked
                live.last_ack = time.monotonic()
                live.cond.notify_all()
        return result

    def close(self, cmd: Close) -> JsonDict:
        def effect(conn: sqlite3.Connection) -> JsonDict:
            row = self.journal.turn(cmd.turn_id)
            if row.state != "finished":
                raise FailedPrecondition(
                    f"turn {cmd.turn_id} is still running", reason="turn_not_finished"
                )
            if row.acked_seq < row.last_seq:
                raise FailedPrecondition(
                    f"turn {cmd.turn_id} has unacknowledged events "
                    f"({row.acked_seq} of {row.last_seq} acknowledged)",
                    reason="turn_not_acked",
                    details={"acked_seq": row.acked_seq, "last_seq": row.last_seq},
                )
            Journal.apply_close(conn, cmd.turn_id)
            return {"turn_id": cmd.turn_id, "closed": True}

        result = self.journal.atomic_command(
            cmd.command_id, cmd.op, cmd.turn_id, command_digest(cmd), effect
        )
        with self._lock:
            self._live.pop(cmd.turn_id, None)
        return result

    def stop_all(self, timeout: float = 30.0) -> None:
        """The runner is stopping: end every live turn (``runner_stopped``)."""
        for live in self.live_turns():
            with live.cond:
                if live.end is not None:
                    continue
                live.end_reason = live.end_reason or RUNNER_STOPPED
            live.run.kill_tree()
        deadline = time.monotonic() + timeout
        for live in self.live_turns():
            if live.pump is not None:
                live.pump.join(max(deadline - time.monotonic(), 0.0))

    # --- the pump -----------------------------------------------------------------

    def _pump(self, live: LiveTurn) -> None:
        try:
            self._journal_events(live)
            outcome = live.run.wait()
        except Exception as exc:  # the turn must still end, and say why
            log.exception("turn %s: the runner's pump failed", live.turn_id)
            live.run.kill_tree()
            outcome = HostOutcome(
                status=HostStatus.FAILED,
                error_kind=HostErrorKind.PROTOCOL,
                message=f"the runner could not journal the turn: {exc!r}",
            )
        with live.cond:
            reason = live.end_reason
            last = live.last_seq
        if reason is not None:
            # Events past what was journaled were never sent: the outcome says so.
            outcome = outcome.model_copy(
                update={
                    "status": HostStatus.FAILED,
                    "error_kind": outcome.error_kind or HostErrorKind.SIGNAL,
                    "message": f"{reason}: {_why(reason, self.settings)}",
                    "last_seq": last,
                }
            )
        end = TurnEnd(outcome=outcome, end_reason=reason)
        self.journal.finish_turn(live.turn_id, end)
        with live.cond:
            live.end = end
            live.cond.notify_all()

    def _journal_events(self, live: LiveTurn) -> None:
        run = live.run
        need = 1  # bytes the next event needs under the cap
        while (room := self._admit(live, need)) is not None:
            first = next(iter(run.events(live.last_seq, follow=True)), None)
            if first is None:
                return
            entry = _entry(first)
            if entry[2] > room[1] and live.unacked_bytes > 0:
                need = entry[2]  # it waits (unread) until acks make room for it
                continue
            need = 1
            # A batch fills at most the room left under the caps; an event larger
            # than the whole byte cap is journaled alone, once nothing else waits.
            max_events, max_bytes = min(_BATCH, room[0]), max(room[1], entry[2])
            batch, size = [entry], entry[2]
            for event in run.events(first.seq, follow=False):
                entry = _entry(event)
                if len(batch) >= max_events or size + entry[2] > max_bytes:
                    break
                batch.append(entry)
                size += entry[2]
            self.journal.append_events(live.turn_id, batch)
            crash_point("runner.events")
            with live.cond:
                live.last_seq = batch[-1][0].seq
                live.unacked_bytes += size
                live.cond.notify_all()

    def _room(self, live: LiveTurn) -> tuple[int, int]:
        """Events and bytes the turn may still journal unacknowledged."""
        return (
            self.settings.max_unacked_events - (live.last_seq - live.acked_seq),
            self.settings.max_unacked_bytes - live.unacked_bytes,
        )

    def _admit(self, live: LiveTurn, need: int) -> tuple[int, int] | None:
        """Wait while the turn is at a cap (no room for another event, or for ``need``
        bytes); the room left, or None once the turn was ended for staying there."""

        def blocked(room: tuple[int, int]) -> bool:
            return room[0] <= 0 or (room[1] < need and live.unacked_bytes > 0)

        with live.cond:
            while blocked(room := self._room(live)) and live.end_reason is None:
                now = time.monotonic()
                if live.paused_since is None:
                    live.paused_since = now
                    log.warning("turn %s: paused at the unacknowledged cap", live.turn_id)
                quiet = now - max(live.paused_since, live.last_ack)
                if quiet >= self.settings.backpressure_seconds:
                    live.end_reason = BACKPRESSURE
                    break
                live.cond.wait(min(self.settings.backpressure_seconds - quiet, 1.0))
            live.paused_since = None
            reason = live.end_reason
        if reason == BACKPRESSURE:
            live.run.kill_tree()
            return None
        # A stopping runner still journals what the host printed before it ended.
        return (max(room[0], 1), max(room[1], 0))


def _entry(event: HostEvent) -> tuple[HostEvent, str, int]:
    body = event.model_dump_json()
    return event, body, len(body.encode())


def _why(reason: str, settings: RunnerSettings) -> str:
    if reason == BACKPRESSURE:
        return (
            f"no acknowledgement for {settings.backpressure_seconds}s at the cap of "
            f"{settings.max_unacked_events} events / {settings.max_unacked_bytes} bytes"
        )
    if reason == RUNNER_STOPPED:
        return "the runner was stopped while the turn ran"
    return reason
