"""LangGraph checkpointers side by side: turnkeeper's saver beside LangGraph's own.

Run ``python -m benchmarks.langgraph_saver_bench`` (``--quick``: 200 steps;
``--smoke`` for the tests; ``--json``; ``--database-url`` the PostgreSQL server,
``--no-postgres`` to leave it out). Needs the ``bench`` extra.

One growing conversation, 1,000 steps (a step: one ``graph.invoke`` with the user's
message, ``durability="sync"``, answered by a one-node graph whose state accumulates
the messages with ``operator.add``, benchmarks/_lg_graphs.py), run at once on four
checkpointers, each on a fresh database of its own:

* ``TurnkeeperSaver`` on SQLite and on PostgreSQL (turnkeeper.integrations.langgraph);
* LangGraph's ``SqliteSaver`` (``PRAGMA synchronous = FULL``, as turnkeeper's store
  commits) and ``PostgresSaver``.

Each step runs on every saver, the order rotating every step so machine noise hits
all alike. Reported: the median time per step (the whole run, its first and last
tenth) and the bytes the database grew by per step (SQLite: the file after
``PRAGMA wal_checkpoint(TRUNCATE)``; PostgreSQL: ``pg_database_size``), in the first
and the last tenth of the run and over all of it.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from rich.console import Console
from rich.table import Table

from benchmarks._common import (
    Say,
    add_columns,
    announce_machine,
    benchmark_arguments,
    chosen_settings,
    load_average,
    print_results,
    progress_printer,
    render_machine,
    scratch_dir,
)

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
CONNECT_TIMEOUT_S = 5
# An agent's reply and a user's message of realistic length.
REPLY = (
    "Read the failing test and the parser it exercises; the tokenizer dropped a trailing "
    "escape. Patched it, added a regression test, ran the suite: 412 passed. Next: the "
    "error message for unterminated strings still points one column too far right."
)
USER = "Step {n}: carry on with the parser; say what you changed and what is left to do."


@dataclass(frozen=True)
class Settings:
    steps: int
    marks: int = 10  # the run in tenths: early and late are the first and last


FULL = Settings(steps=1_000)
QUICK = Settings(steps=200)
SMOKE = Settings(steps=12, marks=3)


class Candidate:
    """One checkpointer, its graph and how big its database is."""

    def __init__(
        self, name: str, saver: Any, size: Callable[[], int], close: Callable[[], None]
    ) -> None:
        from benchmarks._lg_graphs import conversation_graph

        self.name = name
        self.graph = conversation_graph(saver, REPLY)
        self.size = size
        self.close = close
        self.config = {"configurable": {"thread_id": "conversation-1"}}
        self.times: list[float] = []
        self.sizes: list[int] = []  # at the start, then at every mark

    def step(self, n: int) -> None:
        message = {"role": "user", "content": USER.format(n=n)}
        started = time.perf_counter()
        self.graph.invoke({"messages": [message]}, self.config, durability="sync")
        self.times.append(time.perf_counter() - started)

    def messages(self) -> int:
        return len(self.graph.get_state(self.config).values["messages"])


def _libpq(url: str) -> str:
    """A URL as libpq spells it (SQLAlchemy's ``postgresql+psycopg://`` too)."""
    scheme, rest = url.split("://", 1)
    return "postgresql://" + rest if scheme.startswith("postgresql") else url


def _admin(server: str) -> Any:
    import psycopg

    return psycopg.connect(_libpq(server), autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)


def _create_database(server: str, name: str) -> str:
    """A new database on ``server``; its URL."""
    from psycopg import sql

    with _admin(server) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    parts = urlsplit(server)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))


def _drop_database(server: str, name: str) -> None:
    from psycopg import sql

    with _admin(server) as conn:
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        conn.execute(drop.format(sql.Identifier(name)))


def _sqlite_size(path: Path) -> Callable[[], int]:
    def size() -> int:
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        wal = Path(f"{path}-wal")
        return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)

    return size


def _pg_size(server: str, name: str) -> Callable[[], int]:
    def size() -> int:
        with _admin(server) as conn:
            row = conn.execute("SELECT pg_database_size(%s)", (name,)).fetchone()
        assert row is not None
        return int(row[0])

    return size


def turnkeeper_sqlite(work: Path) -> Candidate:
    from turnkeeper.integrations.langgraph import TurnkeeperSaver

    path = work / "turnkeeper.db"
    saver = TurnkeeperSaver.from_url(path)
    return Candidate("turnkeeper, SQLite", saver, _sqlite_size(path), saver.close)


def langgraph_sqlite(work: Path) -> Candidate:
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = work / "langgraph.db"
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA synchronous = FULL")  # SqliteSaver itself switches to WAL
    saver = SqliteSaver(conn)
    saver.setup()
    return Candidate("LangGraph SqliteSaver", saver, _sqlite_size(path), conn.close)


def turnkeeper_postgres(server: str, name: str) -> Candidate:
    from turnkeeper.integrations.langgraph import TurnkeeperSaver

    saver = TurnkeeperSaver.from_url(_create_database(server, name))
    return Candidate("turnkeeper, PostgreSQL", saver, _pg_size(server, name), saver.close)


