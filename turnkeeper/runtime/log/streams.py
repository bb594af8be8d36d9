"""Decide-then-append against one stream, for any stream kind.

The append is optimistic: decide on the state at head ``n`` and append with
``expected_seq = n``. When another writer (a thread, a process, a machine) got
there first the store raises :class:`StreamConflict` and writes nothing; we read
again and decide again, so the kernel's rules — a live lease, a stale epoch —
are always judged on the state the append lands on.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from pydantic import BaseModel

from turnkeeper.errors import Aborted, StreamConflict, TurnkeeperError, Unavailable
from turnkeeper.runtime.log.codec import EventT, StateT, StreamCodec
from turnkeeper.store.base import EventStore
from turnkeeper.store.records import HeadCheck, IndexEntry, StreamAppend

MAX_CONFLICT_RETRIES = 16
_T = TypeVar("_T")


class OutagePolicy:
    """How long a write waits out the database being away before ``UNAVAILABLE``
    reaches its caller (0: not at all, the default: a command in a shell fails fast).

    A worker (runtime/control/worker.py) rides out a restart of the database this way, so the
    turns in flight survive it: their hosts keep running while a journal write waits.
    Only a failure that wrote nothing is retried — one whose ``COMMIT`` answer was lost
    (``commit_outcome: unknown``) is raised at once, for the recovery table to settle.
    """

    # Writes waiting at once tell of it once per this many seconds, not each of them.
    NOTICE_EVERY_SECONDS = 5.0

    def __init__(self) -> None:
        self.budget_seconds = 0.0
        # Told when a write starts waiting (the worker reports it); rate-limited.
        self.notice: Callable[[Unavailable], None] | None = None
        self._noticed_at = -float("inf")
        self._lock = threading.Lock()

    def retryable(self, error: Unavailable, started: float) -> float | None:
        """Seconds to wait before trying again, or None: raise ``error`` now."""
        if error.details.get("commit_outcome") == "unknown":
            return None
        now = time.monotonic()
        left = self.budget_seconds - (now - started)
        if left <= 0:
            return None
        with self._lock:
            tell = self.notice is not None and now - self._noticed_at >= self.NOTICE_EVERY_SECONDS
            if tell:
                self._noticed_at = now
        if tell and self.notice is not None:
            self.notice(error)
        return min(0.5, left)


OUTAGES = OutagePolicy()


def _riding_out(attempt: Callable[[], _T]) -> _T:
    """``attempt()``, again after a pause while the database is away (OUTAGES)."""
    started = time.monotonic()
    while True:
        try:
            return attempt()
        except Unavailable as error:
            pause = OUTAGES.retryable(error, started)
            if pause is None:
                raise
            time.sleep(pause)


@dataclass(frozen=True)
class Appended(Generic[StateT, EventT]):
    events: list[EventT]
    state: StateT | None
    head_seq: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Where a stream's projection row stands: the seq its state is folded to, and how
    long that state's text was. What a write needs to choose whether to rewrite the
    projection (:func:`projection_for`)."""

    seq: int
    chars: int


# A stream with no projection row yet: its first append writes one.
_NO_SNAPSHOT = Snapshot(0, 0)


@dataclass(frozen=True, slots=True)
class _Entry:
    head: int
    state: object
    snapshot: Snapshot


