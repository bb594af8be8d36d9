"""The decoded-state cache of runtime/log/streams.py, on real SQLite files.

A cached state may only be served while the store confirms the stream's head is
still the one it was cached at: another store object, thread or process that
appended since must be seen at once. Two ``SqlEventStore`` objects on one file
stand in for two processes; one test also uses a real second OS process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.goal_streams import add_todo, todo_ids
from turnkeeper.errors import FailedPrecondition
from turnkeeper.kernel import GoalState, decide_goal
from turnkeeper.kernel.proposals import CreateGoal
from turnkeeper.kernel.session import (
    AcquireLease,
    LeaseToken,
    ReleaseLease,
    SessionEvent,
    SessionState,
    decide_session,
    evolve_session,
)
from turnkeeper.runtime.log.codec import StreamCodec
from turnkeeper.runtime.log.streams import (
    Folded,
    Snapshot,
    StreamPlan,
    _cache_of,
    _Entry,
    _StateCache,
    decide_and_append,
    decide_and_append_many,
    load_stream,
)
from turnkeeper.runtime.services.goals import GOAL_CODEC, GoalService, goal_stream
from turnkeeper.runtime.services.sessions import SESSION_CODEC, SessionService, session_stream
from turnkeeper.store import SqlEventStore, open_store

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# A cache entry planted by hand, with no projection row known: a write decided on it
# writes the projection (runtime/log/streams.py, projection_for).
AT_START = Snapshot(0, 0)


def held(entry: _Entry | None) -> tuple[int, object] | None:
    """A cache entry's head and state (None: no entry)."""
    return None if entry is None else (entry.head, entry.state)


def test_an_append_through_one_store_is_seen_by_the_others_cached_load(
    two_stores: tuple[SqlEventStore, SqlEventStore],
) -> None:
    writer, reader = two_stores
    GoalService(writer).create(CreateGoal(goal_id="g", title="cache"))
    stream = goal_stream("g")
    state, head = load_stream(reader, GOAL_CODEC, stream)
    assert head == 1 and todo_ids(state) == []
    # The reader really holds the head-1 state now; without this the checks below
    # would pass just as well if nothing were ever cached.
    assert held(_cache_of(reader).get(GOAL_CODEC.kind, stream)) == (1, state)

    GoalService(writer).submit("g", add_todo("t1"))
    state, head = load_stream(reader, GOAL_CODEC, stream)
    assert (head, todo_ids(state)) == (2, ["t1"])

    # The other way round, through decide_and_append on the reader's store object,
    # after the writer cached head 2 by loading it.
    assert load_stream(writer, GOAL_CODEC, stream)[1] == 2
    now = datetime.now(UTC)
    decide_and_append(reader, GOAL_CODEC, stream, lambda s: decide_goal(s, add_todo("t2"), now))
    state, head = load_stream(writer, GOAL_CODEC, stream)
    assert (head, todo_ids(state)) == (3, ["t1", "t2"])


def _decide_t2(state: GoalState | None, now: datetime) -> list[Any]:
    return decide_goal(state, add_todo("t2"), now)


def _nothing_without_t1(state: GoalState | None, now: datetime) -> list[Any]:
    # Writes only once t1 exists: on the stale state it decides "nothing to do".
    return decide_goal(state, add_todo("t2"), now) if state and "t1" in state.todos else []


def _rejects_without_t1(state: GoalState | None, now: datetime) -> list[Any]:
    if state is None or "t1" not in state.todos:
        raise FailedPrecondition("t1 is missing", reason="test_needs_t1")
    return decide_goal(state, add_todo("t2"), now)


# Each way a decision on a stale state can go: it appends, decides nothing, rejects.
ON_EACH_DECISION = pytest.mark.parametrize(
    "decision",
    [_decide_t2, _nothing_without_t1, _rejects_without_t1],
    ids=["appends", "decides-nothing", "rejects"],
)


