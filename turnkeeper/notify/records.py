"""The notifications stream: endpoints, deliveries and failures as versioned records.

One stream per project (kind ``notifications``) holds the endpoints a project named
and, per endpoint, how far along each session and goal stream it has been told
(its cursors). It lives in the event store, so every ``run``, worker and ``serve``
sharing a database (SQLite or PostgreSQL) sees the same endpoints and cursors, and
``verify`` / ``repair`` fold it like every other stream (:class:`NotifyFolding`).

An endpoint's secret is kept here too: the deliverer signs with it wherever it runs.
It is a :class:`~pydantic.SecretStr` in memory, so a log line, a ``repr`` or a
traceback shows ``**********``; only the store's JSON holds its value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Final, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    field_serializer,
)

from turnkeeper.errors import DataLoss, FailedPrecondition
from turnkeeper.store.records import EventRecord, IndexEntry

NOTIFY_KIND: Final = "notifications"
NOTIFY_STREAM: Final = "notifications:project"
NOTIFY_SCHEMA_VERSION: Final = 1
MAX_ERROR_CHARS: Final = 500

# The events a person must act on, as an endpoint names them.
EventName = Literal[
    "gate_opened", "session_crashed", "session_suspended", "goal_closed", "turn_hung"
]
EVENT_NAMES: Final[tuple[EventName, ...]] = (
    "gate_opened",
    "session_crashed",
    "session_suspended",
    "goal_closed",
    "turn_hung",
)
Url = Annotated[str, Field(min_length=8, max_length=2000)]
EndpointId = Annotated[str, Field(min_length=1, max_length=64)]
StreamId = Annotated[str, Field(min_length=1, max_length=300)]
Key = Annotated[str, Field(min_length=1, max_length=200)]
ErrorText = Annotated[str, Field(max_length=MAX_ERROR_CHARS)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class _Record(_Model):
    schema_version: Literal[1] = NOTIFY_SCHEMA_VERSION
    at: AwareDatetime


class EndpointAdded(_Record):
    type: Literal["notify.endpoint_added"] = "notify.endpoint_added"
    endpoint_id: EndpointId
    url: Url
    events: tuple[EventName, ...] = Field(min_length=1, max_length=len(EVENT_NAMES))
    secret: SecretStr
    by: str = Field(default="", max_length=200)
    # Each session and goal stream's head when the endpoint was added: it is told of
    # what happens from then on, not of the past.
    start: dict[StreamId, int] = Field(default_factory=dict, max_length=100_000)

    @field_serializer("secret", when_used="json")
    def _secret_value(self, secret: SecretStr) -> str:
        # The store's JSON is where the secret lives (see the module docstring).
        return secret.get_secret_value()


class EndpointRemoved(_Record):
    type: Literal["notify.endpoint_removed"] = "notify.endpoint_removed"
    endpoint_id: EndpointId
    by: str = Field(default="", max_length=200)


class _Attempted(_Record):
    """One notification (stream and seq of the event it comes from) to one endpoint."""

    endpoint_id: EndpointId
    stream_id: StreamId
    seq: int = Field(ge=1)
    key: Key


class Delivered(_Attempted):
    """The endpoint answered 2xx: the endpoint's cursor on ``stream_id`` moves to ``seq``."""

    type: Literal["notify.delivered"] = "notify.delivered"
    attempts: int = Field(ge=1)
    status_code: int = Field(ge=100, le=599)


class DeliveryFailed(_Attempted):
    """An attempt failed; the next is not made before ``next_attempt_at``."""

    type: Literal["notify.failed"] = "notify.failed"
    attempt: int = Field(ge=1)
    error: ErrorText
    next_attempt_at: AwareDatetime


class GaveUp(_Attempted):
    """Every attempt failed: the notification is dropped (and counted), the cursor moves on."""

    type: Literal["notify.gave_up"] = "notify.gave_up"
    attempts: int = Field(ge=1)
    error: ErrorText


class Scanned(_Record):
    """Events read that notify this endpoint of nothing: its cursors move past them."""

    type: Literal["notify.scanned"] = "notify.scanned"
    endpoint_id: EndpointId
    cursors: dict[StreamId, int] = Field(max_length=100_000)


NotifyEvent = Annotated[
    EndpointAdded | EndpointRemoved | Delivered | DeliveryFailed | GaveUp | Scanned,
    Field(discriminator="type"),
]
NOTIFY_EVENT_ADAPTER: TypeAdapter[NotifyEvent] = TypeAdapter(
    NotifyEvent, config=ConfigDict(defer_build=True)
)


# --- the state the stream folds to ------------------------------------------------------


class Failing(_Model):
    """The notification an endpoint has not taken yet, and how its attempts went."""

    stream_id: str
    seq: int
    key: str
    failures: int  # attempts in a row that failed
    last_error: str
    since: AwareDatetime
    next_attempt_at: AwareDatetime


class Endpoint(_Model):
    endpoint_id: str
    url: str
    events: tuple[EventName, ...]
    secret: SecretStr
    added_at: AwareDatetime
    # Session or goal stream -> the last seq this endpoint was told of (or that tells
    # it nothing). A stream without one (created since) is read from its start; only
    # events recorded since ``added_at`` notify: an endpoint is not sent the past.
    cursors: dict[str, int] = Field(default_factory=dict)
    failing: Failing | None = None
    delivered: int = 0
    gave_up: int = 0
    last_delivered_at: AwareDatetime | None = None
    last_gave_up: str | None = None  # the error of the last notification given up on

    @field_serializer("secret", when_used="json")
    def _secret_value(self, secret: SecretStr) -> str:
        return secret.get_secret_value()

    def cursor(self, stream_id: str) -> int:
        return self.cursors.get(stream_id, 0)


