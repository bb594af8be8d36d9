"""Decide-then-append against one stream, for any stream kind.

The append is optimistic: decide on the state at head ``n`` and append with
``expected_seq = n``. When another writer (a thread, a process, a machine) got
there first the store raises :class:`StreamConflict` and writes nothing; we read
again and decide again, so the kernel's rules — a live lease, a stale epoch —
are always judged on the state the append lands on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic

from turnkeeper.errors import Aborted, StreamConflict
from turnkeeper.runtime.codec import EventT, StateT, StreamCodec
from turnkeeper.store.base import EventStore
from turnkeeper.store.records import IndexEntry

MAX_CONFLICT_RETRIES = 16


@dataclass(frozen=True)
class Appended(Generic[StateT, EventT]):
    events: list[EventT]
    state: StateT | None
    head_seq: int


def load_stream(
    store: EventStore, codec: StreamCodec[StateT, EventT], stream_id: str
) -> tuple[StateT | None, int]:
    """The stream's state and head: its projection plus any tail not yet folded in."""
    projection = store.read_projection(stream_id)
    if projection is None:
        return None, 0
    state: StateT | None = codec.decode_state(stream_id, projection.state)
    # A projection is written in the same transaction as its events, so a tail
    # here means a projection repaired from an older fold; fold it in.
    tail = store.read_stream(stream_id, after_seq=projection.head_seq)
    for record in tail:
        state = codec.evolve_event(state, codec.decode_event(record))
    return state, projection.head_seq + len(tail)


def decide_and_append(
    store: EventStore,
    codec: StreamCodec[StateT, EventT],
    stream_id: str,
    decide: Callable[[StateT | None], Sequence[EventT]],
    *,
    index: Callable[[Sequence[EventT]], Sequence[IndexEntry]] = lambda _: (),
    durable: bool = True,
) -> Appended[StateT, EventT]:
    """Run ``decide`` on the current state and append its events; re-decide on conflict.

    ``decide`` raises a typed error to reject: nothing is written then.
    ``durable=False`` lets the store commit without waiting for the disk; only
    for records whose loss the recovery table covers.
    """
    for _ in range(MAX_CONFLICT_RETRIES):
        state, head = load_stream(store, codec, stream_id)
        events = list(decide(state))
        if not events:
            return Appended(events=[], state=state, head_seq=head)
        after = state
        for event in events:
            after = codec.evolve_event(after, event)
        assert after is not None  # an event always yields a state
        try:
            new_head = _append(store, codec, stream_id, head, events, after, index, durable)
        except StreamConflict:
            continue  # another writer appended first: decide again on the new state
        return Appended(events=events, state=after, head_seq=new_head)
    raise Aborted(
        f"{stream_id}: gave up after {MAX_CONFLICT_RETRIES} conflicting writers",
        reason="contention",
    )


def _append(
    store: EventStore,
    codec: StreamCodec[StateT, EventT],
    stream_id: str,
    head: int,
    events: list[EventT],
    after: StateT,
    index: Callable[[Sequence[EventT]], Sequence[IndexEntry]],
    durable: bool,
) -> int:
    return store.append(
        stream_id,
        codec.kind,
        expected_seq=head,
        events=[codec.encode_event(e) for e in events],
        projection_state=codec.encode_state(after),
        projection_schema_version=codec.projection_schema_version,
        index=index(events),
        durable=durable,
    )
