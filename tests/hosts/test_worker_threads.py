"""The turns' reused threads: a job never waits for a thread, an idle thread is reused,
the threads are bounded by the jobs running at once and end when idle."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from turnkeeper.hosts.worker_threads import WorkerThreads

WAIT_S = 10.0


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _run_and_wait(pool: WorkerThreads, name: str = "job") -> tuple[int, str]:
    """Run one job; the ident and name of the thread that ran it."""
    seen: list[tuple[int, str]] = []
    done = threading.Event()

    def job() -> None:
        seen.append((threading.get_ident(), threading.current_thread().name))
        done.set()

    pool.run(job, name)
    assert done.wait(WAIT_S)
    return seen[0]


def test_an_idle_thread_runs_the_next_job_under_the_jobs_name() -> None:
    pool = WorkerThreads("idle", idle_seconds=WAIT_S)
    first, name = _run_and_wait(pool, "turn-1")
    assert name == "turn-1"
    _until(lambda: pool.counts() == (1, 1), "the thread to idle")
    second, name = _run_and_wait(pool, "turn-2")
    assert (second, name) == (first, "turn-2")
    assert pool.counts()[0] == 1


def test_no_job_waits_for_a_thread_and_the_threads_are_those_in_flight() -> None:
    """Every job runs at once however many are in flight (a turn holds its threads
    for its host's whole run); afterwards the same threads serve the next ones."""
    pool = WorkerThreads("idle", idle_seconds=WAIT_S)
    jobs = 64
    together = threading.Barrier(jobs + 1, timeout=WAIT_S)
    idents: set[int] = set()

    def job() -> None:
        idents.add(threading.get_ident())
        together.wait()  # breaks (and fails the test) unless all run at the same time

    for i in range(jobs):
        pool.run(job, f"turn-{i}")
    together.wait()
    assert len(idents) == jobs
    _until(lambda: pool.counts() == (jobs, jobs), "every thread to idle")
    again = threading.Barrier(jobs + 1, timeout=WAIT_S)
    reused: set[int] = set()

    def next_job() -> None:
        reused.add(threading.get_ident())
        again.wait()

    for i in range(jobs):
        pool.run(next_job, f"turn-{jobs + i}")
    again.wait()
    assert reused == idents
    assert pool.counts()[0] == jobs


def test_an_idle_thread_ends_after_its_idle_time() -> None:
    pool = WorkerThreads("idle", idle_seconds=0.05)
    ident, _ = _run_and_wait(pool)
    _until(lambda: pool.counts() == (0, 0), "the idle thread to end")
    _until(lambda: all(t.ident != ident for t in threading.enumerate()), "the thread to exit")
    # The next job gets a new thread.
    _run_and_wait(pool)
    assert pool.counts()[0] == 1


def test_a_job_handed_over_as_the_idle_time_ends_still_runs() -> None:
    """Jobs handed over right around the idle timeout: none is lost, none hangs."""
    pool = WorkerThreads("idle", idle_seconds=0.001)
    for _ in range(200):
        _run_and_wait(pool)
        time.sleep(0.001)
    _until(lambda: pool.counts() == (0, 0), "the threads to end")


def test_an_escaping_error_reaches_threadings_hook_and_the_pool_serves_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job's error that escapes it is a bug: it goes to ``threading.excepthook`` as
    from a thread of its own (never swallowed), that thread leaves the pool, and the
    next job still runs at once."""
    pool = WorkerThreads("idle", idle_seconds=WAIT_S)
    hooked: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", hooked.append)

    def broken() -> None:
        raise RuntimeError("a bug in a job")

    pool.run(broken, "turn-broken")
    _until(lambda: len(hooked) == 1 and pool.counts() == (0, 0), "the thread to end")
    assert isinstance(hooked[0].exc_value, RuntimeError)
    assert str(hooked[0].exc_value) == "a bug in a job"
    assert hooked[0].thread is not None and hooked[0].thread.name == "turn-broken"
    _run_and_wait(pool)
    assert pool.counts()[0] == 1
