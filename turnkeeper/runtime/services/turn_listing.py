"""A session's turns as the log tells them: ``turn list``, ``turn show`` and ``logs``.

Everything here is read back from the session stream (never from a live process):
each turn's envelope, the time of each step of its transaction, its receipt, the
host events journaled for it, its effects and its snapshot. Turn ids resolve from a
unique prefix (with or without the ``turn-`` prefix every id carries).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from turnkeeper.errors import InvalidArgument, NotFound
from turnkeeper.host_reports import HostEvent
from turnkeeper.json_types import JsonDict
from turnkeeper.kernel.session import SessionEvent, TurnEnvelope
from turnkeeper.kernel.session import events as ev
from turnkeeper.kernel.session.records import ReceiptFailure, ReceiptSuccess, SnapshotRef
from turnkeeper.runtime.log.streams import peek_stream
from turnkeeper.runtime.services.sessions import SESSION_CODEC, SESSION_KIND, session_stream
from turnkeeper.store.base import EventStore
from turnkeeper.store.records import EventRecord

TURN_PREFIX: Final = "turn-"
# Candidates an ambiguous prefix names (the error stays readable).
MAX_CANDIDATES: Final = 10
# The steps of a turn's transaction, in order, as ``turn show`` names them.
PHASES: Final = ("accepted", "host_started", "receipt", "written_back", "completed")
# A turn event's type -> the phase it records (the API's event stream names them too).
PHASE_OF: Final = {
    "turn.accepted": "accepted",
    "turn.host_started": "host_started",
    "turn.receipt_recorded": "receipt",
    "turn.written_back": "written_back",
    "turn.completed": "completed",
    "turn.failed": "failed",
    "turn.lost": "lost",
    "turn.abandoned": "abandoned",
    "turn.unbound_restored": "lost",
}
# Where a turn ends, and the outcome it then has.
_TERMINAL: Final = ("completed", "failed", "lost", "abandoned")
# A turn's effects, as its stream records them (``turn show`` lists them in order).
EffectEvent = ev.EffectIntended | ev.EffectResolved | ev.EffectRejected | ev.EffectsRecorded


def event_time(event: HostEvent, recorded_at: datetime) -> datetime:
    """When host event ``event`` happened, as every view of the log shows it: its own
    time, where the host's event log stamped one, else ``recorded_at``, the time of
    the record that journaled its batch. Never later than that record: an event
    cannot happen after it was journaled, whatever a clock said."""
    if event.at is None:
        return recorded_at
    return min(event.at, recorded_at)


@dataclass(frozen=True)
class JournaledEvent:
    """One host event as ``logs`` shows it: where it sits in the log, and what it says."""

    stream_seq: int  # the session stream's record holding it (``logs --since``)
    at: datetime  # when it happened (:func:`event_time`)
    turn_id: str
    seq: int  # the host's own sequence number within the turn
    kind: str
    data: JsonDict

    def as_json(self) -> JsonDict:
        return {
            "stream_seq": self.stream_seq,
            "at": self.at.isoformat(),
            "turn_id": self.turn_id,
            "seq": self.seq,
            "kind": self.kind,
            "data": self.data,
        }


@dataclass
class TurnInfo:
    """One turn, folded from its records."""

    turn_id: str
    number: int  # 1 for the session's first accepted turn
    envelope: TurnEnvelope
    phases: dict[str, datetime] = field(default_factory=dict)
    outcome: str = "in_flight"
    error_kind: str | None = None
    reason: str | None = None
    host_kind: str | None = None
    host_pid: int | None = None
    host_events: int = 0
    last_event_at: datetime | None = None
    receipt: ReceiptSuccess | ReceiptFailure | None = None
    written_back: ev.WrittenBack | None = None
    effects: list[EffectEvent] = field(default_factory=list)
    snapshot: SnapshotRef | None = None
    events: list[JournaledEvent] = field(default_factory=list)

    @property
    def started(self) -> datetime:
        return self.phases["accepted"]

    @property
    def ended(self) -> datetime | None:
        return next((self.phases[p] for p in _TERMINAL if p in self.phases), None)

    def elapsed_seconds(self, now: datetime) -> float:
        end = self.ended or (now if self.outcome == "in_flight" else self.last_step)
        return max(0.0, (end - self.started).total_seconds())

    @property
    def last_step(self) -> datetime:
        return max(self.phases.values())

    def shown_events(self, last_events: int | None) -> list[JournaledEvent]:
        """The host events ``turn show --events N`` shows: the last N (as a slice, so 0
        shows them all, as it always has), all of them for None."""
        return self.events if last_events is None else self.events[-last_events:]

    def summary_json(self, now: datetime) -> JsonDict:
        env = self.envelope
        return {
            "turn_id": self.turn_id,
            "number": self.number,
            "session_id": env.session_id,
            "kind": env.kind,
            "attempt": env.attempt,
            "todo_id": env.todo_id,
            "outcome": self.outcome,
            "error_kind": self.error_kind,
            "reason": self.reason,
            "started_at": self.started.isoformat(),
            "ended_at": self.ended.isoformat() if self.ended else None,
            "elapsed_seconds": round(self.elapsed_seconds(now), 3),
            "host_events": self.host_events,
        }

    def detail_json(self, now: datetime, last_events: int | None) -> JsonDict:
        shown = self.shown_events(last_events)
        written_back = (
            self.written_back.model_dump(mode="json", exclude={"type", "turn_id", "at"})
            if self.written_back is not None
            else None
        )
        return {
            **self.summary_json(now),
            "envelope": self.envelope.model_dump(mode="json"),
            # A list, in the order the steps happened (JSON objects print sorted).
            "phases": [{"phase": name, "at": at.isoformat()} for name, at in self.phases.items()],
            "host": {"kind": self.host_kind, "pid": self.host_pid},
            "receipt": self.receipt.model_dump(mode="json") if self.receipt else None,
            "written_back": written_back,
            "effects": [e.model_dump(mode="json", exclude={"turn_id"}) for e in self.effects],
            "snapshot": self.snapshot.model_dump(mode="json") if self.snapshot else None,
            "events_shown": len(shown),
            "events": [e.as_json() for e in shown],
        }


def _decoded(record: EventRecord) -> SessionEvent:
    return SESSION_CODEC.decode_event(record)


def list_turns(store: EventStore, session_id: str, *, with_events: bool = False) -> list[TurnInfo]:
    """Every turn of the session, oldest first; ``with_events`` keeps their host events."""
    turns: dict[str, TurnInfo] = {}
    stream = session_stream(session_id)
    for record in store.read_stream(stream):
        if not record.type.startswith("turn."):
            continue
        event = _decoded(record)
        if isinstance(event, ev.TurnAccepted):
            tid = event.envelope.turn_id
            turns[tid] = TurnInfo(tid, len(turns) + 1, event.envelope, {"accepted": event.at})
            continue
        turn = turns.get(getattr(event, "turn_id", ""))
        if turn is None:
            continue  # a turn restored from a snapshot without its acceptance here
        _apply(turn, event, record.seq, with_events)
    return list(turns.values())


# Records of a session stream a turn's brief reads back: the end of the stream, where
# the previous turn's receipt, write-back and last host events are. A turn takes a
# handful of records (its events are journaled a hundred to a record), so the first
# window nearly always holds it; a chatty one is looked for in the wider one.
RECENT_RECORDS: Final = (40, 400)


def recent_turn(store: EventStore, session_id: str, turn_id: str) -> TurnInfo | None:
    """Turn ``turn_id`` as the last records of its session tell it (at most the wider
    of :data:`RECENT_RECORDS`), host events included; None when its acceptance is not
    among them. Bounded whatever the session's length.

    The head this process last saw will do (no read of its own): the window is read to
    the stream's end, so a head that has moved on since only widens it."""
    stream = session_stream(session_id)
    _, head = peek_stream(store, SESSION_CODEC, stream)
    for window in RECENT_RECORDS:
        turn = _turn_after(store, stream, turn_id, max(0, head - window))
        if turn is not None or head <= window:
            return turn
    return None


