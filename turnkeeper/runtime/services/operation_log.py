"""An operation as its session stream tells it: what ``operation show REQUEST_ID`` prints
and what a retried request is compared with.

The request id is indexed to the session stream (entity kind ``operation``). A create
is the stream's first event, ``session.created`` carrying the request id; a delete or
revert is told by its ``operation.*`` events, and a request that joined another one
reads as the operation it joined.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

from turnkeeper.errors import NotFound
from turnkeeper.json_types import JsonDict
from turnkeeper.kernel.session.events import SessionCreated
from turnkeeper.kernel.session.operation_model import (
    OperationFinished,
    OperationJoined,
    OperationStarted,
    OperationStepRecorded,
    RecordedOperationKind,
)
from turnkeeper.runtime.log.request_ids import OPERATION_KIND, check_request_id
from turnkeeper.runtime.services.sessions import SESSION_CODEC
from turnkeeper.store.base import EventStore


@dataclass
class OperationRecord:
    """An operation as its session stream tells it (``operation show``)."""

    request_id: str
    session_id: str
    kind: RecordedOperationKind
    root_request_id: str  # the operation this request started or joined
    status: Literal["pending", "finished"] = "pending"
    outcome: str | None = None
    superseded_by: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    steps: list[str] = field(default_factory=list)
    generation: int | None = None
    payload_digest: str | None = None
    # A revert: what it moved aside rather than destroy (runtime/workspaces/workspace_restore.py),
    # as that module's JSON, passed on as it is.
    preserved: JsonDict | None = None

    def as_json(self) -> JsonDict:
        # Every field, in their order (the API's answer keeps it); each is JSON already.
        return asdict(self)


def _not_found(request_id: str) -> NotFound:
    return NotFound(f"operation {request_id!r} not found", reason="operation_not_found")


def read_operation(store: EventStore, request_id: str) -> OperationRecord:
    check_request_id(request_id)
    found = store.lookup(request_id)
    if found is None or found[1] != OPERATION_KIND:
        raise _not_found(request_id)
    stream = found[0]
    sid = stream.removeprefix("session:")
    created = _created(store, stream, sid, request_id)
    if created is not None:
        return created
    record: OperationRecord | None = None
    root = request_id
    for raw in store.read_stream(stream):
        if not raw.type.startswith("operation."):
            continue
        event = SESSION_CODEC.decode_event(raw)
        if isinstance(event, OperationJoined) and event.request_id == request_id:
            root = event.joined
            if record is None:  # joined an operation started before: read that one
                base = read_operation(store, root)
                base.request_id, base.session_id = request_id, sid
                return base
        if isinstance(event, OperationStarted) and event.request_id == root:
            record = OperationRecord(
                request_id=request_id,
                session_id=sid,
                kind=event.kind,
                root_request_id=root,
                started_at=event.at.isoformat(),
                generation=event.generation,
                payload_digest=event.payload_digest,
            )
        elif record is None:
            continue
        elif isinstance(event, OperationStepRecorded) and event.request_id == root:
            record.steps.append(event.step)
        elif isinstance(event, OperationFinished) and event.request_id == root:
            record.status, record.outcome = "finished", event.outcome
            record.superseded_by = event.superseded_by
            record.finished_at = event.at.isoformat()
    if record is None:
        raise _not_found(request_id)
    return record


def _created(store: EventStore, stream: str, sid: str, request_id: str) -> OperationRecord | None:
    """The create ``request_id`` made, when it named this session's first event."""
    first = store.read_stream(stream, limit=1)
    if not first or first[0].type != "session.created":
        return None
    event = SESSION_CODEC.decode_event(first[0])
    if not isinstance(event, SessionCreated) or event.request_id != request_id:
        return None
    at = event.at.isoformat()
    return OperationRecord(
        request_id=request_id,
        session_id=sid,
        kind="create",
        root_request_id=request_id,
        status="finished",  # a create completes in the append that starts the stream
        outcome="created",
        started_at=at,
        finished_at=at,
        generation=event.generation,
        payload_digest=event.payload_digest,
    )
