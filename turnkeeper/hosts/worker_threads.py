"""Threads that outlive their job: a turn's helper threads, reused from turn to turn.

Each turn needs two threads for as long as its host runs — the one serving the host
process (hosts/subprocess_host.py) and the one feeding its events to the pump
(runtime/turn/event_pump.py). Starting two new threads a turn (the OS thread, its
start handshake, threading's bookkeeping) was about a tenth of the controller's CPU
on a short turn. A :class:`WorkerThreads` hands a job to a thread that finished its
last one instead, and starts a thread only when none is idle.

It never makes a job wait for a thread: a turn holds its threads for the whole host
run (hours, for an agent), and hundreds of sessions run at once, so a fixed number
of threads smaller than what the turns in flight hold would stall every turn past
it. The threads are bounded by the jobs running at once (the most turns in flight,
times two) and an idle thread ends after ``idle_seconds`` without a job, so a fleet
that shrinks gives its threads back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

# How long a thread without a job waits for the next before it ends.
IDLE_SECONDS: Final = 10.0

Job = Callable[[], None]


class _Worker:
    """One thread and the slot its next job is handed through."""

    def __init__(self, pool: WorkerThreads, job: Job, name: str) -> None:
        self._pool = pool
        self._job: Job | None = job
        self._name = name
        # Held while there is no job: the one handing a job over releases it.
        self._wake = threading.Lock()
        self._wake.acquire()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def give(self, job: Job, name: str) -> None:
        """Hand ``job`` to this (idle, just taken from the pool) worker."""
        self._job, self._name = job, name
        self._wake.release()

    def _take_job(self) -> Job | None:
        job, self._job = self._job, None
        return job

    def _run(self) -> None:
        # One job an iteration; the loop ends when the pool keeps the thread idle for
        # ``idle_seconds`` with no job handed over (park returns False).
        job = self._take_job()
        while job is not None:
            self.thread.name = self._name  # the turn's name, while it serves the turn
            try:
                job()
            except BaseException:
                # A job hands its own errors to whoever waits on it (the pump, the
                # run's outcome): one that escapes is a bug. The thread leaves the
                # pool and the error goes on to threading's excepthook, as from a
                # thread started for the job alone.
                self._pool.thread_failed()
                raise
            self.thread.name = self._pool.idle_name
            job = self._take_job() if self._pool.park(self) else None

    def wait_for_job(self, timeout: float | None) -> bool:
        """Wait for :meth:`give` (at most ``timeout`` seconds; None: however long)."""
        return self._wake.acquire(timeout=-1 if timeout is None else timeout)


class WorkerThreads:
    """Runs each job at once on a thread of its own: an idle one if there is one."""

    def __init__(self, idle_name: str, idle_seconds: float = IDLE_SECONDS) -> None:
        self.idle_name = idle_name
        self._idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []  # the most recently idle last: it is taken first
        self._threads = 0  # alive: running a job or idle

    def run(self, job: Job, name: str) -> None:
        """Start ``job`` now, on a thread named ``name`` while it runs."""
        with self._lock:
            worker = self._idle.pop() if self._idle else None
            if worker is None:
                self._threads += 1
        if worker is not None:
            worker.give(job, name)
            return
        worker = _Worker(self, job, name)
        try:
            worker.thread.start()
        except BaseException:
            with self._lock:
                self._threads -= 1
            raise

    def park(self, worker: _Worker) -> bool:
        """Keep ``worker`` idle until a job was handed to it (True) or its idle time
        ended (False: its thread ends). Called by the worker's own thread."""
        with self._lock:
            self._idle.append(worker)
        if worker.wait_for_job(self._idle_seconds):
            return True
        with self._lock:
            if worker in self._idle:
                self._idle.remove(worker)
                self._threads -= 1
                return False
        # ``run`` took the worker from the pool as the wait ended: its job is being
        # handed over, so this wait is short.
        return worker.wait_for_job(None)

    def thread_failed(self) -> None:
        """A worker's thread ends with its job's error (it was running, so not idle)."""
        with self._lock:
            self._threads -= 1

    def counts(self) -> tuple[int, int]:
        """(threads alive, of them idle) now."""
        with self._lock:
            return self._threads, len(self._idle)


# The turns' helper threads, shared by every turn of the process.
TURN_THREADS: Final = WorkerThreads("turnkeeper-idle")
