"""Code that runs in other OS processes (spawned by multiprocessing or subprocess)."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from turnkeeper.errors import StreamConflict
from turnkeeper.store import IndexEntry, StreamAppend, open_store


def race(path: str, stream_id: str, rounds: int, name: str, barrier: Any, out: Any) -> None:
    """Each round: read the head, wait for the rival, append at that head."""
    from tests.store.toy import KIND, events_of, state_of

    store = open_store(path)
    try:
        for r in range(rounds):
            barrier.wait()
            head = store.head(stream_id)
            barrier.wait()  # both hold the same head now
            try:
                store.append(stream_id, KIND, head, events_of([r]), state_of([r]), 1)
                out.put((r, name, "won", head))
            except StreamConflict:
                out.put((r, name, "lost", head))
            barrier.wait()
    finally:
        store.close()


def open_at_once(url: str, name: str, barrier: Any) -> None:
    """Wait for the rivals, then open the store (migrating a fresh database) and append."""
    from tests.store.toy import KIND, events_of, state_of

    barrier.wait()
    with open_store(url) as store:
        store.append(name, KIND, 0, events_of([1]), state_of([1]), 1)


def write_then_die(path: str, streams: int, per_stream: int, durable: bool = True) -> None:
    """Append, print each acknowledged head, then die without closing.

    Durable appends exit; non-durable ones are SIGKILLed: a commit that did not
    wait for the disk must still survive the death of its process.
    """
    from tests.store.toy import KIND, events_of, state_of

    store = open_store(path)
    for i in range(streams):
        for v in range(per_stream):
            stream = f"s{i}"
            head = store.head(stream)
            state = state_of(range(v + 1))
            head = store.append(stream, KIND, head, events_of([v]), state, 1, durable=durable)
            print(f"ack s{i} {head}", flush=True)
    if durable:
        os._exit(0)
    os.kill(os.getpid(), signal.SIGKILL)


def write_many_then_die(path: str, groups: int, durable: bool = True) -> None:
    """``append_many`` over the streams ``ga`` and ``gb``, print each acknowledged group's
    heads, then SIGKILL this process mid-flight (no close, no exit handlers)."""
    from tests.store.toy import KIND, events_of, state_of

    store = open_store(path)
    for g in range(groups):
        state = state_of(range(g + 1))
        heads = store.append_many(
            [
                StreamAppend(
                    stream_id=stream,
                    kind=KIND,
                    expected_seq=g,
                    events=tuple(events_of([g])),
                    projection_state=state,
                    projection_schema_version=1,
                    index=(IndexEntry(entity_id=f"{stream}-{g}", entity_kind="todo"),),
                )
                for stream in ("ga", "gb")
            ],
            durable=durable,
        )
        print(f"ack {g} {heads[0]} {heads[1]}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    if sys.argv[1] == "many":
        write_many_then_die(sys.argv[2], int(sys.argv[3]), sys.argv[4:] != ["lazy"])
    else:
        write_then_die(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:] != ["lazy"])
