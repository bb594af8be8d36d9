"""The contract of ``append_many``: several streams in one atomic append."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.store.conftest import Backend, not_for_memory
from tests.store.toy import KIND, CounterFolder, add, part, state_of, values_of
from turnkeeper.errors import AlreadyExists, InvalidArgument, StreamConflict
from turnkeeper.store import EventStore, HeadCheck, IndexEntry, StreamAppend

PROJECT_ROOT = Path(__file__).resolve().parents[3]


def _todo(entity_id: str) -> IndexEntry:
    return IndexEntry(entity_id=entity_id, entity_kind="todo")


def _snapshot(store: EventStore, *streams: str) -> Any:
    return [(store.read_stream(s), store.read_projection(s)) for s in streams]


def test_round_trip_over_two_streams(store: EventStore, folder: CounterFolder) -> None:
    add(store, "goal", [1, 2])
    heads = store.append_many(
        [
            part("goal", [1, 2], [3], index=[_todo("todo-1")]),
            part("session", [], [10, 20], index=[_todo("turn-1")]),
        ]
    )
    assert heads == [3, 2]
    assert values_of(store, "goal") == [1, 2, 3]
    assert values_of(store, "session") == [10, 20]
    assert [e.seq for e in store.read_stream("session")] == [1, 2]
    for stream, values, head in (("goal", [1, 2, 3], 3), ("session", [10, 20], 2)):
        proj = store.read_projection(stream)
        assert proj is not None
        assert (proj.kind, proj.head_seq, proj.state) == (KIND, head, state_of(values))
    assert store.lookup("todo-1") == ("goal", "todo")
    assert store.lookup("turn-1") == ("session", "todo")
    # One call, one moment: every event of it carries the same recorded_at.
    stamps = {e.recorded_at for e in store.read_stream("goal", after_seq=2)}
    stamps |= {e.recorded_at for e in store.read_stream("session")}
    assert len(stamps) == 1
    # A lists-of-events part is accepted too; one part is the single-append case.
    assert store.append_many([part("goal", [1, 2, 3], [4])], durable=False) == [4]
    assert store.verify(folder).ok


@pytest.mark.parametrize("first_exists", [False, True])
def test_conflict_on_any_part_writes_nothing(store: EventStore, first_exists: bool) -> None:
    if first_exists:
        add(store, "a", [1])
    old_a = [1] if first_exists else []
    add(store, "b", [1, 2])
    before = _snapshot(store, "a", "b")
    with pytest.raises(StreamConflict) as err:
        store.append_many([part("a", old_a, [5]), part("b", [1], [6], expected=1)])
    assert err.value.details["stream_id"] == "b"
    assert err.value.details["part"] == 1
    assert err.value.details["actual_seq"] == 2
    assert _snapshot(store, "a", "b") == before
    with pytest.raises(StreamConflict) as err:
        store.append_many([part("a", old_a, [5], expected=7), part("b", [1, 2], [6])])
    assert (err.value.details["stream_id"], err.value.details["part"]) == ("a", 0)
    assert _snapshot(store, "a", "b") == before
    # Nothing was left half-done: the same parts with the right heads go through.
    assert store.append_many([part("a", old_a, [5]), part("b", [1, 2], [6])]) == [
        len(old_a) + 1,
        3,
    ]


@pytest.mark.parametrize("first_exists", [False, True])
def test_index_collision_on_second_part_writes_nothing(
    store: EventStore, first_exists: bool
) -> None:
    add(store, "owner", [1], index=[_todo("taken")])
    if first_exists:
        add(store, "a", [1])
    old_a = [1] if first_exists else []
    before = _snapshot(store, "a", "b", "owner")
    with pytest.raises(AlreadyExists) as err:
        store.append_many(
            [
                part("a", old_a, [5], index=[_todo("free-a")]),
                part("b", [], [6], index=[_todo("free-b"), _todo("taken")]),
            ]
        )
    details = err.value.details
    assert (details["stream_id"], details["requested_stream_id"]) == ("owner", "b")
    assert (details["entity_id"], details["part"]) == ("taken", 1)
    assert _snapshot(store, "a", "b", "owner") == before
    assert store.lookup("free-a") is None
    assert store.lookup("free-b") is None
    assert store.lookup("taken") == ("owner", "todo")


def test_two_parts_claiming_one_entity_write_nothing(store: EventStore) -> None:
    with pytest.raises(AlreadyExists) as err:
        store.append_many(
            [part("a", [], [1], index=[_todo("e")]), part("b", [], [2], index=[_todo("e")])]
        )
    assert (err.value.details["requested_stream_id"], err.value.details["part"]) == ("b", 1)
    assert (store.head("a"), store.head("b"), store.lookup("e")) == (0, 0, None)
    assert store.read_projection("a") is None


def test_kind_mismatch_on_second_part_writes_nothing(store: EventStore) -> None:
    add(store, "b", [1])
    with pytest.raises(InvalidArgument) as err:
        store.append_many([part("a", [], [5]), part("b", [1], [6], kind="other")])
    assert (err.value.reason, err.value.details["stream_id"]) == ("stream_kind_mismatch", "b")
    assert store.head("a") == 0
    assert store.read_projection("a") is None


def test_bad_calls_write_nothing(store: EventStore) -> None:
    add(store, "a", [1])
    before = _snapshot(store, "a", "b")
    with pytest.raises(InvalidArgument) as err:
        store.append_many([part("a", [1], [2]), part("b", [], [3]), part("a", [1], [4])])
    assert (err.value.reason, err.value.details["stream_id"]) == ("duplicate_stream", "a")
    empty = StreamAppend(
        stream_id="b",
        kind=KIND,
        expected_seq=0,
        events=(),
        projection_state=state_of([]),
        projection_schema_version=1,
    )
    with pytest.raises(InvalidArgument) as err:
        store.append_many([part("a", [1], [2]), empty])
    assert (err.value.reason, err.value.details["stream_id"]) == ("no_events", "b")
    with pytest.raises(InvalidArgument) as err:
        store.append_many([])
    assert err.value.reason == "no_appends"
    assert _snapshot(store, "a", "b") == before


def test_sixteen_threads_overlapping_stream_pairs(
    open_new: Callable[[], EventStore], folder: CounterFolder
) -> None:
    """Every group touches two of eight streams; conflicts are retried on fresh reads.

    Every event value is one attempt's id, on both of its streams: after reopening,
    each acknowledged id sits at its acknowledged seqs and no other id is present.
    """
    store = open_new()
    streams = [f"c{i}" for i in range(8)]
    per_thread = 15
    acked: dict[int, dict[str, int]] = {}  # attempt id -> {stream: seq}
    conflicts = Counter[int]()
    errors: list[BaseException] = []
    start = threading.Barrier(16)

    def worker(t: int) -> None:
        rng = random.Random(t)
        attempt = 0
        try:
            start.wait()
            for _ in range(per_thread):
                pair = rng.sample(streams, 2)
                for _ in range(1000):
                    attempt += 1
                    ident = t * 100_000 + attempt
                    parts = [part(s, values_of(store, s), [ident]) for s in pair]
                    try:
                        heads = store.append_many(parts, durable=t % 4 != 0)
                    except StreamConflict:
                        conflicts[t] += 1
                        continue
                    acked[ident] = dict(zip(pair, heads, strict=True))
                    break
                else:
                    raise AssertionError(f"thread {t} never won its pair {pair}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert len(acked) == 16 * per_thread
    assert sum(conflicts.values()) > 0  # the retry path ran
    store.close()

    reopened = open_new()
    expected: dict[str, dict[int, int]] = defaultdict(dict)  # stream -> seq -> id
    for ident, heads in acked.items():
        for stream, seq in heads.items():
            expected[stream][seq] = ident
    for stream in streams:
        events = reopened.read_stream(stream)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        values = values_of(reopened, stream)
        assert dict(enumerate(values, start=1)) == expected[stream]
        proj = reopened.read_projection(stream)
        assert proj is not None
        assert (proj.head_seq, proj.state) == (len(values), state_of(values))
    assert reopened.verify(folder).ok


@not_for_memory("its database lives in one process: nothing outlives the writer's")
@pytest.mark.parametrize("mode", ["durable", "lazy"])
def test_acknowledged_groups_survive_a_sigkilled_writer(
    backend: Backend, open_new: Callable[[], EventStore], folder: CounterFolder, mode: str
) -> None:
    groups = 20
    proc = subprocess.run(
        [sys.executable, "-m", "tests.store._workers", "many", backend.url, str(groups), mode],
        cwd=PROJECT_ROOT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == -9, proc.stderr
    acked = [line.split() for line in proc.stdout.splitlines() if line.startswith("ack")]
    assert [(int(g), int(a), int(b)) for _, g, a, b in acked] == [
        (g, g + 1, g + 1) for g in range(groups)
    ]
    store = open_new()
    for stream in ("ga", "gb"):
        assert values_of(store, stream) == list(range(groups))
        proj = store.read_projection(stream)
        assert proj is not None
        assert (proj.head_seq, proj.state) == (groups, state_of(range(groups)))
        assert all(store.lookup(f"{stream}-{g}") == (stream, "todo") for g in range(groups))
    assert store.verify(folder).ok


def test_unchanged_heads_commit_with_the_parts_or_fail_them(store: EventStore) -> None:
    """``unchanged``: a decision of nothing on a stream, confirmed by the commit itself."""
    add(store, "a", [1, 2])
    add(store, "b", [1])
    held = [HeadCheck(stream_id="b", head_seq=1), HeadCheck(stream_id="none", head_seq=0)]
    assert store.append_many([part("a", [1, 2], [3])], unchanged=held) == [3]
    before = _snapshot(store, "a", "b")
    with pytest.raises(StreamConflict) as err:
        store.append_many(
            [part("a", [1, 2, 3], [4])], unchanged=[HeadCheck(stream_id="b", head_seq=0)]
        )
    details = err.value.details
    assert (details["stream_id"], details["expected_seq"], details["actual_seq"]) == ("b", 0, 1)
    assert _snapshot(store, "a", "b") == before  # nothing of the call was written
    assert store.head("none") == 0  # a check writes nothing, not even an empty stream
    for bad in (
        [HeadCheck(stream_id="a", head_seq=3)],  # appended and checked
        [HeadCheck(stream_id="b", head_seq=1)] * 2,  # checked twice
        [HeadCheck(stream_id="b", head_seq=-1)],
        [HeadCheck(stream_id="b\x00", head_seq=1)],
    ):
        with pytest.raises(InvalidArgument):
            store.append_many([part("a", [1, 2, 3], [4])], unchanged=bad)
    assert _snapshot(store, "a", "b") == before
