"""What a running host's turn journals: its start, then its events in batches.

The start is journaled with the turn's next session write, not in a commit of its own.

Step 2 of the turn transaction (host started: the host kind and process identity) may
ride on a cheaper, batched write: if it is lost, the recovery table finds the host by
the turn's marker and ends it. So it is not committed alone the moment the host
starts. It goes into the turn's next write to the session: the first batch of host
events, or else the receipt (with the outcome, for a turn that needs no outside
work). Only a host silent for longer than :data:`EVENT_FLUSH_SECONDS` — the bound a
host event waits for the journal too — has its start committed alone, when that
time is up, so ``status`` shows a running host's process within a second either way.

Every turn saves one commit of the session stream this way (its decide, evolve,
encoding and append): a host that prints events has its start journaled with the
first of them, and one that ends within the second has it journaled with its
receipt.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from turnkeeper.crashpoints import crash_point
from turnkeeper.host_reports import HostEvent
from turnkeeper.kernel.session import (
    LeaseToken,
    RecordHostEvents,
    RecordHostStarted,
    SessionCommand,
)
from turnkeeper.runtime.turn.commits import TurnCommits
from turnkeeper.runtime.turn.event_pump import EVENT_FLUSH_SECONDS


class PendingStart:
    """The host's start until a write of the turn takes it (at most once)."""

    def __init__(
        self,
        command: RecordHostStarted,
        *,
        wait_seconds: float = EVENT_FLUSH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._command: RecordHostStarted | None = command
        self._clock = clock
        self._due = clock() + wait_seconds

    @property
    def pending(self) -> bool:
        return self._command is not None

    def take(self) -> list[SessionCommand]:
        """The start to write first in the turn's next commit; nothing once taken."""
        command, self._command = self._command, None
        return [command] if command is not None else []

    def wait_seconds(self, events_wait: float | None) -> float | None:
        """How long the pump may wait for the host: what the held events allow
        (``events_wait``; None: as long as it takes), and no longer than the start
        may stay unjournaled."""
        if self._command is None:
            return events_wait
        left = max(0.0, self._due - self._clock())
        return left if events_wait is None else min(left, events_wait)


def journal_host(
    commits: TurnCommits,
    sid: str,
    lease: LeaseToken,
    turn_id: str,
    batch: list[HostEvent],
    started: list[SessionCommand],
    *,
    durable: bool = False,
) -> None:
    """One commit of the host's ``started`` record (if still unjournaled) and its
    events ``batch`` (if any), under our ``lease`` on session ``sid``."""
    if not batch:
        commits.session(sid, started, durable=durable)
        crash_point("host.started")
        return
    handle = next(
        (
            str(e.data["handle"])
            for e in batch
            if e.kind == "session.bound" and isinstance(e.data.get("handle"), str)
        ),
        None,
    )
    events = tuple(batch)  # the host's own records, journaled as they are
    command = RecordHostEvents(
        lease=lease, turn_id=turn_id, events=events, host_session_handle=handle
    )
    commits.session(sid, [*started, command], durable=durable)
    if started:
        crash_point("host.started")
    crash_point("host.events")