def _turn_after(store: EventStore, stream: str, turn_id: str, after: int) -> TurnInfo | None:
    turn: TurnInfo | None = None
    for record in store.read_stream(stream, after_seq=after):
        # Only this turn's records are decoded: every one of them names the turn.
        if not record.type.startswith("turn.") or turn_id not in record.payload:
            continue
        event = _decoded(record)
        if isinstance(event, ev.TurnAccepted):
            if event.envelope.turn_id == turn_id:
                turn = TurnInfo(turn_id, 0, event.envelope, {"accepted": event.at})
            continue
        if getattr(event, "turn_id", None) != turn_id:
            continue
        if turn is None:
            # Its acceptance lies before the window: the envelope is not needed here.
            continue
        _apply(turn, event, record.seq, True)
    return turn


def _apply(turn: TurnInfo, event: SessionEvent, stream_seq: int, with_events: bool) -> None:
    phase = PHASE_OF.get(event.type)
    if phase is not None:
        turn.phases.setdefault(phase, event.at)
    if phase in _TERMINAL:
        turn.outcome = phase
    if isinstance(event, ev.HostStarted):
        turn.host_kind, turn.host_pid = event.host_kind, event.process.pid
    elif isinstance(event, ev.HostEventsJournaled):
        turn.host_events += len(event.events)
        turn.last_event_at = event_time(event.events[-1], event.at)
        if with_events:
            turn.events.extend(
                JournaledEvent(
                    stream_seq, event_time(e, event.at), turn.turn_id, e.seq, e.kind, dict(e.data)
                )
                for e in event.events
            )
    elif isinstance(event, ev.ReceiptRecorded):
        turn.receipt = event.receipt
        if isinstance(event.receipt, ReceiptFailure):
            turn.error_kind = event.receipt.error_kind
            turn.reason = event.receipt.message or event.receipt.error_kind
        elif turn.outcome == "in_flight":
            turn.outcome = "receipt"  # written back from it, now or on restart
    elif isinstance(event, ev.WrittenBack):
        turn.written_back = event
        if turn.outcome == "receipt":
            turn.outcome = "written_back"
    elif isinstance(event, ev.TurnFailed):
        turn.error_kind = event.error_kind
        turn.reason = turn.reason or event.message or event.error_kind
    elif isinstance(event, ev.TurnLost):
        turn.reason = event.proof.detail or f"{event.cause} ({event.proof.ended})"
    elif isinstance(event, ev.UnboundTurnRestored):
        turn.outcome = "lost"
        turn.reason = event.detail or event.cause
    elif isinstance(event, ev.TurnAbandoned):
        turn.reason = event.reason
    elif isinstance(event, ev.TurnCompleted):
        turn.snapshot = event.snapshot
    elif isinstance(event, EffectEvent):
        turn.effects.append(event)


