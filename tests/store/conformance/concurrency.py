"""Concurrent writers: threads sharing a store, stores on separate connections, processes."""

from __future__ import annotations

import json
import multiprocessing as mp
import threading
from collections import defaultdict
from collections.abc import Callable

import pytest

from tests.store import _workers
from tests.store.conftest import Backend, not_for_memory
from tests.store.toy import KIND, events_of, state_of
from turnkeeper.errors import StreamConflict, TurnkeeperError
from turnkeeper.store import EventStore, open_store


def test_sixteen_threads_sixteen_streams(open_new: Callable[[], EventStore]) -> None:
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
    store.close()

    reopened = open_new()
    for i in range(16):
        stream = f"session-{i}"
        assert acked[stream] == list(range(1, per_thread + 1))
        assert [e.seq for e in reopened.read_stream(stream)] == acked[stream]
        proj = reopened.read_projection(stream)
        assert proj is not None
        assert proj.state == state_of(range(per_thread))


@pytest.mark.parametrize("stores", ["one_store", "a_store_each"])
def test_threads_at_the_same_head_one_wins(open_new: Callable[[], EventStore], stores: str) -> None:
    """Eight threads append at the head they all read: one wins, seven conflict."""
    writers = 8
    rounds = 15
    shared = open_new()
    mine = [shared] * writers if stores == "one_store" else [open_new() for _ in range(writers)]
    barrier = threading.Barrier(writers)
    outcomes: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        store = mine[w]
        try:
            for r in range(rounds):
                barrier.wait()
                head = store.head("contested")
                barrier.wait()  # every thread holds the same head now
                try:
                    store.append("contested", KIND, head, events_of([w]), state_of([w]), 1)
                    outcome = "won"
                except StreamConflict as exc:
                    # The loser is told the winner's head.
                    outcome = "lost" if exc.details["actual_seq"] == head + 1 else repr(exc)
                with lock:
                    outcomes[r].append((w, outcome, head))
                barrier.wait()
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    for r in range(rounds):
        assert sorted(o for _, o, _ in outcomes[r]) == ["lost"] * (writers - 1) + ["won"]
        assert {h for _, _, h in outcomes[r]} == {r}
    assert [e.seq for e in shared.read_stream("contested")] == list(range(1, rounds + 1))


def test_writers_behind_the_head_are_told_of_a_conflict_never_of_damage(
    open_new: Callable[[], EventStore],
) -> None:
    """Six writers on their own connections append as fast as they can, each from the
    head it last saw: whoever is behind gets ``stream_conflict``, never a misreading
    of another's commit as a damaged projection (``projection_stale``)."""
    writers, attempts = 6, 60
    mine = [open_new() for _ in range(writers)]
    wrong: list[BaseException] = []
    won = [0] * writers
    start = threading.Barrier(writers)

    def writer(w: int) -> None:
        store = mine[w]
        head = 0
        start.wait()
        for _ in range(attempts):
            try:
                head = store.append("busy", KIND, head, events_of([w]), state_of([w]), 1)
                won[w] += 1
            except StreamConflict as exc:
                actual = exc.details["actual_seq"]
                assert isinstance(actual, int)
                head = actual
            except BaseException as exc:
                wrong.append(exc)
                return

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert wrong == []
    reader = open_new()
    assert [e.seq for e in reader.read_stream("busy")] == list(range(1, sum(won) + 1))
    assert reader.head("busy") == sum(won)


@not_for_memory("its database lives in one process: other processes cannot open it")
def test_processes_race_for_the_same_head(backend: Backend) -> None:
    """Four OS processes, each with its own store, append at one head: one wins a round."""
    rounds, writers = 30, 4
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(writers)
    out = ctx.Queue()
    names = [chr(ord("a") + i) for i in range(writers)]
    procs = [
        ctx.Process(
            target=_workers.race, args=(backend.url, "contested", rounds, name, barrier, out)
        )
        for name in names
    ]
    for p in procs:
        p.start()
    try:
        results = [out.get(timeout=120) for _ in range(writers * rounds)]
    finally:
        for p in procs:
            p.join(60)
    assert [p.exitcode for p in procs] == [0] * writers
    by_round: dict[int, list[tuple[str, str, int]]] = defaultdict(list)
    for r, name, outcome, head in results:
        by_round[r].append((name, outcome, head))
    for r in range(rounds):
        outcomes = sorted(o for _, o, _ in by_round[r])
        assert outcomes == ["lost"] * (writers - 1) + ["won"], (r, by_round[r])
        assert {h for _, _, h in by_round[r]} == {r}  # all raced from the same head
    with open_store(backend.url) as store:
        assert store.head("contested") == rounds
        assert [e.seq for e in store.read_stream("contested")] == list(range(1, rounds + 1))


def test_a_reader_never_sees_events_without_their_projection(
    open_new: Callable[[], EventStore],
) -> None:
    """Events and projection commit together: a reader on another connection that reads
    the head, then the projection, then the head again sees the projection between."""
    writer, reader = open_new(), open_new()
    appends = 150
    done = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for n in range(appends):
                writer.append("s", KIND, n, events_of([1]), state_of([1] * (n + 1)), 1)
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=write)
    thread.start()
    seen = 0
    try:
        while not errors and (not done.is_set() or seen < appends):
            before = reader.head("s")
            proj = reader.read_projection("s")
            after = reader.head("s")
            if proj is None:
                assert before == 0
                continue
            assert before <= proj.head_seq <= after
            assert json.loads(proj.state)["count"] == proj.head_seq
            seen = after
    except TurnkeeperError as exc:
        errors.append(exc)
    thread.join(60)
    assert errors == []
    assert reader.head("s") == appends
