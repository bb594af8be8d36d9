"""Between kernel and store: typed events and states to versioned JSON and back.

The store keeps opaque JSON; the kernel keeps typed models. A
:class:`StreamCodec` joins them for one stream kind (goal, session, ...), and
:class:`KernelFolder` is the store's :class:`ProjectionFolder`: it folds a stream
again through the kernel's own ``fold`` — the owning code path — so ``verify``
and ``repair`` never hand-patch a projection.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from turnkeeper.errors import DataLoss, FailedPrecondition, NotFound
from turnkeeper.store.records import EventRecord, IndexEntry, NewEvent

StateT = TypeVar("StateT", bound=BaseModel)
EventT = TypeVar("EventT", bound=BaseModel)


def fold_from(
    empty: Callable[[], StateT], evolve: Callable[[StateT | None, EventT], StateT]
) -> Callable[[Iterable[EventT]], StateT]:
    r"""A stream's fold for a project-state stream that starts ``empty()`` and
    ``evolve``\ s one event at a time (the kernels bring folds of their own)."""

    def fold(events: Iterable[EventT]) -> StateT:
        state = empty()
        for event in events:
            state = evolve(state, event)
        return state

    return fold


@dataclass(frozen=True)
class StreamCodec(Generic[StateT, EventT]):
    kind: str
    state_type: type[StateT]
    event_adapter: TypeAdapter[EventT]
    supported_versions: Mapping[str, frozenset[int]]
    fold_events: Callable[[Iterable[EventT]], StateT]
    evolve_event: Callable[[StateT | None, EventT], StateT]
    # Bumped whenever the state model changes shape; an older projection is rebuilt.
    projection_schema_version: int = 1

    def encode_event(self, event: EventT) -> NewEvent:
        data = event.model_dump(mode="json")
        return NewEvent(
            type=str(data["type"]),
            schema_version=int(data["schema_version"]),
            payload=json.dumps(data, separators=(",", ":"), sort_keys=True),
        )

    def decode_event(self, record: EventRecord) -> EventT:
        versions = self.supported_versions.get(record.type)
        if versions is None or record.schema_version not in versions:
            raise FailedPrecondition(
                f"{record.stream_id}#{record.seq}: event {record.type!r} schema version "
                f"{record.schema_version} is not one this code reads",
                reason="unsupported_schema_version",
                details={"stream_id": record.stream_id, "seq": record.seq, "type": record.type},
            )
        try:
            return self.event_adapter.validate_json(record.payload)
        except ValidationError as exc:
            raise DataLoss(
                f"{record.stream_id}#{record.seq}: event does not decode "
                f"({exc.error_count()} errors)",
                reason="undecodable_event",
                details={"stream_id": record.stream_id, "seq": record.seq},
            ) from exc

    def encode_state(self, state: StateT) -> str:
        return state.model_dump_json()

    def decode_state(self, stream_id: str, text: str) -> StateT:
        try:
            return self.state_type.model_validate_json(text)
        except ValidationError as exc:
            raise DataLoss(
                f"{stream_id}: projection does not decode (run `turnkeeper repair`)",
                reason="undecodable_projection",
                details={"stream_id": stream_id},
            ) from exc

    def fold_records(self, records: Sequence[EventRecord]) -> StateT:
        return self.fold_events(self.decode_event(r) for r in records)


# What a stream kind's events register in the entity index (runtime/services/goals.py, sessions.py).
Indexer = Callable[[Sequence[Any]], Sequence[IndexEntry]]


class KernelFolder:
    """The store's view of every stream kind the kernel knows."""

    def __init__(
        self,
        codecs: Iterable[StreamCodec[Any, Any]],
        indexers: Mapping[str, Indexer] | None = None,
    ):
        self._codecs = {codec.kind: codec for codec in codecs}
        self._indexers = dict(indexers or {})

    def codec(self, kind: str) -> StreamCodec[Any, Any]:
        try:
            return self._codecs[kind]
        except KeyError:
            raise NotFound(f"unknown stream kind {kind!r}", reason="unknown_stream_kind") from None

    def projection_schema_version(self, kind: str) -> int:
        return self.codec(kind).projection_schema_version

    def fold(self, kind: str, events: Sequence[EventRecord]) -> str:
        codec = self.codec(kind)
        return codec.encode_state(codec.fold_records(events))

    def fold_with_index(
        self, kind: str, events: Sequence[EventRecord]
    ) -> tuple[str, list[IndexEntry]]:
        """The fold and the index entries the events register, decoding each event once
        (``verify`` recomputes the entity index from them)."""
        codec = self.codec(kind)
        indexer = self._indexers.get(kind)
        entries: list[IndexEntry] = []

        def decoded() -> Iterable[Any]:
            for record in events:
                event = codec.decode_event(record)
                if indexer is not None:
                    entries.extend(indexer([event]))
                yield event

        return codec.encode_state(codec.fold_events(decoded())), entries

    def same_state(self, kind: str, a: str, b: str) -> bool:
        # Compare parsed JSON, so key order and spacing never count as a mismatch; then
        # the decoded states, so a field added since the projection was written (it
        # decodes to its default) does not either.
        try:
            if json.loads(a) == json.loads(b):
                return True
        except json.JSONDecodeError:
            return False
        codec = self.codec(kind)
        try:
            return bool(codec.decode_state(kind, a) == codec.decode_state(kind, b))
        except DataLoss:
            return False
