"""A tiny projection folder so the store tests do not depend on the kernel.

Stream kind ``counter``: each event's payload is ``{"n": <int>}``; the state is
``{"count": <events>, "sum": <total of n>}``. Event schema version 1 only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from turnkeeper.errors import DataLoss, FailedPrecondition
from turnkeeper.store import EventRecord, EventStore, IndexEntry, NewEvent, StreamAppend

KIND = "counter"


def state_of(values: Iterable[int]) -> str:
    vals = list(values)
    return json.dumps({"count": len(vals), "sum": sum(vals)}, sort_keys=True)


def events_of(values: Iterable[int], schema_version: int = 1) -> list[NewEvent]:
    return [
        NewEvent(type="counter.added", schema_version=schema_version, payload=json.dumps({"n": v}))
        for v in values
    ]


class CounterFolder:
    def __init__(self, projection_version: int = 1) -> None:
        self.projection_version = projection_version
        self.folds = 0

    def projection_schema_version(self, kind: str) -> int:
        return self.projection_version

    def fold(self, kind: str, events: Sequence[EventRecord]) -> str:
        self.folds += 1
        count = total = 0
        for ev in events:  # iterate: the store hands over a lazy view
            if ev.schema_version != 1:
                raise FailedPrecondition(
                    f"event schema version {ev.schema_version} unsupported",
                    reason="unsupported_schema_version",
                    details={"stream_id": ev.stream_id, "seq": ev.seq},
                )
            try:
                total += int(json.loads(ev.payload)["n"])
            except (ValueError, KeyError, TypeError) as exc:
                raise DataLoss(
                    f"undecodable event {ev.seq}",
                    details={"stream_id": ev.stream_id, "seq": ev.seq},
                ) from exc
            count += 1
        return json.dumps({"count": count, "sum": total}, sort_keys=True)

    def same_state(self, kind: str, a: str, b: str) -> bool:
        return bool(json.loads(a) == json.loads(b))


class IndexingCounterFolder(CounterFolder):
    """The toy folder, also telling which entities a stream's events register: every
    event with a ``"register"`` field registers that id as a ``todo``."""

    def fold_with_index(
        self, kind: str, events: Sequence[EventRecord]
    ) -> tuple[str, list[IndexEntry]]:
        entries: list[IndexEntry] = []
        seen: list[EventRecord] = []
        for event in events:
            seen.append(event)
            registered = json.loads(event.payload).get("register")
            if registered:
                entries.append(IndexEntry(entity_id=registered, entity_kind="todo"))
        return self.fold(kind, seen), entries


def add(
    store: EventStore,
    stream_id: str,
    values: Sequence[int],
    *,
    expected: int | None = None,
    index: Sequence[IndexEntry] = (),
) -> int:
    """Append ``values`` to a counter stream with the projection computed from its events."""
    head = store.head(stream_id) if expected is None else expected
    old = [int(json.loads(e.payload)["n"]) for e in store.read_stream(stream_id)][:head]
    return store.append(
        stream_id, KIND, head, events_of(values), state_of(old + list(values)), 1, index
    )


def values_of(store: EventStore, stream_id: str) -> list[int]:
    return [int(json.loads(e.payload)["n"]) for e in store.read_stream(stream_id)]


def part(
    stream_id: str,
    old: Sequence[int],
    values: Sequence[int],
    *,
    expected: int | None = None,
    index: Sequence[IndexEntry] = (),
    kind: str = KIND,
) -> StreamAppend:
    """One counter stream's part of an ``append_many``: ``values`` after the stream's ``old``."""
    return StreamAppend(
        stream_id=stream_id,
        kind=kind,
        expected_seq=len(old) if expected is None else expected,
        events=tuple(events_of(values)),
        projection_state=state_of([*old, *values]),
        projection_schema_version=1,
        index=tuple(index),
    )
