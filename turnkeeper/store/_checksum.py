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


def _encode(text: str, strict: bool) -> bytes:
    return text.encode("utf-8") if strict else text.encode("utf-8", "surrogateescape")


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
    head = f"ev1\x00{len(stream_id)}:{stream_id}\x00{seq}\x00{len(type_)}:{type_}\x00"
    head += f"{schema_version}\x00{recorded_at}\x00"
    h = blake2b(_encode(head, strict), digest_size=_DIGEST_SIZE)
    h.update(_encode(payload, strict))
    return h.hexdigest()


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
    head = f"pr1\x00{len(stream_id)}:{stream_id}\x00{len(kind)}:{kind}\x00{head_seq}\x00"
    head += f"{schema_version}\x00"
    h = blake2b(_encode(head, strict), digest_size=_DIGEST_SIZE)
    h.update(_encode(state, strict))
    return h.hexdigest()


def index_checksum(
    entity_id: str, stream_id: str, entity_kind: str, *, strict: bool = False
) -> str:
    """Checksum of one entity index row: which stream owns an id, and as what."""
    head = f"ix1\x00{len(entity_id)}:{entity_id}\x00{len(stream_id)}:{stream_id}\x00"
    h = blake2b(_encode(head, strict), digest_size=_DIGEST_SIZE)
    h.update(_encode(entity_kind, strict))
    return h.hexdigest()


def created_checksum(stream_id: str, created_at: int, *, strict: bool = False) -> str:
    """Checksum of a projection row's creation time (the listing order). The time is
    fixed at the stream's first append, so it is guarded apart from the row's state,
    which every append rewrites."""
    text = f"cr1\x00{len(stream_id)}:{stream_id}\x00{created_at}"
    return blake2b(_encode(text, strict), digest_size=_DIGEST_SIZE).hexdigest()
