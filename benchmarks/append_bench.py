"""Append benchmark: one durable append against one bare fsync'd SQLite commit.

Run ``python -m benchmarks.append_bench`` (``--quick`` for a smoke run,
``--json`` for machine-readable output). Everything runs on the project's own
disk (a temp dir under ``.cache/``), never tmpfs, in one process run:

(a) a bare commit of one insert through plain ``sqlite3`` (WAL, synchronous=FULL);
(b) one ``SqlEventStore.append`` (one event + the projection update), durable;
(b2) one ``SqlEventStore.append_many`` over two streams (one event each), durable:
    the shape of a turn's commit (goal stream + session stream);
    (a), (b) and (b2) rotate in rounds so machine noise hits them alike;
(c) appends per second with 1, 4 and 16 sessions (threads) in one process,
    sharing commits through group commit, and with 2 processes of one session each.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sqlite3
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import (
    filesystem_of,
    print_results,
    progress_printer,
    scratch_dir,
    timed,
)
from turnkeeper.store import NewEvent, SqlEventStore, StreamAppend, open_store

PAYLOAD = json.dumps({"type": "host.item", "text": "x" * 160, "n": 0})
STATE = json.dumps({"turns": 0, "status": "running", "note": "y" * 60})


@dataclass
class Settings:
    rounds: int
    ops_per_round: int
    seconds: float  # per throughput measurement
    sessions: tuple[int, ...] = (1, 4, 16)


@dataclass
class Results:
    directory: str
    filesystem: str
    tmp_filesystem: str
    bare_commit_us: float = 0.0
    append_us: float = 0.0
    ratio: float = 0.0
    append_many_us: float = 0.0
    many_ratio: float = 0.0
    round_ratios: list[float] = field(default_factory=list)
    many_round_ratios: list[float] = field(default_factory=list)
    thread_rates: dict[int, float] = field(default_factory=dict)
    thread_batch: dict[int, float] = field(default_factory=dict)
    process_rate: float = 0.0


# -- (a) and (b) -----------------------------------------------------------------------


def _bare_connection(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    return conn


def measure_latency(directory: Path, settings: Settings, say: Callable[[str], None]) -> Results:
    res = Results(str(directory), filesystem_of(directory), filesystem_of(Path("/tmp")))
    bare = _bare_connection(directory / "bare.db")
    cur = bare.cursor()
    store = open_store(directory / "store.db")
    head = 0
    event = [NewEvent(type="host.item", schema_version=1, payload=PAYLOAD)]

    def bare_commit() -> None:
        cur.execute("BEGIN")
        cur.execute("INSERT INTO t (v) VALUES (?)", (PAYLOAD,))
        cur.execute("COMMIT")

    def append() -> None:
        nonlocal head
        head = store.append("bench-latency", "session", head, event, STATE, 1)

    pair = [0, 0]

    def append_many() -> None:
        pair[:] = store.append_many(
            [
                StreamAppend(
                    stream_id=f"bench-many-{i}",
                    kind="session",
                    expected_seq=pair[i],
                    events=event,
                    projection_state=STATE,
                    projection_schema_version=1,
                )
                for i in (0, 1)
            ]
        )

    ops = [bare_commit, append, append_many]
    for warm in ops:  # first commits create pages and WAL
        timed(warm, 50)
    samples: dict[Callable[[], None], list[float]] = {op: [] for op in ops}
    for r in range(settings.rounds):
        order = ops[r % 3 :] + ops[: r % 3]
        if r % 2:
            order.reverse()
        now = {op: timed(op, settings.ops_per_round) for op in order}
        for op in ops:
            samples[op] += now[op]
        a, b, m = (statistics.median(now[op]) for op in ops)
        res.round_ratios.append(b / a)
        res.many_round_ratios.append(m / a)
        say(
            f"  round {r + 1}/{settings.rounds}: bare {a:6.1f} us, "
            f"append {b:6.1f} ({b / a:.2f}), many {m:6.1f} ({m / a:.2f})"
        )
    store.close()
    bare.close()
    res.bare_commit_us = statistics.median(samples[bare_commit])
    res.append_us = statistics.median(samples[append])
    res.ratio = res.append_us / res.bare_commit_us
    res.append_many_us = statistics.median(samples[append_many])
    res.many_ratio = res.append_many_us / res.bare_commit_us
    return res


# -- (c) -------------------------------------------------------------------------------


def _session_loop(store: SqlEventStore, stream: str, stop: threading.Event) -> int:
    event = [NewEvent(type="host.item", schema_version=1, payload=PAYLOAD)]
    head = store.head(stream)
    n = 0
    while not stop.is_set():
        head = store.append(stream, "session", head, event, STATE, 1)
        n += 1
    return n


def measure_threads(path: Path, sessions: int, seconds: float) -> tuple[float, float]:
    """Appends/s with ``sessions`` threads sharing one store, and the mean batch size."""
    store = open_store(path)
    stop = threading.Event()
    counts = [0] * sessions
    start = threading.Barrier(sessions + 1)

    def run(i: int) -> None:
        start.wait()
        counts[i] = _session_loop(store, f"bench-t{sessions}-{i}", stop)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    commits0, reqs0 = store.writer.commits, store.writer.committed_requests
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    commits = store.writer.commits - commits0
    reqs = store.writer.committed_requests - reqs0
    store.close()
    return sum(counts) / elapsed, reqs / max(commits, 1)


def _process_worker(path: str, stream: str, seconds: float, barrier: Any, out: Any) -> None:
    store = open_store(path)
    store.head(stream)  # warm the read pool before the clock starts
    barrier.wait()
    stop = threading.Event()
    timer = threading.Timer(seconds, stop.set)
    t0 = time.perf_counter()
    timer.start()
    n = _session_loop(store, stream, stop)
    out.put((n, time.perf_counter() - t0))
    store.close()


def measure_processes(path: Path, processes: int, seconds: float) -> float:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(processes)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_process_worker, args=(str(path), f"bench-p-{i}", seconds, barrier, out))
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    results: list[tuple[int, float]] = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return sum(n for n, _ in results) / max(elapsed for _, elapsed in results)


# -- driver ----------------------------------------------------------------------------


def run(settings: Settings, say: Callable[[str], None]) -> Results:
    with scratch_dir("append-bench-") as directory:
        say(
            f"working in {directory} ({filesystem_of(directory)}; /tmp is "
            f"{filesystem_of(Path('/tmp'))})"
        )
        say(f"(a)/(b) latency: {settings.rounds} rounds x {settings.ops_per_round} ops each")
        res = measure_latency(directory, settings, say)
        for n in settings.sessions:
            say(f"(c) {n} session(s) in one process for {settings.seconds:.1f} s ...")
            rate, batch = measure_threads(directory / f"threads-{n}.db", n, settings.seconds)
            res.thread_rates[n], res.thread_batch[n] = rate, batch
            say(f"    {rate:,.0f} appends/s, {batch:.1f} appends per commit")
        say(f"(c) 2 processes x 1 session for {settings.seconds:.1f} s ...")
        res.process_rate = measure_processes(directory / "procs.db", 2, settings.seconds)
        say(f"    {res.process_rate:,.0f} appends/s")
        return res


def render(res: Results, console: Console) -> None:
    table = Table(title="turnkeeper append benchmark (medians)")
    table.add_column("measurement")
    table.add_column("value", justify="right")
    table.add_column("vs baseline", justify="right")
    table.add_column("target", justify="right")
    table.add_row(
        "(a) bare fsync'd sqlite3 commit, 1 insert", f"{res.bare_commit_us:.1f} us", "1.00x", ""
    )
    table.add_row(
        "(b) SqlEventStore.append (event + projection)",
        f"{res.append_us:.1f} us",
        f"{res.ratio:.2f}x",
        "<= 1.30x",
    )
    table.add_row(
        "    b/a, median of per-round ratios", "", f"{statistics.median(res.round_ratios):.2f}x", ""
    )
    table.add_row(
        "(b2) SqlEventStore.append_many, 2 streams x 1 event",
        f"{res.append_many_us:.1f} us",
        f"{res.many_ratio:.2f}x",
        "< 2 x (b)",
    )
    table.add_row(
        "    b2/a, median of per-round ratios",
        "",
        f"{statistics.median(res.many_round_ratios):.2f}x",
        "",
    )
    base = res.thread_rates.get(1, 0.0) or 1.0
    for n, rate in res.thread_rates.items():
        table.add_row(
            f"(c) {n} session(s), threads of one process ({res.thread_batch[n]:.1f}/commit)",
            f"{rate:,.0f} /s",
            f"{rate / base:.2f}x",
            "several x" if n > 1 else "",
        )
    table.add_row(
        "(c) 2 processes x 1 session",
        f"{res.process_rate:,.0f} /s",
        f"{res.process_rate / base:.2f}x",
        "",
    )
    console.print(table)
    console.print(f"disk: {res.directory} on {res.filesystem} (/tmp: {res.tmp_filesystem})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a few-second smoke run")
    parser.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    args = parser.parse_args(argv)
    settings = Settings(rounds=10, ops_per_round=300, seconds=4.0)
    if args.quick:
        settings = Settings(rounds=2, ops_per_round=40, seconds=0.4)
    res = run(settings, progress_printer(to_stderr=args.json))
    print_results(res, args.json, render)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