@ON_EACH_DECISION
def test_a_write_decided_on_a_stale_cached_state_is_decided_again(
    two_stores: tuple[SqlEventStore, SqlEventStore],
    decision: Callable[[GoalState | None, datetime], list[Any]],
) -> None:
    # A write may decide on the cached state without asking for the head first; the
    # append's expected head (or a head check, when the decision writes nothing or
    # rejects) must catch the other store's append and decide again on its result.
    mine, theirs = two_stores
    GoalService(theirs).create(CreateGoal(goal_id="g", title="stale"))
    stream = goal_stream("g")
    assert load_stream(mine, GOAL_CODEC, stream)[1] == 1  # mine caches head 1
    GoalService(theirs).submit("g", add_todo("t1"))  # theirs moves the stream to head 2
    now = datetime.now(UTC)

    done = decide_and_append(mine, GOAL_CODEC, stream, lambda s: decision(s, now))
    assert len(done.events) == 1 and done.head_seq == 3
    assert todo_ids(done.state) == ["t1", "t2"]
    assert [r.seq for r in theirs.read_stream(stream)] == [1, 2, 3]
    assert todo_ids(GoalService(theirs).load("g")) == ["t1", "t2"]


@pytest.mark.parametrize("with_other_part", [True, False], ids=["in-the-commit", "by-a-read"])
def test_a_plan_deciding_nothing_on_a_stale_cached_state_is_decided_again(
    two_stores: tuple[SqlEventStore, SqlEventStore], with_other_part: bool
) -> None:
    # In a multi-stream write, a plan that decides nothing on a cached head is
    # confirmed by the commit of the other plans' events (a head check riding it) or,
    # when nothing else is written, by a read: either way the other store's append is
    # seen and every plan decides again on the current states.
    mine, theirs = two_stores
    GoalService(theirs).create(CreateGoal(goal_id="g", title="stale"))
    GoalService(theirs).create(CreateGoal(goal_id="h", title="other"))
    stream, other = goal_stream("g"), goal_stream("h")
    assert load_stream(mine, GOAL_CODEC, stream)[1] == 1  # mine caches head 1
    assert load_stream(mine, GOAL_CODEC, other)[1] == 1
    GoalService(theirs).submit("g", add_todo("t1"))  # theirs moves the stream to head 2
    now = datetime.now(UTC)
    decided_on: list[list[str]] = []

    def goal_decision(state: GoalState | None) -> list[Any]:
        decided_on.append(todo_ids(state))
        return _nothing_without_t1(state, now)

    plans = [StreamPlan(GOAL_CODEC, stream, goal_decision)]
    if with_other_part:
        plans.append(StreamPlan(GOAL_CODEC, other, lambda s: decide_goal(s, add_todo("x"), now)))
    decide_and_append_many(mine, plans)
    assert decided_on == [[], ["t1"]]  # stale, then the current state
    assert todo_ids(GoalService(theirs).load("g")) == ["t1", "t2"]
    assert [r.seq for r in theirs.read_stream(stream)] == [1, 2, 3]
    assert theirs.head(other) == (2 if with_other_part else 1)  # appended once


