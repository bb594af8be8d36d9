"""Client request ids of durable operations (create, delete, revert).

A request id names one request wherever it is retried: it is indexed (entity kind
``operation``) to the session stream whose operation it started or joined. A create
has no session yet to look in, so its session id is derived from the request id
(uuid5 over a fixed namespace): a retried create lands on the same stream, where
the append at expected sequence 0 decides which request made the session.
"""

from __future__ import annotations

import uuid

from turnkeeper.errors import AlreadyExists, InvalidArgument
from turnkeeper.store.base import EventStore

OPERATION_KIND = "operation"
# Fixed forever: changing it would give a retried create another session id.
_CREATE_NAMESPACE = uuid.UUID("5d0c2f4e-8a1b-5c3d-9e7f-7475726e6b65")


def check_request_id(request_id: str) -> None:
    if not request_id or len(request_id) > 200 or not request_id.isprintable():
        raise InvalidArgument("a request id is 1-200 printable characters", reason="bad_id")


def session_id_for_request(request_id: str) -> str:
    """The session a create under ``request_id`` makes (the same for every retry)."""
    check_request_id(request_id)
    return str(uuid.uuid5(_CREATE_NAMESPACE, request_id))


def check_request_free_or_for(store: EventStore, request_id: str, stream_id: str) -> None:
    """``request_id`` is new, or already names an operation of ``stream_id``; else it was
    used for another request (another session, or as another kind of id)."""
    found = store.lookup(request_id)
    if found is not None and found != (stream_id, OPERATION_KIND):
        raise AlreadyExists(
            f"request id {request_id!r} was used for another request",
            reason="request_id_reused",
        )
