"""SqlEventStore's group commit (store/_writer.py), on every backend: requests queued
behind a held commit share the next one, and a failing request fails alone.

These reach into the writer (its statistics, its queue, its dialect's BEGIN) and are
not part of the EventStore contract (tests/store/conformance).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.store._batching import Gate, in_thread, wait_queued
from tests.store.toy import KIND, add, events_of, part, state_of, values_of
from turnkeeper.errors import AlreadyExists, StreamConflict
from turnkeeper.store import HeadCheck, IndexEntry, SqlEventStore


def _todo(entity_id: str) -> IndexEntry:
    return IndexEntry(entity_id=entity_id, entity_kind="todo")


def test_commit_statistics_count_every_request(open_new: Callable[[], SqlEventStore]) -> None:
    store = open_new()
    per_thread, writers = 20, 8
    errors: list[BaseException] = []
    start = threading.Barrier(writers)

    def session(i: int) -> None:
        head = 0
        try:
            start.wait()
            for n in range(per_thread):
                head = store.append(
                    f"session-{i}", KIND, head, events_of([n]), state_of(range(n + 1)), 1
                )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=session, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.writer.committed_requests == writers * per_thread
    assert 0 < store.writer.commits <= writers * per_thread


def test_queued_appends_share_one_commit_and_fail_alone(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    add(store, "owner", [1], index=[IndexEntry(entity_id="taken", entity_kind="todo")])
    add(store, "shared", [1])
    gate = Gate(store, monkeypatch)
    commits_before = store.writer.commits
    out: dict[str, Any] = {}
    threads = [in_thread(lambda: add(store, "leader", [1], expected=0), out, "leader")]
    assert gate.entered.wait(30)
    # These queue behind the held commit and must not be acknowledged before theirs.
    for i in range(5):
        follower = functools.partial(add, store, f"f{i}", [i], expected=0)
        threads.append(in_thread(follower, out, f"f{i}"))
    threads.append(in_thread(lambda: add(store, "shared", [2], expected=1), out, "win"))
    wait_queued(store, 6)
    threads.append(in_thread(lambda: add(store, "shared", [3], expected=1), out, "lose"))
    threads.append(
        in_thread(
            lambda: add(
                store,
                "thief",
                [1],
                expected=0,
                index=[IndexEntry(entity_id="taken", entity_kind="todo")],
            ),
            out,
            "thief",
        )
    )
    wait_queued(store, 8)
    assert out == {}  # nobody acknowledged while the first commit is held
    gate.release.set()
    for t in threads:
        t.join(30)
    assert out["leader"] == 1
    assert all(out[f"f{i}"] == 1 for i in range(5))
    assert out["win"] == 2
    assert isinstance(out["lose"], StreamConflict)
    assert isinstance(out["thief"], AlreadyExists)
    # The leader's own commit, then one commit for all eight queued requests.
    assert store.writer.commits - commits_before == 2
    assert store.head("shared") == 2
    assert store.head("thief") == 0
    assert [store.head(f"f{i}") for i in range(5)] == [1] * 5


def test_same_head_twice_in_one_batch_is_a_conflict(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two appends at one head share a fast-path commit: the second is a plain conflict.

    The fast path writes every projection before any event, so the loser's
    diagnosis must not mistake the winner's not-yet-inserted events for a stale
    projection (``projection_stale`` would tell the caller to run repair).
    """
    add(store, "shared", [1])
    gate = Gate(store, monkeypatch)
    out: dict[str, Any] = {}
    threads = [in_thread(lambda: add(store, "lead", [1], expected=0), out, "lead")]
    assert gate.entered.wait(30)
    threads.append(in_thread(lambda: add(store, "shared", [2], expected=1), out, "win"))
    wait_queued(store, 1)
    threads.append(in_thread(lambda: add(store, "shared", [3], expected=1), out, "lose"))
    wait_queued(store, 2)
    threads.append(in_thread(lambda: add(store, "fresh", [1], expected=0), out, "fresh"))
    wait_queued(store, 3)
    threads.append(in_thread(lambda: add(store, "fresh", [2], expected=0), out, "fresh2"))
    wait_queued(store, 4)
    gate.release.set()
    for t in threads:
        t.join(30)
    assert (out["lead"], out["win"], out["fresh"]) == (1, 2, 1)
    for loser, actual in (("lose", 2), ("fresh2", 1)):
        assert isinstance(out[loser], StreamConflict), out[loser]
        assert out[loser].details["actual_seq"] == actual
    assert store.head("shared") == 2


