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
from typing import Generic, Protocol, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from turnkeeper.errors import DataLoss, FailedPrecondition, NotFound
from turnkeeper.json_types import json_object
from turnkeeper.kernel.upcast import legacy_projection, needs_upcast, upcast_payload
from turnkeeper.store.records import EventRecord, IndexEntry, NewEvent, Projection

StateT = TypeVar("StateT", bound=BaseModel)
EventT = TypeVar("EventT", bound=BaseModel)


# How an event is stored: compact JSON, keys sorted, escaped to ASCII — what
# ``json.dumps(data, separators=(",", ":"), sort_keys=True)`` writes, byte for byte
# (tests/runtime/test_event_encoding.py holds it to that: a checksum covers the text).
# One encoder made once with those options; ``encode`` keeps no state between calls,
# so threads share it.
_SORTED_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"), sort_keys=True)


def _encode_event_json(data: object) -> str:
    return _SORTED_COMPACT_JSON.encode(data)


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


def _legacy_projection(kind: str, version: int, text: str) -> str | None:
    try:
        state = legacy_projection(kind, version, json_object(text))
    except ValueError:
        return None
    return None if state is None else json.dumps(state)


def decode_state(state_type: type[StateT], stream_id: str, text: str) -> StateT:
    """A projection's state; ``DATA_LOSS`` when it does not decode (a reader that needs
    no codec, such as ``status``'s goals, decodes through this too)."""
    try:
        return state_type.model_validate_json(text)
    except ValidationError as exc:
        raise DataLoss.undecodable_projection(stream_id) from exc


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
    # None: every append rewrites the stream's projection. A number k: a large state
    # (runtime/log/streams.py, projection_for) is rewritten once the events since it
    # number its length / k, and readers fold the events after it (``state_of``).
    lag_bytes_per_event: int | None = None

    # Both encoders call the model's serializer as ``model_dump(mode="json")`` and
    # ``model_dump_json()`` do, with the same (default) options: those wrappers pass
    # every one of their fifteen options by keyword, which the serializer then parses,
    # ~a fifth of dumping an event.
    def encode_event(self, event: EventT) -> NewEvent:
        data = event.__pydantic_serializer__.to_python(event, mode="json")
        return NewEvent(
            type=str(data["type"]),
            schema_version=int(data["schema_version"]),
            payload=_encode_event_json(data),
        )

    def decode_event(self, record: EventRecord) -> EventT:
        payload = self.current_payload(record)
        try:
            return self.event_adapter.validate_json(payload)
        except ValidationError as exc:
            raise _undecodable(record, exc.error_count()) from exc

    def current_payload(self, record: EventRecord) -> str:
        """The record's payload in its event's current shape, not decoded: as stored, or
        upcast (turnkeeper/kernel/upcast.py) when it was written in an older shape.
        ``FAILED_PRECONDITION`` for a schema version this code does not read."""
        versions = self.supported_versions.get(record.type)
        if versions is None or record.schema_version not in versions:
            raise FailedPrecondition(
                f"{record.stream_id}#{record.seq}: event {record.type!r} schema version "
                f"{record.schema_version} is not one this code reads",
                reason="unsupported_schema_version",
                details={"stream_id": record.stream_id, "seq": record.seq, "type": record.type},
            )
        if not needs_upcast(record.type, record.schema_version):
            return record.payload
        try:
            return upcast_payload(record.payload)
        except ValueError as exc:  # the upcaster's refusal
            raise _undecodable(record, 1) from exc

    def encode_state(self, state: StateT) -> str:
        return state.__pydantic_serializer__.to_json(state).decode()

    def decode_state(self, stream_id: str, text: str) -> StateT:
        try:
            return decode_state(self.state_type, stream_id, text)
        except DataLoss:
            # Upcast hook: a projection written before its state changed shape in
            # place (turnkeeper/kernel/upcast.py, legacy_projection).
            legacy = _legacy_projection(self.kind, self.projection_schema_version, text)
            if legacy is None:
                raise
            return decode_state(self.state_type, stream_id, legacy)

    def state_of(self, projection: Projection) -> StateT:
        """A listed projection's state with its tail folded in (``Projection.tail``:
        the events after its ``head_seq``, which a lagging projection has)."""
        return state_of(self, projection)

    def fold_records(self, records: Sequence[EventRecord]) -> StateT:
        return self.fold_events(self.decode_event(r) for r in records)


