"""What the PostgreSQL benchmark measures in process, all on one server in one run.

* :class:`BareInsert` — the floor: plain psycopg, one prepared ``INSERT`` of a row
  shaped like an event row, then ``COMMIT`` (``synchronous_commit`` as the server
  has it: on by default, so the commit waits for the WAL flush).
* :class:`PgTurn` — turnkeeper's turn, as ``turn_bench`` runs it (``TurnLoop``: load,
  plan, ``TurnDriver.run_turn`` with the in-process no-op host), on a store opened
  with ``open_store("postgresql://...")``.
* :class:`StoreAppend` — one durable ``SqlEventStore.append`` (one event and its
  projection), the store's part of a turn alone.
* :class:`PgDbosStep` — ``peers.DbosStep`` with its system database on the server.
* :class:`WireCounter` — statements and round trips per turn, counted on psycopg's
  classes while it is active.

Databases: :func:`create_database` / :func:`drop_database` on the server's
maintenance URL; every database the benchmark makes carries its run's prefix.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from benchmarks._common import CommitCounter, TurnLoop, git_workspace, timed
from benchmarks.peers import DbosStep, _dbos_functions, _loop_samples
from turnkeeper.store import NewEvent, SqlEventStore, open_store

CONNECT_TIMEOUT_S = 5
PAYLOAD = json.dumps({"type": "host.item", "text": "x" * 160, "n": 0})
STATE = json.dumps({"turns": 0, "status": "running", "note": "y" * 60})
CHECKSUM = "0" * 64


def database_url(server: str, name: str) -> str:
    """``server`` (any database on it) pointed at the database ``name``."""
    parts = urlsplit(server)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))


def libpq(url: str) -> str:
    """A URL as libpq spells it (SQLAlchemy's ``postgresql+psycopg://`` too)."""
    scheme, rest = url.split("://", 1)
    return "postgresql://" + rest if scheme.startswith("postgresql") else url


def admin(server: str) -> psycopg.Connection[Any]:
    return psycopg.connect(libpq(server), autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)


def create_database(server: str, name: str) -> str:
    with admin(server) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return database_url(server, name)


def drop_database(server: str, name: str) -> None:
    """Drop ``name``; FORCE ends any connection a killed child process left behind."""
    with admin(server) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def server_version(server: str) -> str:
    with admin(server) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        return str(row[0]) if row else "unknown"


def server_settings(server: str) -> dict[str, str]:
    """The settings that decide what a commit costs."""
    names = ("synchronous_commit", "fsync", "wal_sync_method", "commit_delay", "shared_buffers")
    out: dict[str, str] = {}
    with admin(server) as conn:
        for n in names:
            row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(n))).fetchone()
            out[n] = str(row[0]) if row else "unknown"
    return out


# -- the floor -------------------------------------------------------------------------