@pytest.mark.parametrize("with_collision", [False, True], ids=["fast_path", "safe_path"])
def test_a_failing_group_in_a_shared_batch_fails_alone(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch, with_collision: bool
) -> None:
    """Groups queued behind a held commit share the next one; the bad ones fail alone.

    ``bad`` passes its head check on ``x`` and fails it on ``y``: its write to
    ``x`` must be undone, or ``after_bad`` (queued behind it, expecting ``x``'s
    old head) would conflict. A colliding group sends the batch down the safe path.
    """
    add(store, "x", [1])
    add(store, "y", [1])
    add(store, "owner", [1], index=[_todo("taken")])
    gate = Gate(store, monkeypatch)
    commits_before = store.writer.commits
    out: dict[str, Any] = {}
    threads = [in_thread(lambda: add(store, "lead", [1], expected=0), out, "lead")]
    assert gate.entered.wait(30)
    queued = {
        "good": [part("g1", [], [1]), part("g2", [], [2])],
        "bad": [part("x", [1], [2]), part("y", [1], [3], expected=5)],
        "after_bad": [part("x", [1], [7]), part("g3", [], [1])],
    }
    if with_collision:
        queued["thief"] = [part("t1", [], [1]), part("t2", [], [2], index=[_todo("taken")])]
    for n, (name, parts) in enumerate(queued.items(), start=1):
        threads.append(in_thread(functools.partial(store.append_many, parts), out, name))
        wait_queued(store, n)  # keep the queue order: "bad" before "after_bad"
    threads.append(in_thread(lambda: add(store, "solo", [1], expected=0), out, "solo"))
    wait_queued(store, len(queued) + 1)
    assert out == {}  # nobody acknowledged while the first commit is held
    gate.release.set()
    for t in threads:
        t.join(30)
    assert out["lead"] == 1
    assert out["good"] == [1, 1]
    assert isinstance(out["bad"], StreamConflict)
    assert (out["bad"].details["stream_id"], out["bad"].details["part"]) == ("y", 1)
    assert out["after_bad"] == [2, 1]
    assert out["solo"] == 1
    if with_collision:
        assert isinstance(out["thief"], AlreadyExists)
        assert store.head("t1") == store.head("t2") == 0
    assert store.writer.commits - commits_before == 2
    assert values_of(store, "x") == [1, 7]
    assert values_of(store, "y") == [1]
    proj = store.read_projection("x")
    assert proj is not None
    assert (proj.head_seq, proj.state) == (2, state_of([1, 7]))


def test_a_head_check_sees_the_appends_queued_before_it(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decision of nothing on a stream (``unchanged``) shares a batch with an append to
    that stream queued before it: the check must see that append (not yet in the events
    table on SQLite's fast path, not yet committed in PostgreSQL's pipeline) and fail;
    a check queued before the append passes, as if it had committed first."""
    add(store, "goal", [1])
    add(store, "s1", [1])
    add(store, "s2", [1])
    gate = Gate(store, monkeypatch)
    out: dict[str, Any] = {}

    def decided_nothing_on_goal(session: str) -> list[int]:
        return store.append_many(
            [part(session, [1], [2])], unchanged=[HeadCheck(stream_id="goal", head_seq=1)]
        )

    threads = [in_thread(lambda: add(store, "lead", [1], expected=0), out, "lead")]
    assert gate.entered.wait(30)
    threads.append(in_thread(lambda: decided_nothing_on_goal("s1"), out, "before"))
    wait_queued(store, 1)
    threads.append(in_thread(lambda: add(store, "goal", [2], expected=1), out, "goal"))
    wait_queued(store, 2)
    threads.append(in_thread(lambda: decided_nothing_on_goal("s2"), out, "after"))
    wait_queued(store, 3)
    gate.release.set()
    for t in threads:
        t.join(30)
    assert (out["lead"], out["before"], out["goal"]) == (1, [2], 2)
    assert isinstance(out["after"], StreamConflict), out["after"]
    assert (out["after"].details["stream_id"], out["after"].details["actual_seq"]) == ("goal", 2)
    assert (store.head("s1"), store.head("s2"), store.head("goal")) == (2, 1, 2)