class _StateCache:
    """Decoded stream states, each with the head seq it holds and where the stream's
    projection row stood then, most recent last.

    A stream is append-only, so ``(stream, head)`` names one state forever: a cached
    state is served only after the store confirmed, by one cheap query, that the
    stream's head is still the one cached — another thread, process or machine that
    appended since is seen, and the stream read again. States are frozen models, so
    threads may share them. This spares the turn path decoding the same session and
    goal projections a dozen times a turn. The projection row's place (a
    :class:`Snapshot`) is true of the cached head: a writer that appended since moved
    the head, and the next load reads both again.

    A stream that does not exist is cached too, as :data:`_ABSENT` at head 0: a
    missing projection costs a guarded read of three queries (the store proves the
    stream has no events either), and a stream looked up every turn that nobody has
    written yet (the project's extension settings) would pay them every turn. Its
    first event moves the head off 0, so the next load reads it.
    """

    def __init__(self, capacity: int = 2048) -> None:
        self._capacity = capacity
        # Every kind's states in one table: a reader checks a state is its codec's
        # state type (``_cached``), so the cache itself need not know any.
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, kind: str, stream_id: str) -> _Entry | None:
        with self._lock:
            return self._entries.get((kind, stream_id))

    def put(self, kind: str, stream_id: str, head: int, state: object, snapshot: Snapshot) -> None:
        with self._lock:
            key = (kind, stream_id)
            known = self._entries.get(key)
            if known is not None and known.head > head:
                return  # a slower thread must not replace a newer state with an older one
            self._entries[key] = _Entry(head, state, snapshot)
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)


# What the cache holds for a stream that had no events when it was read (head 0).
_ABSENT = object()

