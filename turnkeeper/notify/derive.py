"""Which events of the log a person must hear of, as notifications (pure: no I/O).

A notification is derived from one event of a session or goal stream, so the event's
stream and sequence number name it for good: the deliverer can derive it again after
any restart, and it is the same notification with the same idempotency key.

* ``gate_opened`` — a goal's ``gate_opened`` (an agent's question, an effect whose
  outcome is unknown): someone must decide.
* ``goal_closed`` — a goal's ``goal_closed``.
* ``session_crashed`` / ``session_suspended`` — a session's ``status_changed`` to
  crashed or suspended, but not a stop a person asked for (``session stop``): they
  know already.
* ``turn_hung`` — a session's ``turn.failed`` whose host was ended as hung.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from pydantic import ValidationError

from turnkeeper.errors import DataLoss
from turnkeeper.json_types import JsonDict
from turnkeeper.kernel.events import GateOpened, GoalClosed
from turnkeeper.kernel.session.events import StatusChanged, TurnFailed
from turnkeeper.notify.records import EventName
from turnkeeper.store.records import EventRecord
from turnkeeper.vocabulary import HostErrorKind

NOTIFICATION_SCHEMA: Final = "turnkeeper.notification.v1"
# The stream kinds notifications come from, and how their ids are written
# (runtime/services/goals.py, sessions.py; tests/notify check they agree).
GOAL_KIND: Final = "goal"
SESSION_KIND: Final = "session"
GOAL_PREFIX: Final = "goal:"
SESSION_PREFIX: Final = "session:"
# The event types any notification comes from: others are skipped without decoding.
SOURCE_TYPES: Final = frozenset(
    {"gate_opened", "goal_closed", "session.status_changed", "turn.failed"}
)


@dataclass(frozen=True)
class Notification:
    event: EventName
    stream_id: str
    seq: int
    occurred_at: datetime
    summary: str
    goal_id: str | None = None
    session_id: str | None = None
    details: JsonDict = field(default_factory=dict)


def derive(record: EventRecord, *, goal_of_session: str | None = None) -> Notification | None:
    """The notification ``record`` makes, or None. ``goal_of_session``: the goal of the
    session whose stream it is (the session's events do not repeat it)."""
    if record.type not in SOURCE_TYPES:
        return None
    try:
        return _derive(record, goal_of_session)
    except ValidationError:
        raise DataLoss(
            f"{record.stream_id}#{record.seq}: event does not decode",
            reason="undecodable_event",
            details={"stream_id": record.stream_id, "seq": record.seq},
        ) from None


def _derive(record: EventRecord, goal_of_session: str | None) -> Notification | None:
    stream, seq, at = record.stream_id, record.seq, record.recorded_at
    if stream.startswith(GOAL_PREFIX):
        goal_id = stream.removeprefix(GOAL_PREFIX)
        if record.type == "gate_opened":
            gate = GateOpened.model_validate_json(record.payload)
            return Notification(
                "gate_opened",
                stream,
                seq,
                at,
                f"goal {goal_id}: gate {gate.gate_id} opened: {gate.title}",
                goal_id=goal_id,
                details={
                    "gate_id": gate.gate_id,
                    "title": gate.title,
                    "blocking": gate.blocking,
                    "scope": list(gate.scope),
                    "resolve": f"turnkeeper gate resolve {gate.gate_id} --decision TEXT --by NAME",
                },
            )
        if record.type == "goal_closed":
            closed = GoalClosed.model_validate_json(record.payload)
            return Notification(
                "goal_closed",
                stream,
                seq,
                at,
                f"goal {goal_id} closed: {closed.closure.summary}",
                goal_id=goal_id,
                details={"reason": str(closed.closure.reason), "summary": closed.closure.summary},
            )
        return None
    if not stream.startswith(SESSION_PREFIX):
        return None
    session_id = stream.removeprefix(SESSION_PREFIX)
    short = session_id[:8]
    if record.type == "session.status_changed":
        changed = StatusChanged.model_validate_json(record.payload)
        status = changed.status.value
        if status == "crashed":
            name: EventName = "session_crashed"
        elif status == "suspended" and changed.action != "stop":
            name = "session_suspended"
        else:
            return None
        return Notification(
            name,
            stream,
            seq,
            at,
            f"session {short} {status}: {changed.reason}",
            goal_id=goal_of_session,
            session_id=session_id,
            details={"status": status, "action": changed.action, "reason": changed.reason},
        )
    if record.type == "turn.failed":
        failed = TurnFailed.model_validate_json(record.payload)
        if failed.error_kind != HostErrorKind.HUNG:
            return None
        return Notification(
            "turn_hung",
            stream,
            seq,
            at,
            f"session {short}: turn {failed.turn_id} hung: {failed.message}",
            goal_id=goal_of_session,
            session_id=session_id,
            details={"turn_id": failed.turn_id, "message": failed.message},
        )
    return None


def body_of(notification: Notification, key: str) -> JsonDict:
    """The JSON a receiver gets: the same on every attempt (the key and the signature
    are in the headers too; only the timestamp header changes)."""
    return {
        "schema": NOTIFICATION_SCHEMA,
        "id": key,
        "event": notification.event,
        "occurred_at": notification.occurred_at.isoformat(),
        "summary": notification.summary,
        "goal_id": notification.goal_id,
        "session_id": notification.session_id,
        "details": notification.details,
        "source": {"stream": notification.stream_id, "seq": notification.seq},
    }