def find_turn(store: EventStore, prefix: str) -> tuple[str, str]:
    """``(session_id, turn_id)`` of the one turn whose id starts with ``prefix``
    (``turn-`` may be left out). None: NOT_FOUND; several: INVALID_ARGUMENT naming them."""
    if not prefix.strip():
        raise InvalidArgument("a turn id (or a prefix of one) is required", reason="empty_id")
    found = store.lookup(prefix)
    if found is not None and found[1] == "turn":
        return found[0].removeprefix("session:"), prefix
    wanted = prefix if prefix.startswith(TURN_PREFIX) else TURN_PREFIX + prefix
    matches: list[tuple[str, str]] = []
    for projection in store.list_projections(SESSION_KIND):
        sid = projection.stream_id.removeprefix("session:")
        for record in store.read_stream(projection.stream_id):
            if record.type != "turn.accepted":
                continue
            event = _decoded(record)
            if isinstance(event, ev.TurnAccepted) and event.envelope.turn_id.startswith(wanted):
                matches.append((sid, event.envelope.turn_id))
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NotFound(f"turn {prefix!r} not found", reason="turn_not_found")
    candidates = sorted(tid for _, tid in matches)
    raise InvalidArgument(
        f"turn prefix {prefix!r} is ambiguous: {len(matches)} turns start with it",
        reason="ambiguous_id",
        details={"candidates": candidates[:MAX_CANDIDATES], "matches": len(matches)},
    )


def show_turn(store: EventStore, session_id: str, turn_id: str) -> TurnInfo:
    for turn in list_turns(store, session_id, with_events=True):
        if turn.turn_id == turn_id:
            return turn
    raise NotFound(f"turn {turn_id!r} not found", reason="turn_not_found")


def journaled_events(
    store: EventStore, session_id: str, *, after_seq: int = 0, turn_id: str | None = None
) -> tuple[list[JournaledEvent], int]:
    """The session's host events in records after stream seq ``after_seq``, in order
    (``turn_id``: that turn's only), and the last stream seq read: where to go on from."""
    found: list[JournaledEvent] = []
    position = after_seq
    for record in store.read_stream(session_stream(session_id), after_seq=after_seq):
        position = record.seq
        if record.type != "turn.host_events":
            continue
        event = _decoded(record)
        if not isinstance(event, ev.HostEventsJournaled):
            continue
        if turn_id is not None and event.turn_id != turn_id:
            continue
        found.extend(
            JournaledEvent(
                record.seq, event_time(e, event.at), event.turn_id, e.seq, e.kind, dict(e.data)
            )
            for e in event.events
        )
    return found, position