def langgraph_postgres(server: str, name: str) -> Candidate:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    url = _create_database(server, name)
    conn = psycopg.connect(_libpq(url), autocommit=True, prepare_threshold=0, row_factory=dict_row)
    saver = PostgresSaver(conn)
    saver.setup()
    return Candidate("LangGraph PostgresSaver", saver, _pg_size(server, name), conn.close)


@dataclass
class Row:
    name: str
    steps: int
    median_ms: float
    early_median_ms: float
    late_median_ms: float
    bytes_per_step: float
    early_bytes_per_step: float
    late_bytes_per_step: float
    messages: int


@dataclass
class Results:
    settings: dict[str, int]
    rows: list[Row]
    versions: dict[str, str]
    machine: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def _row(candidate: Candidate, settings: Settings) -> Row:
    tenth = max(1, settings.steps // settings.marks)
    sizes = candidate.sizes
    per_mark = [(b - a) / tenth for a, b in itertools.pairwise(sizes)]
    return Row(
        name=candidate.name,
        steps=settings.steps,
        median_ms=statistics.median(candidate.times) * 1e3,
        early_median_ms=statistics.median(candidate.times[:tenth]) * 1e3,
        late_median_ms=statistics.median(candidate.times[-tenth:]) * 1e3,
        bytes_per_step=(sizes[-1] - sizes[0]) / settings.steps,
        early_bytes_per_step=per_mark[0],
        late_bytes_per_step=per_mark[-1],
        messages=candidate.messages(),
    )


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    packages = ("langgraph", "langgraph-checkpoint")
    extra = ("langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres")
    return {p: version(p) for p in (*packages, *extra)}


def run(settings: Settings, say: Say, server: str | None = DEFAULT_URL) -> Results:
    with scratch_dir("lg-saver-bench-") as work:
        info = announce_machine(work, say)
        prefix = f"tk_lgbench_{uuid.uuid4().hex[:8]}"
        candidates = [turnkeeper_sqlite(work), langgraph_sqlite(work)]
        skipped: dict[str, str] = {}
        created: list[str] = []
        try:
            if server is None:
                skipped["PostgreSQL"] = "--no-postgres"
            else:
                for make, suffix in ((turnkeeper_postgres, "tk"), (langgraph_postgres, "lg")):
                    created.append(f"{prefix}_{suffix}")
                    candidates.append(make(server, created[-1]))
            rows = _measure(candidates, settings, say)
        finally:
            for candidate in candidates:
                candidate.close()
            for name in created:
                assert server is not None
                _drop_database(server, name)
        info["loadavg_end"] = load_average()
    return Results(
        settings={"steps": settings.steps, "marks": settings.marks},
        rows=rows,
        versions=_versions(),
        machine=info,
        skipped=skipped,
    )


def _measure(candidates: list[Candidate], settings: Settings, say: Say) -> list[Row]:
    tenth = max(1, settings.steps // settings.marks)
    for candidate in candidates:
        candidate.sizes.append(candidate.size())
    for n in range(settings.steps):
        shift = n % len(candidates)
        for candidate in candidates[shift:] + candidates[:shift]:
            candidate.step(n)
        if (n + 1) % tenth == 0:
            for candidate in candidates:
                candidate.sizes.append(candidate.size())
            say(f"step {n + 1:,}/{settings.steps:,}")
    return [_row(candidate, settings) for candidate in candidates]


def _kib(n: float) -> str:
    return f"{n / 1024:,.1f} KiB"


def render(res: Results, console: Console) -> None:
    table = Table(title=f"One conversation, {res.settings['steps']:,} steps, each saver")
    add_columns(
        table, "saver", "ms/step (median)", "first tenth", "last tenth",
        "bytes/step", "first tenth", "last tenth", "messages",
    )  # fmt: skip
    for r in res.rows:
        table.add_row(
            r.name, f"{r.median_ms:.2f}", f"{r.early_median_ms:.2f}", f"{r.late_median_ms:.2f}",
            _kib(r.bytes_per_step), _kib(r.early_bytes_per_step), _kib(r.late_bytes_per_step),
            f"{r.messages:,}",
        )  # fmt: skip
    console.print(table)
    for what, why in res.skipped.items():
        console.print(f"{what}: skipped ({why})")
    console.print("versions: " + ", ".join(f"{k} {v}" for k, v in res.versions.items()))
    render_machine(res.machine, console)


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_arguments(__doc__, "200 steps instead of 1,000")
    parser.add_argument("--database-url", default=os.environ.get("TURNKEEPER_BENCH_PG_URL"))
    parser.add_argument("--no-postgres", action="store_true", help="SQLite savers only")
    args = parser.parse_args(argv)
    server = None if args.no_postgres else (args.database_url or DEFAULT_URL)
    res = run(chosen_settings(args, FULL, QUICK, SMOKE), progress_printer(args.json), server)
    print_results(res, args.json, render)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