def test_a_stream_that_does_not_exist_is_cached_and_read_again_once_it_does(
    two_stores: tuple[SqlEventStore, SqlEventStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A missing stream costs a guarded read (projection, then proof there are no
    # events); cached, a load costs one head query, until the stream's first event.
    mine, theirs = two_stores
    stream = goal_stream("g")
    assert load_stream(mine, GOAL_CODEC, stream) == (None, 0)
    reads: list[str] = []
    real_read = mine.read_projection

    def read_projection(stream_id: str) -> Any:
        reads.append(stream_id)
        return real_read(stream_id)

    monkeypatch.setattr(mine, "read_projection", read_projection)
    assert load_stream(mine, GOAL_CODEC, stream) == (None, 0)
    assert reads == []  # served from the cache, confirmed by the head alone

    GoalService(theirs).create(CreateGoal(goal_id="g", title="late"))
    GoalService(theirs).submit("g", add_todo("t1"))
    state, head = load_stream(mine, GOAL_CODEC, stream)
    assert (head, todo_ids(state)) == (2, ["t1"]) and reads == [stream]


@ON_EACH_DECISION
def test_a_write_decided_on_a_cached_absence_is_decided_again(
    two_stores: tuple[SqlEventStore, SqlEventStore],
    decision: Callable[[GoalState | None, datetime], list[Any]],
) -> None:
    # The cached absence is a stale state like any other: a write decided on it must
    # land on, or be decided again on, the stream another store created since.
    mine, theirs = two_stores
    stream = goal_stream("g")
    assert load_stream(mine, GOAL_CODEC, stream) == (None, 0)  # mine caches "absent"
    GoalService(theirs).create(CreateGoal(goal_id="g", title="late"))
    GoalService(theirs).submit("g", add_todo("t1"))
    now = datetime.now(UTC)

    done = decide_and_append(mine, GOAL_CODEC, stream, lambda s: decision(s, now))
    assert len(done.events) == 1 and done.head_seq == 3
    assert todo_ids(done.state) == ["t1", "t2"]
    assert [r.seq for r in theirs.read_stream(stream)] == [1, 2, 3]


def test_session_commands_through_one_store_are_seen_by_the_other(
    two_stores: tuple[SqlEventStore, SqlEventStore], tmp_path: Path
) -> None:
    first, second = two_stores
    GoalService(first).create(CreateGoal(goal_id="g", title="sessions"))
    created = SessionService(first).create("g", tmp_path, "inprocess")
    sid = created.session_id
    assert SessionService(second).load(sid).lease.owner is None  # cached at head 1

    until = datetime.now(UTC) + timedelta(seconds=60)
    done = SessionService(first).execute(sid, AcquireLease(owner="ctl-a", expires_at=until))
    assert done.state is not None
    seen = SessionService(second).load(sid)
    assert (seen.lease.owner, seen.lease.epoch) == ("ctl-a", done.state.lease.epoch)

    # The second store releases; the first, which cached its own post-append state,
    # must see the release rather than the lease it took.
    token = LeaseToken(owner="ctl-a", epoch=seen.lease.epoch)
    SessionService(second).execute(sid, ReleaseLease(lease=token))
    assert SessionService(first).load(sid).lease.owner is None


def test_a_state_is_served_only_for_the_head_it_was_cached_at(
    two_stores: tuple[SqlEventStore, SqlEventStore],
) -> None:
    store, _ = two_stores
    GoalService(store).create(CreateGoal(goal_id="g", title="heads"))
    GoalService(store).submit("g", add_todo("t1"))
    stream = goal_stream("g")
    real, head = load_stream(store, GOAL_CODEC, stream)
    assert head == 2 and real is not None
    impostor = real.model_copy(update={"todos": {}})  # recognisably not the stream's state
    cache = _cache_of(store)

    # Planted at the stream's real head, the cache is what load_stream serves:
    # proof the cache is consulted at all.
    cache.put(GOAL_CODEC.kind, stream, 2, impostor, AT_START)
    assert load_stream(store, GOAL_CODEC, stream) == (impostor, 2)

    # Planted at any other head, it is never served: the stream is read again.
    for wrong_head in (1, 3, 99):
        cache._entries.clear()
        cache.put(GOAL_CODEC.kind, stream, wrong_head, impostor, AT_START)
        state, got = load_stream(store, GOAL_CODEC, stream)
        assert got == 2 and todo_ids(state) == ["t1"], wrong_head


def test_the_cache_belongs_to_one_store_not_to_every_file_with_that_stream(
    tmp_path: Path,
) -> None:
    # Same goal id, same head, different databases: a cache keyed by stream alone
    # would hand one file's state to the other.
    # (A goal id no other test uses: a shared cache must not be masked by leftovers.)
    goal_id = f"g-{uuid.uuid4().hex[:8]}"
    one, other = open_store(tmp_path / "one.db"), open_store(tmp_path / "other.db")
    try:
        GoalService(one).create(CreateGoal(goal_id=goal_id, title="in one"))
        GoalService(other).create(CreateGoal(goal_id=goal_id, title="in other"))
        for _ in range(2):  # the second round is served from each store's cache
            assert GoalService(one).load(goal_id).goal.title == "in one"
            assert GoalService(other).load(goal_id).goal.title == "in other"
    finally:
        one.close()
        other.close()


def test_the_state_cached_after_an_append_equals_the_one_decoded_from_disk(
    two_stores: tuple[SqlEventStore, SqlEventStore], tmp_path: Path
) -> None:
    # decide_and_append caches the state it evolved in memory; a fresh reader
    # decodes the projection it wrote. Both must be the same state, or a process
    # would decide on something no other process can see.
    mine, fresh = two_stores
    goals = GoalService(mine)
    goals.create(CreateGoal(goal_id="g", title="equal"))
    for n in range(3):
        goals.submit("g", add_todo(f"t{n}"))
    sid = SessionService(mine).create("g", tmp_path, "inprocess").session_id
    until = datetime.now(UTC) + timedelta(seconds=30)
    SessionService(mine).execute(sid, AcquireLease(owner="ctl-a", expires_at=until))
    codecs: list[tuple[StreamCodec[Any, Any], str]] = [
        (GOAL_CODEC, goal_stream("g")),
        (SESSION_CODEC, session_stream(sid)),
    ]
    for codec, stream in codecs:
        cached = _cache_of(mine).get(codec.kind, stream)
        assert cached is not None
        assert load_stream(mine, codec, stream) == (cached.state, cached.head)
        assert load_stream(fresh, codec, stream) == load_stream(mine, codec, stream)


def test_a_second_process_appending_is_seen_by_the_next_load(
    two_stores: tuple[SqlEventStore, SqlEventStore], tmp_path: Path
) -> None:
    store, _ = two_stores
    GoalService(store).create(CreateGoal(goal_id="g", title="processes"))
    assert todo_ids(GoalService(store).load("g")) == []  # cached at head 1
    assert _cache_of(store).get(GOAL_CODEC.kind, goal_stream("g")) is not None
    snippet = textwrap.dedent(
        f"""
        from turnkeeper.kernel.proposals import AddTodo, TodoSpec
        from turnkeeper.runtime.services.goals import GoalService
        from turnkeeper.store import open_store
        store = open_store({str(tmp_path / "tk.db")!r})
        GoalService(store).submit("g", AddTodo(todo=TodoSpec(todo_id="t-child", title="c")))
        store.close()
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", snippet],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    state, head = load_stream(store, GOAL_CODEC, goal_stream("g"))
    assert (head, todo_ids(state)) == (2, ["t-child"])


def test_the_cache_is_bounded_and_evicts_the_least_recently_stored() -> None:
    cache = _StateCache(capacity=3)
    for n in range(5):
        cache.put("goal", f"s{n}", 1, f"state {n}", AT_START)
    assert len(cache._entries) == 3
    assert [held(cache.get("goal", f"s{n}")) for n in range(5)] == [
        None,
        None,
        (1, "state 2"),
        (1, "state 3"),
        (1, "state 4"),
    ]
    cache.put("goal", "s2", 2, "state 2b", AT_START)  # storing again makes it the newest
    cache.put("goal", "s5", 1, "state 5", AT_START)
    assert cache.get("goal", "s3") is None
    assert held(cache.get("goal", "s2")) == (2, "state 2b")
    assert cache.get("session", "s2") is None  # the kind is part of the key


def test_a_slower_writer_never_replaces_a_newer_head_with_an_older_one() -> None:
    cache = _StateCache()
    cache.put("goal", "s", 5, "at five", AT_START)
    cache.put("goal", "s", 4, "at four", AT_START)  # a thread that read head 4 before the append
    assert held(cache.get("goal", "s")) == (5, "at five")
    cache.put("goal", "s", 5, "at five again", AT_START)  # the same head may be refreshed
    cache.put("goal", "s", 6, "at six", AT_START)
    assert held(cache.get("goal", "s")) == (6, "at six")


def test_a_plan_that_folded_its_own_events_is_not_folded_again(
    two_stores: tuple[SqlEventStore, SqlEventStore], tmp_path: Path
) -> None:
    # A decide that returns Folded hands on the state its events leave: the append
    # writes and caches that state without evolving the events once more, and it is
    # the state a fresh reader decodes from disk.
    mine, fresh = two_stores
    GoalService(mine).create(CreateGoal(goal_id="g", title="folded"))
    sid = SessionService(mine).create("g", tmp_path, "inprocess").session_id
    stream = session_stream(sid)
    evolved: list[object] = []

    def counting(state: SessionState | None, event: SessionEvent) -> SessionState:
        evolved.append(event)
        return evolve_session(state, event)

    codec = replace(SESSION_CODEC, evolve_event=counting)
    until = datetime.now(UTC) + timedelta(seconds=30)

    def decide(state: SessionState | None) -> Folded[SessionState, SessionEvent]:
        lease = AcquireLease(owner="ctl-a", expires_at=until)
        events = decide_session(state, lease, datetime.now(UTC))
        after = state
        for event in events:
            after = evolve_session(after, event)
        return Folded(events=events, after=after)

    decide_and_append_many(mine, [StreamPlan(codec, stream, decide)])
    assert evolved == []
    state, head = load_stream(fresh, SESSION_CODEC, stream)
    assert state is not None and state.lease.owner == "ctl-a"
    assert held(_cache_of(mine).get(SESSION_CODEC.kind, stream)) == (head, state)