class NotifyState(_Model):
    schema_version: Literal[1] = NOTIFY_SCHEMA_VERSION
    endpoints: dict[str, Endpoint] = Field(default_factory=dict)


def _moved(cursors: dict[str, int], stream_id: str, seq: int) -> dict[str, int]:
    # Cursors only move forward: two deliverers racing record in either order.
    return {**cursors, stream_id: max(cursors.get(stream_id, 0), seq)}


def evolve_notify(state: NotifyState | None, event: NotifyEvent) -> NotifyState:
    state = state or NotifyState()
    endpoints = dict(state.endpoints)
    if isinstance(event, EndpointAdded):
        endpoints[event.endpoint_id] = Endpoint(
            endpoint_id=event.endpoint_id,
            url=event.url,
            events=event.events,
            secret=event.secret,
            added_at=event.at,
            cursors=dict(event.start),
        )
        return NotifyState(endpoints=endpoints)
    if isinstance(event, EndpointRemoved):
        endpoints.pop(event.endpoint_id, None)
        return NotifyState(endpoints=endpoints)
    found = endpoints.get(event.endpoint_id)
    if found is None:  # recorded by a deliverer that raced the endpoint's removal
        return state
    if isinstance(event, Scanned):
        cursors = dict(found.cursors)
        for stream_id, seq in event.cursors.items():
            cursors = _moved(cursors, stream_id, seq)
        changed = found.model_copy(update={"cursors": cursors})
    elif isinstance(event, DeliveryFailed):
        if found.cursor(event.stream_id) >= event.seq:
            return state  # another deliverer got it through meanwhile
        before = found.failing
        same = before is not None and (before.stream_id, before.seq) == (event.stream_id, event.seq)
        failing = Failing(
            stream_id=event.stream_id,
            seq=event.seq,
            key=event.key,
            failures=(before.failures if before is not None and same else 0) + 1,
            last_error=event.error,
            since=before.since if before is not None else event.at,
            next_attempt_at=event.next_attempt_at,
        )
        changed = found.model_copy(update={"failing": failing})
    else:
        cleared = found.failing
        if cleared is not None and (cleared.stream_id, cleared.seq) == (event.stream_id, event.seq):
            cleared = None
        update: dict[str, object] = {
            "cursors": _moved(found.cursors, event.stream_id, event.seq),
            "failing": cleared,
        }
        if isinstance(event, Delivered):
            update["delivered"] = found.delivered + 1
            update["last_delivered_at"] = event.at
        else:
            update["gave_up"] = found.gave_up + 1
            update["last_gave_up"] = event.error
        changed = found.model_copy(update=update)
    endpoints[event.endpoint_id] = changed
    return NotifyState(endpoints=endpoints)


# --- as the store keeps them -------------------------------------------------------------


def decode_event(record: EventRecord) -> NotifyEvent:
    if record.schema_version != NOTIFY_SCHEMA_VERSION:
        raise FailedPrecondition(
            f"{record.stream_id}#{record.seq}: {record.type!r} schema version "
            f"{record.schema_version} is not one this code reads",
            reason="unsupported_schema_version",
            details={"stream_id": record.stream_id, "seq": record.seq, "type": record.type},
        )
    try:
        return NOTIFY_EVENT_ADAPTER.validate_json(record.payload)
    except ValidationError as exc:
        raise DataLoss(
            f"{record.stream_id}#{record.seq}: event does not decode ({exc.error_count()} errors)",
            reason="undecodable_event",
            details={"stream_id": record.stream_id, "seq": record.seq},
        ) from None  # the error's text would quote the record, an endpoint's secret too


def encode_event(event: NotifyEvent) -> str:
    return NOTIFY_EVENT_ADAPTER.dump_json(event).decode()


def decode_state(stream_id: str, text: str) -> NotifyState:
    try:
        return NotifyState.model_validate_json(text)
    except ValidationError:
        raise DataLoss.undecodable_projection(stream_id) from None


def encode_state(state: NotifyState) -> str:
    return state.model_dump_json()


def fold_records(records: Sequence[EventRecord]) -> NotifyState:
    state = NotifyState()
    for record in records:
        state = evolve_notify(state, decode_event(record))
    return state


class NotifyFolding:
    """The stream kind as ``verify`` and ``repair`` fold it (the runtime's
    ``KernelFolder`` takes it beside the kernel's kinds)."""

    kind: Final = NOTIFY_KIND
    projection_schema_version: Final = 1

    def fold(self, events: Sequence[EventRecord]) -> str:
        return encode_state(fold_records(events))

    def fold_with_index(self, events: Sequence[EventRecord]) -> tuple[str, list[IndexEntry]]:
        return self.fold(events), []  # the stream registers no entity ids

    def same_decoded_state(self, a: str, b: str) -> bool:
        try:
            return decode_state(NOTIFY_STREAM, a) == decode_state(NOTIFY_STREAM, b)
        except DataLoss:
            return False
