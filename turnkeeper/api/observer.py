"""What the operator signals are computed from: the session streams, read incrementally.

The server is not the controller (``turnkeeper run`` drives the turns, here or on
another machine), so it cannot count turns as they happen in memory. It reads them
back from the log instead: each refresh reads every session stream from where the
last one stopped (the projection's head says whether there is anything new), and
folds what it finds into counters — turns by kind and outcome, their durations,
recovery actions, lease takeovers, effects by outcome. Memory is bounded by the
number of sessions and of turns in flight, not by the log's length, and each record
is read once per server process. Host event batches, the bulk of a log, are skipped
by type without being decoded.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from turnkeeper.kernel.session import events as ev
from turnkeeper.runtime.services.session_listing import list_sessions
from turnkeeper.runtime.services.sessions import SESSION_CODEC, SESSION_KIND
from turnkeeper.store.base import EventStore

# Upper bounds (seconds) of the turn duration histogram.
DURATION_BUCKETS: Final = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600)
_CHUNK: Final = 500
_PHASE_OF: Final = {
    "turn.accepted": "accepted",
    "turn.host_started": "host_started",
    "turn.receipt_recorded": "receipt",
    "turn.written_back": "written_back",
    "turn.completed": "completed",
    "turn.failed": "failed",
    "turn.lost": "lost",
    "turn.abandoned": "abandoned",
}
_TERMINAL: Final = frozenset({"completed", "failed", "lost", "abandoned"})
_WANTED: Final = frozenset(
    {
        *_PHASE_OF,
        "session.lease_acquired",
        "session.lease_released",
        "session.recovery_reported",
        "turn.effect_resolved",
        "turn.effect_rejected",
    }
)


@dataclass
class EndedTurn:
    """A turn that reached its end, with the time of each step it took."""

    turn_id: str
    session_id: str
    kind: str
    attempt: int
    outcome: str
    phases: dict[str, datetime]
    error_kind: str | None = None

    @property
    def seconds(self) -> float:
        return max(0.0, (self.phases[self.outcome] - self.phases["accepted"]).total_seconds())


@dataclass
class _Stream:
    head: int = 0
    lease_owner: str | None = None
    open_turns: dict[str, EndedTurn] = field(default_factory=dict)


@dataclass
class Figures:
    """Everything counted so far (a copy: safe to read while the next refresh runs)."""

    turns: Counter[tuple[str, str]] = field(default_factory=Counter)  # (kind, outcome)
    duration_buckets: dict[str, list[int]] = field(default_factory=dict)  # kind -> per bucket
    duration_sum: dict[str, float] = field(default_factory=dict)
    duration_count: Counter[str] = field(default_factory=Counter)
    recoveries: Counter[str] = field(default_factory=Counter)  # recovery action kind
    lease_takeovers: int = 0
    effects: Counter[str] = field(default_factory=Counter)  # outcome
    sessions: Counter[str] = field(default_factory=Counter)  # status, now

    def copy(self) -> Figures:
        return Figures(
            turns=Counter(self.turns),
            duration_buckets={k: list(v) for k, v in self.duration_buckets.items()},
            duration_sum=dict(self.duration_sum),
            duration_count=Counter(self.duration_count),
            recoveries=Counter(self.recoveries),
            lease_takeovers=self.lease_takeovers,
            effects=Counter(self.effects),
            sessions=Counter(self.sessions),
        )


class TurnObserver:
    def __init__(self, store: EventStore) -> None:
        self._store = store
        self._streams: dict[str, _Stream] = {}
        self._figures = Figures()
        self._lock = threading.Lock()

    def refresh(self) -> Figures:
        """Read what the log gained since the last refresh; the figures now."""
        with self._lock:
            projections = self._store.list_projections(SESSION_KIND)
            for projection in projections:
                scan = self._streams.setdefault(projection.stream_id, _Stream())
                while scan.head < projection.stream_head:
                    records = self._store.read_stream(
                        projection.stream_id, after_seq=scan.head, limit=_CHUNK
                    )
                    if not records:
                        break
                    for record in records:
                        scan.head = record.seq
                        if record.type in _WANTED:
                            self._apply(projection.stream_id, scan, record)
            self._figures.sessions = Counter(s.status for s in list_sessions(self._store))
            return self._figures.copy()

    def _apply(self, stream_id: str, scan: _Stream, record: object) -> None:
        event = SESSION_CODEC.decode_event(record)  # type: ignore[arg-type]
        figures = self._figures
        if isinstance(event, ev.LeaseAcquired):
            if scan.lease_owner is not None and scan.lease_owner != event.owner:
                figures.lease_takeovers += 1
            scan.lease_owner = event.owner
        elif isinstance(event, ev.LeaseReleased):
            scan.lease_owner = None
        elif isinstance(event, ev.RecoveryReported):
            figures.recoveries.update(action.kind for action in event.report.actions)
        elif isinstance(event, ev.EffectResolved):
            figures.effects[event.outcome] += 1
        elif isinstance(event, ev.EffectRejected):
            figures.effects["rejected"] += 1
        elif isinstance(event, ev.TurnAccepted):
            env = event.envelope
            scan.open_turns[env.turn_id] = EndedTurn(
                turn_id=env.turn_id,
                session_id=stream_id.removeprefix("session:"),
                kind=str(env.kind),
                attempt=env.attempt,
                outcome="in_flight",
                phases={"accepted": event.at},
            )
        else:
            turn = scan.open_turns.get(str(getattr(event, "turn_id", "")))
            phase = _PHASE_OF.get(event.type)
            if turn is None or phase is None:
                return
            turn.phases.setdefault(phase, event.at)
            if isinstance(event, ev.TurnFailed):
                turn.error_kind = event.error_kind
            if phase in _TERMINAL:
                del scan.open_turns[turn.turn_id]
                turn.outcome = phase
                self._count(turn)

    def _count(self, turn: EndedTurn) -> None:
        figures = self._figures
        figures.turns[(turn.kind, turn.outcome)] += 1
        seconds = turn.seconds
        buckets = figures.duration_buckets.setdefault(turn.kind, [0] * len(DURATION_BUCKETS))
        for i, bound in enumerate(DURATION_BUCKETS):
            if seconds <= bound:
                buckets[i] += 1
        figures.duration_sum[turn.kind] = figures.duration_sum.get(turn.kind, 0.0) + seconds
        figures.duration_count[turn.kind] += 1
