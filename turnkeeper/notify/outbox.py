"""Reading the notifications stream and appending to it, conditional on its head.

Every append names the head it decided on; when another process (a second ``run``, a
worker, ``serve``) appended meanwhile, the store refuses it and we read the stream
again and fold the record onto what is there now. Records are written so that
folding them onto a newer state is still right (cursors only move forward; a record
for a removed endpoint changes nothing), so the retry needs no new decision.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from turnkeeper.errors import Aborted, StreamConflict
from turnkeeper.notify.records import (
    NOTIFY_KIND,
    NOTIFY_SCHEMA_VERSION,
    NOTIFY_STREAM,
    NotifyEvent,
    NotifyState,
    decode_state,
    encode_event,
    encode_state,
    evolve_notify,
)
from turnkeeper.store.base import EventStore
from turnkeeper.store.records import NewEvent

MAX_CONFLICT_RETRIES: Final = 16


def load(store: EventStore) -> tuple[NotifyState, int]:
    """The stream's state and head (an empty state at 0 before its first record)."""
    projection = store.read_projection(NOTIFY_STREAM)
    if projection is None:
        return NotifyState(), 0
    return decode_state(NOTIFY_STREAM, projection.state), projection.head_seq


def append(
    store: EventStore,
    decide: Callable[[NotifyState], NotifyEvent | None],
) -> tuple[NotifyState, NotifyEvent | None]:
    """Append what ``decide`` makes of the current state (nothing when it returns None);
    on a conflict, read again and decide again. Returns the state after it."""
    for _ in range(MAX_CONFLICT_RETRIES):
        state, head = load(store)
        event = decide(state)
        if event is None:
            return state, None
        after = evolve_notify(state, event)
        try:
            store.append(
                NOTIFY_STREAM,
                NOTIFY_KIND,
                head,
                [
                    NewEvent(
                        type=event.type,
                        schema_version=NOTIFY_SCHEMA_VERSION,
                        payload=encode_event(event),
                    )
                ],
                encode_state(after),
                NOTIFY_SCHEMA_VERSION,
            )
        except StreamConflict:
            continue
        return after, event
    raise Aborted(
        f"the notifications stream kept changing: {MAX_CONFLICT_RETRIES} appends in a row "
        "lost to another writer",
        reason="conflict_retries_exhausted",
        details={"stream_id": NOTIFY_STREAM},
    )


def record(store: EventStore, event: NotifyEvent) -> NotifyState:
    """Append ``event`` whatever the state (see the module docstring)."""
    state, _ = append(store, lambda _state: event)
    return state
