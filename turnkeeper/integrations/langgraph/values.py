"""Channel values as the saver stores them: serialized once per version, and a list
that only grew stored as the items it gained (log.py, ``blobs``)."""

from __future__ import annotations

import base64

from langgraph.checkpoint.serde.base import SerializerProtocol

from turnkeeper.errors import DataLoss
from turnkeeper.integrations.langgraph.log import ThreadState, Typed
from turnkeeper.json_types import JsonValue

# A list channel stored as appended items is stored whole again after this many
# versions, so rebuilding a version decodes at most this many of them.
WHOLE_EVERY = 256

BlobKey = tuple[str, str, str]  # (ns, channel, version)
# Channel values rebuilt in one call, by their key.
Values = dict[BlobKey, object]


def dump(serde: SerializerProtocol, value: object) -> Typed:
    tag, data = serde.dumps_typed(value)
    return (tag, base64.b64encode(data).decode("ascii"))


def load(serde: SerializerProtocol, typed: Typed) -> object:
    tag, data = typed
    return serde.loads_typed((tag, base64.b64decode(data or "")))


def rebuild(serde: SerializerProtocol, state: ThreadState, key: BlobKey, tails: Values) -> object:
    """A channel's value at a version: a whole value, or a list rebuilt from the whole
    value below it and the items each version since appended. ``tails`` holds the
    appended items already decoded in this call (listing a thread's history decodes
    each once); every call returns values of its own."""
    ns, channel, _ = key
    chain: list[BlobKey] = [key]
    while (base := state.blobs[chain[-1]].base) is not None:
        chain.append((ns, channel, base))
    whole = load(serde, state.blobs[chain[-1]].value)
    if len(chain) == 1:
        return whole
    if not isinstance(whole, list):
        raise _not_a_list(state, channel, chain[-2][2])
    value = list(whole)
    for link in reversed(chain[:-1]):
        if link not in tails:
            tails[link] = load(serde, state.blobs[link].value)
        tail = tails[link]
        if not isinstance(tail, list):
            raise _not_a_list(state, channel, link[2])
        value.extend(tail)
    return value


def _not_a_list(state: ThreadState, channel: str, version: str) -> DataLoss:
    return DataLoss(
        f"channel {channel!r} at version {version} appends to a value that is not a list",
        reason="undecodable_langgraph_value",
        details={"thread_id": state.thread_id, "channel": channel},
    )


def item_forms(serde: SerializerProtocol, value: list[object]) -> list[tuple[str, bytes]]:
    """Each item of a list as the serializer writes it: what a later list's leading
    items are compared with. Forms, not the items themselves: a node that changes an
    item in place changes the live object a kept reference would point at, so only
    the form it was stored in can tell that it changed."""
    return [serde.dumps_typed(item) for item in value]


def appended(
    state: ThreadState, ns: str, channel: str, forms: list[tuple[str, bytes]]
) -> tuple[str | None, int]:
    """(base version, how many leading items it already holds) when a list whose items
    serialize to ``forms`` only extends the last list the saver stored for the channel
    (the same forms first, then more); else (None, 0): store the value whole."""
    last = state.last_lists.get((ns, channel))
    if last is None:
        return None, 0
    version, before = last
    blob = state.blobs.get((ns, channel, version))
    if blob is None or blob.depth + 1 >= WHOLE_EVERY:
        return None, 0
    if len(forms) <= len(before) or forms[: len(before)] != before:
        return None, 0
    return version, len(before)


def blob_rows(state: ThreadState, key: BlobKey, emitted: set[BlobKey]) -> list[JsonValue]:
    """The rows that store ``key``'s value in another thread: the versions it appends
    to first, each once (``emitted``: stored there already)."""
    ns, channel, _ = key
    chain: list[BlobKey] = []
    at: BlobKey | None = key
    while at is not None and at not in emitted and at in state.blobs:
        chain.append(at)
        base = state.blobs[at].base
        at = None if base is None else (ns, channel, base)
    rows: list[JsonValue] = []
    for link in reversed(chain):
        emitted.add(link)
        blob = state.blobs[link]
        rows.append([channel, link[2], blob.value[0], blob.value[1], blob.base])
    return rows
