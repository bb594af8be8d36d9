"""Group commit across threads, and writers in separate OS processes."""

from __future__ import annotations

import functools
import multiprocessing as mp
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from tests.store import _workers
from tests.store._batching import Gate, in_thread, wait_queued
from tests.store.conftest import Backend
from tests.store.toy import KIND, add, events_of, state_of
from turnkeeper.errors import AlreadyExists, StreamConflict
from turnkeeper.store import IndexEntry, SqlEventStore


def test_sixteen_threads_sixteen_streams(open_new: Callable[[], SqlEventStore]) -> None:
    store = open_new()
    per_thread = 25
    acked: dict[str, list[int]] = defaultdict(list)
    errors: list[BaseException] = []
    start = threading.Barrier(16)

    def session(i: int) -> None:
        stream = f"session-{i}"
        head = 0
        try:
            start.wait()
            for n in range(per_thread):
                head = store.append(stream, KIND, head, events_of([n]), state_of(range(n + 1)), 1)
                acked[stream].append(head)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=session, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.writer.committed_requests == 16 * per_thread
    assert store.writer.commits <= 16 * per_thread
    store.close()

    reopened = open_new()
    for i in range(16):
        stream = f"session-{i}"
        assert acked[stream] == list(range(1, per_thread + 1))
        assert [e.seq for e in reopened.read_stream(stream)] == acked[stream]
        proj = reopened.read_projection(stream)
        assert proj is not None
        assert proj.state == state_of(range(per_thread))


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


def test_two_processes_race_for_the_same_head(backend: Backend) -> None:
    rounds = 50
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=_workers.race, args=(backend.url, "contested", rounds, name, barrier, out)
        )
        for name in ("a", "b")
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in range(2 * rounds)]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    by_round: dict[int, list[tuple[str, str, int]]] = defaultdict(list)
    for r, name, outcome, head in results:
        by_round[r].append((name, outcome, head))
    for r in range(rounds):
        outcomes = sorted(o for _, o, _ in by_round[r])
        assert outcomes == ["lost", "won"], (r, by_round[r])
        assert {h for _, _, h in by_round[r]} == {r}  # both raced from the same head
    from turnkeeper.store import open_store

    with open_store(backend.url) as store:
        assert store.head("contested") == rounds
        assert [e.seq for e in store.read_stream("contested")] == list(range(1, rounds + 1))