_caches: weakref.WeakKeyDictionary[EventStore, _StateCache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


class _LastAsked:
    """The last store asked for and its cache: a process drives its turns on one store,
    and a turn asks ~15 times, each a lock and a weak-dictionary lookup otherwise. Held
    weakly, as the table holds it, so a closed store's cache still goes with it."""

    entry: tuple[weakref.ref[EventStore], _StateCache] | None = None


_LAST_ASKED = _LastAsked()


def _cache_of(store: EventStore) -> _StateCache:
    last = _LAST_ASKED.entry  # read once: another thread may replace it meanwhile
    if last is not None and last[0]() is store:
        return last[1]
    with _caches_lock:
        cache = _caches.get(store)
        if cache is None:
            cache = _caches[store] = _StateCache()
        _LAST_ASKED.entry = (weakref.ref(store), cache)
        return cache


def _cached_entry(
    store: EventStore, codec: StreamCodec[StateT, EventT], stream_id: str
) -> tuple[StateT | None, int, Snapshot] | None:
    """The stream's cached state (None: it had no events), the head it holds and its
    projection row's place then, if any. The cache keeps every kind's states under
    their kind, so one found under ``codec.kind`` is always a ``codec.state_type``:
    the check only says so to the type checker."""
    cached = _cache_of(store).get(codec.kind, stream_id)
    if cached is None:
        return None
    if cached.state is _ABSENT:
        return None, cached.head, cached.snapshot
    if isinstance(cached.state, codec.state_type):
        return cached.state, cached.head, cached.snapshot
    return None


def _cached(
    store: EventStore, codec: StreamCodec[StateT, EventT], stream_id: str
) -> tuple[StateT | None, int] | None:
    """The stream's cached state (None: it had no events) and the head it holds, if any."""
    cached = _cached_entry(store, codec, stream_id)
    return None if cached is None else (cached[0], cached[1])


class _HeadsLooked(threading.local):
    """Per thread: the heads :func:`heads_read_together` read, and of which store."""

    store: EventStore | None = None
    heads: dict[str, int] | None = None


_LOOKED = _HeadsLooked()


@contextmanager
def heads_read_together(store: EventStore, stream_ids: Sequence[str]) -> Iterator[None]:
    """Within the block, this thread's :func:`load_stream` of one of ``stream_ids``
    confirms its cached state against the heads read here, by one query, not by a
    query of its own: a controller's step reads its session, goal and settings as of
    one moment, at the cost of one read. A head that moved since (a write in the
    block, another writer's) is seen at the next step, as a head read a moment
    earlier would be; a write is never decided on it alone (it appends at the head it
    decided on, or conflicts). A cached state at another head is read again."""
    heads = dict(zip(stream_ids, store.heads(stream_ids), strict=True))
    outer = (_LOOKED.store, _LOOKED.heads)
    _LOOKED.store, _LOOKED.heads = store, heads
    try:
        yield
    finally:
        _LOOKED.store, _LOOKED.heads = outer


def _head(store: EventStore, stream_id: str) -> int:
    """The stream's head: as read together for this block (heads_read_together), or now."""
    looked = _LOOKED.heads
    if looked is not None and _LOOKED.store is store:
        head = looked.get(stream_id)
        if head is not None:
            return head
    return store.head(stream_id)


def load_stream(
    store: EventStore, codec: StreamCodec[StateT, EventT], stream_id: str
) -> tuple[StateT | None, int]:
    """The stream's state and head: its projection plus any tail not yet folded in."""
    state, head, _ = _loaded(store, codec, stream_id)
    return state, head


def _loaded(
    store: EventStore, codec: StreamCodec[StateT, EventT], stream_id: str
) -> tuple[StateT | None, int, Snapshot]:
    """:func:`load_stream`, with where the stream's projection row stands."""
    cached = _cached_entry(store, codec, stream_id)
    if cached is not None and _head(store, stream_id) == cached[1]:
        return cached
    state, head, snapshot = _read_stream_state(store, codec, stream_id)
    _cache_of(store).put(codec.kind, stream_id, head, _ABSENT if state is None else state, snapshot)
    return state, head, snapshot


def peek_stream(
    store: EventStore, codec: StreamCodec[StateT, EventT], stream_id: str
) -> tuple[StateT | None, int]:
    """The stream's state and head as this process last saw them, without asking the
    store whether another writer appended since (:func:`load_stream` when it has not
    seen the stream). Only for a reader whose answer no other writer can change: a
    turn's lease holder reading what only its own writes move (its session's
    workspace, host, counters and turn in flight), or a head used as a lower bound."""
    cached = _cached(store, codec, stream_id)
    return cached if cached is not None else load_stream(store, codec, stream_id)


def _state_for_write(
    store: EventStore, codec: StreamCodec[StateT, EventT], stream_id: str, optimistic: bool
) -> tuple[StateT | None, int, bool, Snapshot]:
    """The state to decide a write on, its head, whether the head was confirmed, and
    where the stream's projection row stands (what the write's snapshot policy needs:
    a cache entry carries it; without one the stream is loaded, which reads it).

    A write need not confirm the cached head first: it appends with ``expected_seq``
    = that head, so a stale cache ends in :class:`StreamConflict` and nothing written.
    What the append cannot catch — a decision that wrote nothing or was rejected —
    is confirmed by :func:`_unconfirmed_and_moved` before it is returned.
    """
    if optimistic:
        cached = _cached_entry(store, codec, stream_id)
        if cached is not None:
            return cached[0], cached[1], False, cached[2]
    state, head, snapshot = _loaded(store, codec, stream_id)
    return state, head, True, snapshot


def _unconfirmed_and_moved(store: EventStore, stream_id: str, head: int, confirmed: bool) -> bool:
    return not confirmed and store.head(stream_id) != head


def _any_moved(store: EventStore, checks: Sequence[HeadCheck]) -> bool:
    heads = store.heads([c.stream_id for c in checks])
    return any(head != c.head_seq for c, head in zip(checks, heads, strict=True))


def _read_stream_state(
    store: EventStore, codec: StreamCodec[StateT, EventT], stream_id: str
) -> tuple[StateT | None, int, Snapshot]:
    projection = store.read_projection(stream_id)
    if projection is None:
        return None, 0, _NO_SNAPSHOT
    state: StateT | None = codec.decode_state(stream_id, projection.state)
    # The projection may be folded to an earlier seq than the stream's head (a large
    # state is snapshotted every so many appends: projection_for); fold the tail in.
    tail = store.read_stream(stream_id, after_seq=projection.head_seq)
    for record in tail:
        state = codec.evolve_event(state, codec.decode_event(record))
    return (
        state,
        projection.head_seq + len(tail),
        Snapshot(projection.head_seq, len(projection.state)),
    )


# A state whose text was shorter than this is written with every append: small
# projections never lag, so a listing of many small goals folds no tails.
SNAPSHOT_ALWAYS_BELOW_CHARS = 64 * 1024


def projection_for(
    codec: StreamCodec[StateT, EventT], after: StateT, new_head: int, snapshot: Snapshot
) -> tuple[str | None, Snapshot]:
    """The projection text to write with an append that leaves ``after`` at
    ``new_head`` (None: leave the row where it stands), and where the row stands then.

    A kind whose codec lags (``lag_bytes_per_event``) rewrites a large state only once
    the events since its snapshot number its length over that: encoding and writing a
    state of n bytes every n/k appends costs each append a constant share, and a reader
    folds at most n/k events onto it. Every other kind writes its state every append."""
    lag = codec.lag_bytes_per_event
    if (
        lag is None
        or snapshot.seq == 0
        or snapshot.chars < SNAPSHOT_ALWAYS_BELOW_CHARS
        or new_head - snapshot.seq >= snapshot.chars // lag
    ):
        text = codec.encode_state(after)
        return text, Snapshot(new_head, len(text))
    return None, snapshot


def decide_and_append(
    store: EventStore,
    codec: StreamCodec[StateT, EventT],
    stream_id: str,
    decide: Callable[[StateT | None], Sequence[EventT]],
    *,
    index: Callable[[Sequence[EventT]], Sequence[IndexEntry]] = lambda _: (),
    durable: bool = True,
) -> Appended[StateT, EventT]:
    """Run ``decide`` on the current state and append its events; re-decide on conflict.

    ``decide`` raises a typed error to reject: nothing is written then.
    ``durable=False`` lets the store commit without waiting for the disk; only
    for records whose loss the recovery table covers.
    """
    return _riding_out(
        lambda: _decide_and_append(store, codec, stream_id, decide, index=index, durable=durable)
    )


def _decide_and_append(
    store: EventStore,
    codec: StreamCodec[StateT, EventT],
    stream_id: str,
    decide: Callable[[StateT | None], Sequence[EventT]],
    *,
    index: Callable[[Sequence[EventT]], Sequence[IndexEntry]],
    durable: bool,
) -> Appended[StateT, EventT]:
    for attempt in range(MAX_CONFLICT_RETRIES):
        state, head, confirmed, snapshot = _state_for_write(store, codec, stream_id, attempt == 0)
        try:
            events = list(decide(state))
        except TurnkeeperError:
            if _unconfirmed_and_moved(store, stream_id, head, confirmed):
                continue  # rejected on a stale cached state: judge the current one
            raise
        if not events:
            if _unconfirmed_and_moved(store, stream_id, head, confirmed):
                continue
            return Appended(events=[], state=state, head_seq=head)
        after = state
        for event in events:
            after = codec.evolve_event(after, event)
        assert after is not None  # an event always yields a state
        text, written = projection_for(codec, after, head + len(events), snapshot)
        try:
            new_head = store.append(
                stream_id,
                codec.kind,
                expected_seq=head,
                events=[codec.encode_event(e) for e in events],
                projection_state=text,
                projection_schema_version=codec.projection_schema_version,
                index=index(events),
                durable=durable,
            )
        except StreamConflict:
            continue  # another writer appended first: decide again on the new state
        _cache_of(store).put(codec.kind, stream_id, new_head, after, written)
        return Appended(events=events, state=after, head_seq=new_head)
    raise Aborted(
        f"{stream_id}: gave up after {MAX_CONFLICT_RETRIES} conflicting writers",
        reason="contention",
    )


@dataclass(frozen=True)
class PlannedAppend:
    """One plan's decision, whatever its stream's kind: its share of the commit (None:
    it decided nothing), the state it leaves, and that state's head; ``check``: a
    decision of nothing taken on a cached head that no read confirmed, which the
    commit confirms instead (or a read, when nothing else is committed)."""

    part: StreamAppend | None
    state: BaseModel | None
    head_seq: int
    snapshot: Snapshot  # where the stream's projection row stands once it commits
    check: HeadCheck | None = None


class MultiStreamPlan(Protocol):
    """What :func:`decide_and_append_many` asks of each plan (a :class:`StreamPlan` of
    any kind): one commit holds streams of different state and event types."""

    @property
    def stream_id(self) -> str: ...

    def decide_on(self, store: EventStore, optimistic: bool) -> PlannedAppend | None:
        """The plan decided on its stream's state, or None: decided on a cached state
        that proved stale, decide again."""
        ...


@dataclass(frozen=True)
class Folded(Generic[StateT, EventT]):
    """A decision's events with the state they leave, for a ``decide`` that folded them
    itself as it decided (one command after another, each on the state the last left):
    the kernel's evolve is pure, so folding the same events from the same state again
    would only rebuild an equal state, a model copy per event."""

    events: Sequence[EventT]
    after: StateT | None  # None only with no events (a missing stream's no-op)


@dataclass(frozen=True)
class StreamPlan(Generic[StateT, EventT]):
    """One stream's share of an atomic multi-stream write: how to decide its events."""

    codec: StreamCodec[StateT, EventT]
    stream_id: str
    decide: Callable[[StateT | None], Sequence[EventT] | Folded[StateT, EventT]]
    index: Callable[[Sequence[EventT]], Sequence[IndexEntry]] = lambda _: ()

    def decide_on(self, store: EventStore, optimistic: bool) -> PlannedAppend | None:
        codec, stream_id = self.codec, self.stream_id
        state, head, confirmed, snapshot = _state_for_write(store, codec, stream_id, optimistic)
        try:
            decided = self.decide(state)
        except TurnkeeperError:
            if _unconfirmed_and_moved(store, stream_id, head, confirmed):
                return None  # rejected on a stale cached state: judge the current one
            raise
        events = list(decided.events if isinstance(decided, Folded) else decided)
        if not events:
            check = None if confirmed else HeadCheck(stream_id=stream_id, head_seq=head)
            return PlannedAppend(
                part=None, state=state, head_seq=head, snapshot=snapshot, check=check
            )
        after: StateT | None
        if isinstance(decided, Folded):
            after = decided.after
        else:
            after = state
            for event in events:
                after = codec.evolve_event(after, event)
        assert after is not None  # an event always yields a state
        new_head = head + len(events)
        text, written = projection_for(codec, after, new_head, snapshot)
        part = StreamAppend(
            stream_id=stream_id,
            kind=codec.kind,
            expected_seq=head,
            events=tuple(codec.encode_event(e) for e in events),
            projection_state=text,
            projection_schema_version=codec.projection_schema_version,
            index=tuple(self.index(events)),
        )
        return PlannedAppend(part=part, state=after, head_seq=new_head, snapshot=written)


def decide_and_append_many(
    store: EventStore, plans: Sequence[MultiStreamPlan], *, durable: bool = True
) -> None:
    """Decide every plan on its stream's current state and append all of it in one
    atomic commit (``EventStore.append_many``); on a conflict, read and decide again.

    Plans whose decision is empty write nothing; a typed rejection from any plan
    writes nothing at all.
    """
    _riding_out(lambda: _decide_and_append_many(store, plans, durable=durable))


def _decide_and_append_many(
    store: EventStore, plans: Sequence[MultiStreamPlan], *, durable: bool
) -> None:
    for attempt in range(MAX_CONFLICT_RETRIES):
        planned: list[PlannedAppend] = []
        for plan in plans:
            decided = plan.decide_on(store, attempt == 0)
            if decided is None:
                break
            planned.append(decided)
        else:
            parts = [p.part for p in planned if p.part is not None]
            checks = [p.check for p in planned if p.check is not None]
            if not parts:
                if checks and _any_moved(store, checks):
                    continue  # decided nothing on a stale cached state: judge the current one
                return
            try:
                store.append_many(parts, durable=durable, unchanged=checks)
            except StreamConflict:
                continue  # another writer moved one of the streams: decide all again
            cache = _cache_of(store)
            for done in planned:
                if done.part is not None and done.state is not None:
                    cache.put(
                        done.part.kind,
                        done.part.stream_id,
                        done.head_seq,
                        done.state,
                        done.snapshot,
                    )
            return
    raise Aborted(
        f"{[p.stream_id for p in plans]}: gave up after {MAX_CONFLICT_RETRIES} conflicts",
        reason="contention",
    )
