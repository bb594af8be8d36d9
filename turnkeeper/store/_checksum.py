"""Record checksums: blake2b-128 over an unambiguous encoding of every stored field.

Every table that answers a question is guarded: events, projections (their state,
and apart from it their creation time) and the entity index.

Strings are length-prefixed so that moving a byte from one field into the next
changes the digest; the last field (payload / state) needs no prefix. Reads
encode with ``surrogateescape`` so that text the database hands back with
invalid UTF-8 (a flipped byte) round-trips to its raw bytes and fails the
comparison instead of raising a decode error somewhere less helpful.
"""

from __future__ import annotations

from hashlib import blake2b

_DIGEST_SIZE = 16
# Every checksum starts from a copy of this empty hash: ``blake2b(digest_size=16)``
# parses its dozen keyword parameters and sets up the parameter block on every call,
# ~a fifth of checksumming an event; a copy of the state it makes is the same hash.
# Never updated itself, so threads copy it freely.
_EMPTY = blake2b(digest_size=_DIGEST_SIZE)


def _digest(head: str, last: str, strict: bool) -> str:
    """The checksum of ``head`` then ``last``, each encoded as UTF-8: ``strict`` (the
    write path) rejects unencodable text, otherwise it round-trips (surrogateescape)."""
    h = _EMPTY.copy()
    if strict:
        h.update(head.encode())
        h.update(last.encode())
    else:
        h.update(head.encode("utf-8", "surrogateescape"))
        h.update(last.encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def event_checksum(
    stream_id: str,
    seq: int,
    type_: str,
    schema_version: int,
    recorded_at: int,
    payload: str,
    *,
    strict: bool = False,
) -> str:
    """Checksum of one event. ``strict`` (the write path) rejects unencodable text."""
    head = (
        f"ev1\x00{len(stream_id)}:{stream_id}\x00{seq}\x00{len(type_)}:{type_}\x00"
        f"{schema_version}\x00{recorded_at}\x00"
    )
    return _digest(head, payload, strict)


def projection_checksum(
    stream_id: str,
    kind: str,
    head_seq: int,
    schema_version: int,
    state: str,
    *,
    strict: bool = False,
) -> str:
    """Checksum of one projection row."""
    head = (
        f"pr1\x00{len(stream_id)}:{stream_id}\x00{len(kind)}:{kind}\x00{head_seq}\x00"
        f"{schema_version}\x00"
    )
    return _digest(head, state, strict)


def index_checksum(
    entity_id: str, stream_id: str, entity_kind: str, *, strict: bool = False
) -> str:
    """Checksum of one entity index row: which stream owns an id, and as what."""
    head = f"ix1\x00{len(entity_id)}:{entity_id}\x00{len(stream_id)}:{stream_id}\x00"
    return _digest(head, entity_kind, strict)


def created_checksum(stream_id: str, created_at: int, *, strict: bool = False) -> str:
    """Checksum of a projection row's creation time (the listing order). The time is
    fixed at the stream's first append, so it is guarded apart from the row's state,
    which every append rewrites."""
    return _digest(f"cr1\x00{len(stream_id)}:{stream_id}\x00", str(created_at), strict)
