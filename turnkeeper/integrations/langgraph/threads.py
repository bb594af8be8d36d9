"""The saver's threads: a cache of their folded streams, and the fence on their writes.

A :class:`ThreadLog` remembers, per thread, the head of the stream it last saw, and
appends with that head as ``expected_seq``: when another process wrote the thread
since (a second graph run on the same thread), the store refuses the append and the
write fails with ``ABORTED`` (``thread_write_conflict``) rather than add a checkpoint
onto a parent the thread has moved past, so a thread never forks behind a writer's
back. A read brings the log up to date, so the next run on the thread (which starts
by reading it) writes again.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict

from turnkeeper.errors import Aborted, StreamConflict
from turnkeeper.integrations.langgraph.log import (
    PROJECTION_SCHEMA_VERSION,
    RUN_ENTITY,
    STARTED,
    THREAD_KIND,
    ThreadState,
    apply,
    apply_records,
    index_entries,
    new_event,
    run_prefix,
    thread_stream_id,
)
from turnkeeper.json_types import JsonDict
from turnkeeper.store.base import EventStore
from turnkeeper.store.records import NewEvent

# Threads whose decoded state a saver keeps; an evicted one is read again when used
# (its last seen head is kept, so the fence holds across an eviction).
DEFAULT_CACHED_THREADS = 64


class ThreadLog:
    """The threads of one store as one saver sees them. Callers hold :attr:`lock`
    around each operation: LangGraph writes a step's tasks from several threads at
    once, and each append must start from the head the one before left."""

    def __init__(self, store: EventStore, cached_threads: int = DEFAULT_CACHED_THREADS) -> None:
        self.store = store
        self.lock = threading.RLock()
        self._capacity = max(1, cached_threads)
        # Owned by this saver, bounded by ``cached_threads``; a thread's state is true
        # as of its head, and every read first folds in what was appended since.
        self._threads: OrderedDict[str, ThreadState] = OrderedDict()
        # The head each thread had when this saver last read or wrote it: the fence.
        # An int per thread this saver touched, kept when the state is evicted.
        self._seen: dict[str, int] = {}

    def read(self, thread_id: str) -> ThreadState:
        """The thread as the store has it now (reading only what is new since the cache)."""
        state = self._threads.get(thread_id) or ThreadState()
        apply_records(state, self.store.read_stream(thread_stream_id(thread_id), state.head))
        self._remember(thread_id, state)
        self._seen[thread_id] = state.head
        return state

    def for_write(self, thread_id: str) -> ThreadState:
        """The thread as this saver last saw it: a write appends after that head."""
        state = self._threads.get(thread_id)
        if state is not None:
            self._threads.move_to_end(thread_id)
            return state
        seen = self._seen.get(thread_id)
        state = ThreadState()
        apply_records(state, self.store.read_stream(thread_stream_id(thread_id)))
        if seen is not None and state.head != seen:
            raise _conflict(thread_id, seen)
        self._remember(thread_id, state)
        self._seen[thread_id] = state.head
        return state

    def _remember(self, thread_id: str, state: ThreadState) -> None:
        self._threads[thread_id] = state
        self._threads.move_to_end(thread_id)
        while len(self._threads) > self._capacity:
            self._threads.popitem(last=False)

    def append(self, thread_id: str, state: ThreadState, events: list[NewEvent]) -> None:
        """Append ``events`` after the head this saver saw; fold them into the cache."""
        if state.deleted:
            raise Aborted(
                f"thread {thread_id!r} was deleted; a deleted thread takes no more writes",
                reason="thread_deleted",
                details={"thread_id": thread_id},
            )
        if state.head == 0:
            events = [new_event(STARTED, {"thread_id": thread_id}), *events]
        expected, stream_id = state.head, thread_stream_id(thread_id)
        try:
            runs_before = set(state.runs)
            for event in events:
                apply(state, event.type, _payload(event))
            state.head = expected + len(events)
            self.store.append(
                stream_id,
                THREAD_KIND,
                expected,
                events,
                state.projection(),
                PROJECTION_SCHEMA_VERSION,
                index_entries(state.runs - runs_before, stream_id),
            )
        except BaseException as error:
            # The cached state already holds the refused events: drop it (the fence,
            # ``_seen``, keeps the head this saver saw, so a retry is refused too).
            self._threads.pop(thread_id, None)
            if isinstance(error, StreamConflict):
                raise _conflict(thread_id, expected) from error
            raise
        self._seen[thread_id] = state.head

    def threads_of_run(self, run_id: str) -> list[str]:
        """The threads with a checkpoint of ``run_id`` (or that had one), by the index."""
        found: list[str] = []
        for entity_id in self.store.lookup_prefix(run_prefix(run_id), RUN_ENTITY):
            owner = self.store.lookup(entity_id)
            projection = self.store.read_projection(owner[0]) if owner else None
            summary = json.loads(projection.state) if projection else None
            if isinstance(summary, dict) and isinstance(summary.get("thread_id"), str):
                found.append(str(summary["thread_id"]))
        return found

    def summaries(self) -> list[JsonDict]:
        """Every thread's projection: its id, whether deleted, its checkpoints."""
        summaries: list[JsonDict] = []
        for projection in self.store.list_projections(THREAD_KIND):
            summary = json.loads(projection.state)
            if isinstance(summary, dict):
                summaries.append(summary)
        return summaries

    def live_thread_ids(self) -> list[str]:
        ids: list[str] = []
        for summary in self.summaries():
            thread_id = summary.get("thread_id")
            if not summary.get("deleted") and isinstance(thread_id, str):
                ids.append(thread_id)
        return ids


def _conflict(thread_id: str, seen: int) -> Aborted:
    return Aborted(
        f"thread {thread_id!r} was written by another writer since this saver last "
        "read it; the write is refused so the thread does not fork (read the thread "
        "again, e.g. run the graph again, to continue from its latest checkpoint)",
        reason="thread_write_conflict",
        details={"thread_id": thread_id, "seen_seq": seen},
    )


def _payload(event: NewEvent) -> JsonDict:
    data = json.loads(event.payload)
    if not isinstance(data, dict):
        raise TypeError("an event's payload is a JSON object")  # new_event writes only those
    return data