class BareInsert:
    """One prepared INSERT of an event-shaped row and its COMMIT: two round trips."""

    name = "bare committed insert (psycopg, prepared INSERT + COMMIT)"

    def __init__(self, url: str) -> None:
        self._conn = psycopg.connect(libpq(url), connect_timeout=CONNECT_TIMEOUT_S)
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS bare_events (stream_id text, seq bigint, type text,"
            " schema_version integer, payload text, recorded_at bigint, checksum text,"
            " PRIMARY KEY (stream_id, seq))"
        )
        self._conn.commit()
        self._seq = 0

    def _commit(self) -> None:
        self._seq += 1
        row = ("bare", self._seq, "host.item", 1, PAYLOAD, time.time_ns() // 1000, CHECKSUM)
        self._conn.execute(
            "INSERT INTO bare_events VALUES (%s, %s, %s, %s, %s, %s, %s)", row, prepare=True
        )
        self._conn.commit()

    def samples(self, n: int) -> list[float]:
        return timed(self._commit, n)

    def close(self) -> None:
        self._conn.close()


# -- turnkeeper ------------------------------------------------------------------------


class PgTurn:
    """``turn_bench``'s turn on a PostgreSQL store; also its process CPU per turn."""

    name = "turnkeeper turn (PostgreSQL store)"

    def __init__(self, url: str, directory: Path, key: str, git: bool) -> None:
        # A store of its own, so its commits are this turn's alone.
        self.store = open_store(url)
        workspace = directory / f"{key}-workspace"
        if git:
            git_workspace(workspace)
        else:
            workspace.mkdir()
        self.loop = TurnLoop(self.store, workspace, key)
        self.counter = CommitCounter(self.store)
        self.cpu_s = 0.0
        self.turns = 0

    def samples(self, n: int) -> list[float]:
        cpu0 = time.process_time()
        out = timed(self.loop.step, n)
        self.cpu_s += time.process_time() - cpu0
        self.turns += n
        return out

    def close(self) -> None:
        self.loop.release()
        self.store.close()


class StoreAppend:
    """One durable ``append``: one event and the stream's projection, one commit."""

    name = "SqlEventStore.append (PostgreSQL)"

    def __init__(self, url: str) -> None:
        self._store = open_store(url)
        self._head = 0
        self._event = [NewEvent(type="host.item", schema_version=1, payload=PAYLOAD)]

    def _append(self) -> None:
        self._head = self._store.append(
            "bench-append", "session", self._head, self._event, STATE, 1
        )

    def samples(self, n: int) -> list[float]:
        return timed(self._append, n)

    def close(self) -> None:
        self._store.close()


class PgDbosStep(DbosStep):
    """``@DBOS.step`` inside a long-running ``@DBOS.workflow``, system database on the
    PostgreSQL server (DBOS's ``dbos`` schema in a database of its own)."""

    name = "DBOS step (@DBOS.step in a @DBOS.workflow, PostgreSQL system database)"

    def __init__(self, url: str) -> None:
        # Not the parent's __init__: that one sets up a SQLite system database.
        from dbos import DBOS

        _dbos_functions()  # registered before launch, as DBOS wants
        DBOS(
            config={
                "name": "turnkeeper-pg-bench",
                "system_database_url": url,
                "log_level": "WARNING",
            }
        )
        DBOS.launch()

    def samples(self, n: int) -> list[float]:
        return _loop_samples(n, intent=False)


# -- what a turn sends -----------------------------------------------------------------


class WireCounter:
    """Counts, while :meth:`active`, every statement psycopg is asked to run (by its
    first word; ``;`` is the connection pool's liveness ping), the rows of each
    ``executemany``, and ``Connection.wait`` calls — each is one exchange with the
    server the calling thread blocks on, so about one round trip."""

    def __init__(self) -> None:
        self.statements: Counter[str] = Counter()
        self.batch_rows = 0
        self.waits = 0

    @contextmanager
    def active(self) -> Iterator[None]:
        cursor, conn = psycopg.Cursor, psycopg.Connection
        execute, executemany, wait = cursor.execute, cursor.executemany, conn.wait

        def counted_execute(cur: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            self.statements[_first_word(query)] += 1
            return execute(cur, query, *args, **kwargs)

        def counted_executemany(cur: Any, query: Any, params: Any, *args: Any, **kw: Any) -> Any:
            rows = list(params)
            self.statements[_first_word(query) + " (executemany)"] += 1
            self.batch_rows += len(rows)
            return executemany(cur, query, rows, *args, **kw)

        def counted_wait(connection: Any, *args: Any, **kwargs: Any) -> Any:
            self.waits += 1
            return wait(connection, *args, **kwargs)

        cursor.execute = counted_execute  # type: ignore[assignment,method-assign]
        cursor.executemany = counted_executemany  # type: ignore[assignment,method-assign]
        conn.wait = counted_wait  # type: ignore[assignment,method-assign]
        try:
            yield
        finally:
            cursor.execute, cursor.executemany = execute, executemany  # type: ignore[method-assign]
            conn.wait = wait  # type: ignore[method-assign]


def _first_word(query: Any) -> str:
    text = query if isinstance(query, str) else str(getattr(query, "_obj", query))
    words = text.strip().split()
    return words[0].upper() if words else "(empty)"


def count_wire(loop: TurnLoop, store: SqlEventStore, turns: int) -> dict[str, Any]:
    """``turns`` more turns of ``loop`` with the wire counted: per turn, the statements
    by kind, the rows sent in batches, psycopg's waits (≈ round trips), the commits."""
    counter = WireCounter()
    commits = CommitCounter(store)
    with counter.active():
        for _ in range(turns):
            loop.step()
    per = {k: v / turns for k, v in sorted(counter.statements.items(), key=lambda kv: -kv[1])}
    return {
        "turns": turns,
        "statements_per_turn": per,
        "statements_total_per_turn": sum(per.values()),
        "batched_rows_per_turn": counter.batch_rows / turns,
        "round_trips_per_turn": counter.waits / turns,
        "commits_per_turn": commits.total / turns,
        "durable_commits_per_turn": commits.durable / turns,
    }
