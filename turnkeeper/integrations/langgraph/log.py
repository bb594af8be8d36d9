"""A LangGraph thread as one stream of the event store, and its fold.

One stream per thread (kind ``langgraph.thread``). Its events, JSON each:

* ``langgraph.thread_started`` ``{"thread_id"}``: the first event, so that a thread
  whose id is too long for a stream id (hashed, :func:`thread_stream_id`) still names
  itself.
* ``langgraph.checkpoint`` ``{"ns", "id", "parent", "checkpoint", "metadata", "run_id",
  "blobs"}``: a checkpoint without its channel values, plus the values of the channels
  whose version is new in it (``blobs``: ``[channel, version, type, data, base]``), so
  a value is stored once per version, not once per checkpoint. A list channel whose
  new value only appends to an earlier version's (a conversation's messages) is stored
  as the appended items with ``base`` naming that version: a step stores what it
  added, not the whole conversation again. ``base`` is null for a whole value.
* ``langgraph.writes`` ``{"ns", "checkpoint_id", "task_id", "task_path", "upsert",
  "writes"}``: a task's pending writes (``[idx, channel, type, data]``).
* ``langgraph.checkpoints_removed`` ``{"checkpoints": [[ns, id], ...], "why"}``:
  ``delete_for_runs`` and ``prune``, as tombstones.
* ``langgraph.thread_deleted`` ``{}``: ``delete_thread``, a tombstone; the saver
  refuses every later write to the thread.

Serialized values (``type``, ``data``) are LangGraph's serializer's output, base64 in
the JSON; this module never decodes them, so ``verify`` folds the streams without
LangGraph installed. The projection is a small summary (thread id, live checkpoints,
whether deleted), the same whether the saver or ``verify`` folds the stream. Each run
id a thread's checkpoints name is registered in the store's entity index
(:func:`run_entity`), so ``delete_for_runs`` finds the threads of a run without
reading every thread.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from turnkeeper.errors import DataLoss, FailedPrecondition
from turnkeeper.json_types import JsonDict, JsonValue
from turnkeeper.store.records import EventRecord, IndexEntry, NewEvent

THREAD_KIND: Final = "langgraph.thread"
PROJECTION_SCHEMA_VERSION: Final = 1
EVENT_SCHEMA_VERSION: Final = 1

STARTED: Final = "langgraph.thread_started"
CHECKPOINT: Final = "langgraph.checkpoint"
WRITES: Final = "langgraph.writes"
REMOVED: Final = "langgraph.checkpoints_removed"
DELETED: Final = "langgraph.thread_deleted"
EVENT_TYPES: Final = frozenset({STARTED, CHECKPOINT, WRITES, REMOVED, DELETED})
RUN_ENTITY: Final = "langgraph.run"

_PREFIX = "langgraph-thread:"
_HASHED_PREFIX = "langgraph-thread-sha256:"
# The store's stream ids are at most 200 characters; a longer thread id is hashed.
_MAX_PLAIN_ID = 200 - len(_PREFIX)

# A serialized value: the serializer's type tag and its bytes in base64 (None: "empty").
Typed = tuple[str, str | None]


@dataclass(frozen=True)
class StoredBlob:
    """A channel's value at one version: whole (``base`` None), or the items appended to
    the list at version ``base`` of the same channel, ``depth`` such steps from a whole
    value."""

    value: Typed
    base: str | None = None
    depth: int = 0


def _digest(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def run_prefix(run_id: str) -> str:
    """The start of every entity id that says a thread has a checkpoint of ``run_id``."""
    plain = len(run_id) <= 100 and "@" not in run_id
    return f"lgrun:{run_id if plain else 'sha256-' + _digest(run_id, 40)}@"


def run_entity(run_id: str, stream_id: str) -> str:
    """The entity id saying stream ``stream_id`` has checkpoints of run ``run_id`` (one
    per thread and run: the index maps an id to one stream)."""
    return run_prefix(run_id) + _digest(stream_id, 32)


def thread_stream_id(thread_id: str) -> str:
    """The stream that holds ``thread_id``'s checkpoints."""
    if len(thread_id) <= _MAX_PLAIN_ID:
        return _PREFIX + thread_id
    return _HASHED_PREFIX + hashlib.sha256(thread_id.encode()).hexdigest()


