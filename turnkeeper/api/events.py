"""``GET /v1/sessions/{id}/events``: a session's host events and turn phases as
Server-Sent Events — what ``logs -f`` shows, over HTTP.

Each record of the session stream after the starting position becomes events:

* ``event: phase`` for a step of a turn's transaction (accepted, host_started,
  receipt, written_back, completed, failed, lost, abandoned), ``id: N`` where N is
  the record's sequence in the session stream;
* ``event: host`` for each host event of a journaled batch, ``id: N-K``: the
  record's sequence and the event's position (1, 2, ...) within it.

A client resumes with ``Last-Event-ID`` (what EventSource sends on reconnecting)
or ``?after_seq=N``: ``N`` resumes after record N, ``N-K`` after the K-th event of
record N. Other records only advance the position. The stream follows the session
until the client goes away (``follow=false``: until it has caught up), reading the
store at most every quarter second in bounded batches; a slow client slows the
reads, nothing queues. A comment line every 15 s keeps idle connections open.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Final

import anyio
from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import StreamingResponse

from turnkeeper.api.access import access
from turnkeeper.api.deps import SessionPath, store_of
from turnkeeper.api.routes_sessions import resolve_session
from turnkeeper.errors import InvalidArgument
from turnkeeper.json_types import JsonDict
from turnkeeper.kernel.session import events as ev
from turnkeeper.runtime.services.sessions import SESSION_CODEC, session_stream
from turnkeeper.runtime.services.turn_listing import PHASE_OF, event_time
from turnkeeper.store.base import EventStore
from turnkeeper.store.records import EventRecord

router = APIRouter(prefix="/v1", tags=["sessions"])

POLL_SECONDS: Final = 0.25
KEEPALIVE_SECONDS: Final = 15.0
BATCH: Final = 200  # records per read
_POSITION = re.compile(r"^(\d{1,18})(?:-(\d{1,9}))?$")


@dataclass(frozen=True)
class Position:
    seq: int  # the last record fully delivered, or the one being delivered
    done_in_seq: int = 0  # host events of record ``seq`` already delivered (0: none)

    @classmethod
    def parse(cls, text: str) -> Position:
        match = _POSITION.match(text.strip())
        if match is None:
            raise InvalidArgument(
                "an event id is N or N-K (digits)",
                reason="bad_event_id",
                details={"field": "Last-Event-ID"},
            )
        seq, within = int(match.group(1)), int(match.group(2) or 0)
        # "N-K": record N is only partly delivered, so the read starts at N again.
        return cls(seq - 1, within) if within else cls(seq)


def _frame(event: str, event_id: str, data: JsonDict) -> str:
    return f"event: {event}\nid: {event_id}\ndata: {json.dumps(data, sort_keys=True)}\n\n"


def _frames(record: EventRecord, skip: int) -> list[str]:
    phase = PHASE_OF.get(record.type)
    if phase is None and record.type != "turn.host_events":
        return []
    event = SESSION_CODEC.decode_event(record)
    if isinstance(event, ev.HostEventsJournaled):
        return [
            _frame(
                "host",
                f"{record.seq}-{k}",
                {
                    "stream_seq": record.seq,
                    "at": event_time(e, event.at).isoformat(),
                    "turn_id": event.turn_id,
                    "seq": e.seq,
                    "kind": e.kind,
                    "data": dict(e.data),
                },
            )
            for k, e in enumerate(event.events, start=1)
            if k > skip
        ]
    data: JsonDict = {
        "stream_seq": record.seq,
        "turn_id": getattr(event, "turn_id", None),
        "phase": phase,
        "at": event.at.isoformat(),
    }
    if isinstance(event, ev.TurnAccepted):
        env = event.envelope
        data |= {"turn_id": env.turn_id, "kind": env.kind, "attempt": env.attempt}
        data["todo_id"] = env.todo_id
    elif isinstance(event, ev.TurnFailed):
        data |= {"error_kind": event.error_kind, "message": event.message}
    elif isinstance(event, ev.TurnAbandoned):
        data["reason"] = event.reason
    return [_frame("phase", str(record.seq), data)]


def read_frames(store: EventStore, sid: str, at: Position) -> tuple[list[str], Position, bool]:
    """The frames of up to ``BATCH`` records after ``at``, where they leave off, and
    whether the read was a full batch (more may be waiting)."""
    records = store.read_stream(session_stream(sid), after_seq=at.seq, limit=BATCH)
    frames: list[str] = []
    skip = at.done_in_seq
    for record in records:
        frames.extend(_frames(record, skip if record.seq == at.seq + 1 else 0))
    end = Position(records[-1].seq) if records else at
    return frames, end, len(records) == BATCH


async def _follow(
    request: Request, store: EventStore, sid: str, start: Position, follow: bool
) -> AsyncIterator[str]:
    at = start
    quiet = 0.0
    while True:
        if await request.is_disconnected():
            return
        frames, at, more = await anyio.to_thread.run_sync(read_frames, store, sid, at)
        if frames:
            quiet = 0.0
            yield "".join(frames)
        if more:
            continue
        if not follow:
            return
        await anyio.sleep(POLL_SECONDS)
        quiet += POLL_SECONDS
        if quiet >= KEEPALIVE_SECONDS:
            quiet = 0.0
            yield ": keepalive\n\n"


@router.get(
    "/sessions/{session_id}/events",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}}},
)
@access("read", "session")
def session_events(
    request: Request,
    session_id: SessionPath,
    store: Annotated[EventStore, Depends(store_of)],
    after_seq: Annotated[
        str | None,
        Query(max_length=40, description="Resume after this event id (N or N-K)."),
    ] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=40)] = None,
    follow: Annotated[
        bool, Query(description="Keep following (false: stop once caught up).")
    ] = True,
) -> StreamingResponse:
    """The session's host events and turn phases as Server-Sent Events."""
    sid = resolve_session(store, session_id)
    given = last_event_id if last_event_id is not None else after_seq
    start = Position.parse(given) if given is not None else Position(0)
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(
        _follow(request, store, sid, start, follow),
        media_type="text/event-stream",
        headers=headers,
    )