def _undecodable(record: EventRecord, errors: int) -> DataLoss:
    return DataLoss(
        f"{record.stream_id}#{record.seq}: event does not decode ({errors} errors)",
        reason="undecodable_event",
        details={"stream_id": record.stream_id, "seq": record.seq},
    )


def state_of(codec: StreamCodec[StateT, EventT], projection: Projection) -> StateT:
    """``projection``'s state, then each event of its tail evolved onto it: the one way
    every reader of listed projections reads a state that may lag its stream."""
    state = codec.decode_state(projection.stream_id, projection.state)
    for record in projection.tail:
        state = codec.evolve_event(state, codec.decode_event(record))
    return state


class FoldsKind(Protocol):
    """One stream kind as :class:`KernelFolder` folds it, whatever its state and event
    types: the folder holds every kind in one table, so it sees them only through
    what a kind does with the store's records and projection texts."""

    @property
    def kind(self) -> str: ...

    @property
    def projection_schema_version(self) -> int: ...

    def fold(self, events: Sequence[EventRecord]) -> str: ...

    def fold_with_index(self, events: Sequence[EventRecord]) -> tuple[str, list[IndexEntry]]: ...

    def same_decoded_state(self, a: str, b: str) -> bool: ...


@dataclass(frozen=True)
class KindFolding(Generic[StateT, EventT]):
    """A stream kind's codec with what its events register in the entity index
    (runtime/services/goals.py, sessions.py; None: nothing), the two typed together."""

    codec: StreamCodec[StateT, EventT]
    indexer: Callable[[Sequence[EventT]], Sequence[IndexEntry]] | None = None

    @property
    def kind(self) -> str:
        return self.codec.kind

    @property
    def projection_schema_version(self) -> int:
        return self.codec.projection_schema_version

    def fold(self, events: Sequence[EventRecord]) -> str:
        return self.codec.encode_state(self.codec.fold_records(events))

    def fold_with_index(self, events: Sequence[EventRecord]) -> tuple[str, list[IndexEntry]]:
        codec, indexer = self.codec, self.indexer
        entries: list[IndexEntry] = []

        def decoded() -> Iterable[EventT]:
            for record in events:
                event = codec.decode_event(record)
                if indexer is not None:
                    entries.extend(indexer([event]))
                yield event

        return codec.encode_state(codec.fold_events(decoded())), entries

    def same_decoded_state(self, a: str, b: str) -> bool:
        """Whether the two projection texts decode to equal states (False: one does not
        decode); a field added since a projection was written decodes to its default."""
        codec = self.codec
        try:
            return bool(codec.decode_state(codec.kind, a) == codec.decode_state(codec.kind, b))
        except DataLoss:
            return False


class KernelFolder:
    """The store's view of every stream kind the kernel knows."""

    def __init__(self, kinds: Iterable[FoldsKind]):
        self._kinds = {folding.kind: folding for folding in kinds}

    def _kind(self, kind: str) -> FoldsKind:
        try:
            return self._kinds[kind]
        except KeyError:
            raise NotFound(f"unknown stream kind {kind!r}", reason="unknown_stream_kind") from None

    def projection_schema_version(self, kind: str) -> int:
        return self._kind(kind).projection_schema_version

    def fold(self, kind: str, events: Sequence[EventRecord]) -> str:
        return self._kind(kind).fold(events)

    def fold_with_index(
        self, kind: str, events: Sequence[EventRecord]
    ) -> tuple[str, list[IndexEntry]]:
        """The fold and the index entries the events register, decoding each event once
        (``verify`` recomputes the entity index from them)."""
        return self._kind(kind).fold_with_index(events)

    def same_state(self, kind: str, a: str, b: str) -> bool:
        # Compare parsed JSON, so key order and spacing never count as a mismatch; then
        # the decoded states, so a field added since the projection was written (it
        # decodes to its default) does not either.
        try:
            if json.loads(a) == json.loads(b):
                return True
        except json.JSONDecodeError:
            return False
        return self._kind(kind).same_decoded_state(a, b)