@dataclass
class StoredCheckpoint:
    ns: str
    id: str
    parent: str | None
    checkpoint: Typed
    metadata: Typed
    run_id: str | None


@dataclass(frozen=True)
class StoredWrite:
    task_id: str
    task_path: str
    idx: int
    channel: str
    value: Typed


@dataclass
class ThreadState:
    """A thread as its events leave it: what the saver reads and ``verify`` folds."""

    thread_id: str | None = None
    head: int = 0
    deleted: bool = False
    checkpoints: dict[tuple[str, str], StoredCheckpoint] = field(default_factory=dict)
    # (ns, channel, version) -> value; versions keyed as text (LangGraph's are str or int).
    blobs: dict[tuple[str, str, str], StoredBlob] = field(default_factory=dict)
    # (ns, checkpoint id) -> (task id, idx) -> write
    writes: dict[tuple[str, str], dict[tuple[str, int], StoredWrite]] = field(default_factory=dict)
    # The saver's memo, not part of the fold: per (ns, channel), the version of the last
    # list value it stored and its items' serialized forms, to see whether the next
    # value only appends to it.
    last_lists: dict[tuple[str, str], tuple[str, list[tuple[str, bytes]]]] = field(
        default_factory=dict
    )
    # Every run id the thread's checkpoints ever named: what it registered in the index.
    runs: set[str] = field(default_factory=set)
    # Each namespace's newest checkpoint id (ids order by time): what get_tuple reads.
    latest: dict[str, str] = field(default_factory=dict)

    def projection(self) -> str:
        summary: JsonDict = {
            "thread_id": self.thread_id,
            "deleted": self.deleted,
            "checkpoints": len(self.checkpoints),
        }
        return json.dumps(summary, sort_keys=True, separators=(",", ":"))


def new_event(event_type: str, payload: JsonDict) -> NewEvent:
    return NewEvent(
        type=event_type,
        schema_version=EVENT_SCHEMA_VERSION,
        payload=json.dumps(payload, separators=(",", ":")),
    )


def _bad(stream_id: str, seq: int, what: str) -> DataLoss:
    return DataLoss(
        f"{stream_id}#{seq}: {what}",
        reason="undecodable_langgraph_event",
        details={"stream_id": stream_id, "seq": seq},
    )


def _str(payload: JsonDict, key: str) -> str:
    value = payload.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{key} is not a string")
    return value


def _opt_str(payload: JsonDict, key: str) -> str | None:
    value = payload.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key} is not a string")
    return value


def _typed(value: JsonValue) -> Typed:
    if (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str)
        and (value[1] is None or isinstance(value[1], str))
    ):
        return (value[0], value[1])
    raise ValueError("not a [type, data] pair")


def _rows(payload: JsonDict, key: str) -> list[list[JsonValue]]:
    value = payload.get(key)
    if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
        raise ValueError(f"{key} is not a list of rows")
    return [row for row in value if isinstance(row, list)]


def apply(state: ThreadState, event_type: str, payload: JsonDict) -> None:
    """Fold one event into ``state`` (in place). ValueError: the payload is malformed."""
    if event_type == STARTED:
        state.thread_id = _str(payload, "thread_id")
    elif event_type == CHECKPOINT:
        _apply_checkpoint(state, payload)
    elif event_type == WRITES:
        _apply_writes(state, payload)
    elif event_type == REMOVED:
        for row in _rows(payload, "checkpoints"):
            ns, cid = row
            if not isinstance(ns, str) or not isinstance(cid, str):
                raise ValueError("removed checkpoint is malformed")
            _remove(state, ns, cid)
    elif event_type == DELETED:
        state.deleted = True
        state.checkpoints.clear()
        state.blobs.clear()
        state.writes.clear()
        state.last_lists.clear()
        state.latest.clear()
    else:
        raise ValueError(f"unknown event type {event_type!r}")


def _apply_checkpoint(state: ThreadState, payload: JsonDict) -> None:
    ns, cid = _str(payload, "ns"), _str(payload, "id")
    for row in _rows(payload, "blobs"):
        channel, version, tag, data, *rest = row
        base = rest[0] if rest else None
        if not isinstance(channel, str) or not isinstance(tag, str):
            raise ValueError("blob row is malformed")
        if data is not None and not isinstance(data, str):
            raise ValueError("blob data is not text")
        depth = 0
        if base is not None:
            below = state.blobs.get((ns, channel, str(base)))
            if below is None:
                raise ValueError(f"blob {channel}@{version} extends a missing version")
            depth = below.depth + 1
        state.blobs[(ns, channel, str(version))] = StoredBlob(
            (tag, data), None if base is None else str(base), depth
        )
    run_id = _opt_str(payload, "run_id")
    state.checkpoints[(ns, cid)] = StoredCheckpoint(
        ns=ns,
        id=cid,
        parent=_opt_str(payload, "parent"),
        checkpoint=_typed(payload.get("checkpoint")),
        metadata=_typed(payload.get("metadata")),
        run_id=run_id,
    )
    if run_id is not None:
        state.runs.add(run_id)
    state.latest[ns] = max(cid, state.latest.get(ns, cid))


def _apply_writes(state: ThreadState, payload: JsonDict) -> None:
    key = (_str(payload, "ns"), _str(payload, "checkpoint_id"))
    task_id, task_path = _str(payload, "task_id"), _str(payload, "task_path")
    upsert = payload.get("upsert") is True
    table = state.writes.setdefault(key, {})
    for row in _rows(payload, "writes"):
        idx, channel, tag, data = row
        if not isinstance(idx, int) or not isinstance(channel, str):
            raise ValueError("write row is malformed")
        write = StoredWrite(task_id, task_path, idx, channel, _typed([tag, data]))
        # LangGraph's rule: special channels (errors, interrupts) replace an earlier
        # write of the task; any other write of a (task, idx) is kept once.
        if upsert or (task_id, idx) not in table:
            table[(task_id, idx)] = write


def _remove(state: ThreadState, ns: str, cid: str) -> None:
    state.checkpoints.pop((ns, cid), None)
    state.writes.pop((ns, cid), None)
    if state.latest.get(ns) == cid:
        left = [other for n, other in state.checkpoints if n == ns]
        if left:
            state.latest[ns] = max(left)
        else:
            del state.latest[ns]


def apply_records(state: ThreadState, records: Iterable[EventRecord]) -> None:
    """Fold stored records into ``state``, moving its head; DataLoss names a bad record."""
    for record in records:
        if record.schema_version != EVENT_SCHEMA_VERSION:
            raise FailedPrecondition(
                f"{record.stream_id}#{record.seq}: event schema version "
                f"{record.schema_version} is not one this version reads",
                reason="unknown_schema_version",
                details={"stream_id": record.stream_id, "seq": record.seq},
            )
        try:
            payload = json.loads(record.payload)
            if not isinstance(payload, dict):
                raise ValueError("payload is not an object")
            apply(state, record.type, payload)
        except (ValueError, TypeError) as error:
            raise _bad(record.stream_id, record.seq, str(error)) from error
        state.head = record.seq


def index_entries(run_ids: Iterable[str], stream_id: str) -> list[IndexEntry]:
    return [IndexEntry(entity_id=run_entity(r, stream_id), entity_kind=RUN_ENTITY) for r in run_ids]


class LangGraphThreadFolding:
    """The stream kind as ``verify`` and ``repair`` fold it (the runtime's
    ``KernelFolder`` takes it beside the kernel's kinds)."""

    kind: Final = THREAD_KIND
    projection_schema_version: Final = PROJECTION_SCHEMA_VERSION

    def fold(self, events: Sequence[EventRecord]) -> str:
        return self.fold_with_index(events)[0]

    def fold_with_index(self, events: Sequence[EventRecord]) -> tuple[str, list[IndexEntry]]:
        state = ThreadState()
        apply_records(state, events)
        stream_id = events[0].stream_id if events else ""
        return state.projection(), index_entries(state.runs, stream_id)

    def same_decoded_state(self, a: str, b: str) -> bool:
        try:
            return bool(json.loads(a) == json.loads(b))
        except json.JSONDecodeError:
            return False
