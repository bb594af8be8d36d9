"""What the PostgreSQL benchmark measures in process, all on one server in one run.

* :class:`BareInsert` — the floor: plain psycopg, one prepared ``INSERT`` of a row
  shaped like an event row, then ``COMMIT`` (``synchronous_commit`` as the server
  has it: on by default, so the commit waits for the WAL flush).
* :class:`PgTurn` — turnkeeper's turn as a worker runs it (``TurnLoop``'s load and
  plan, with the session, goal and settings heads confirmed by one read as the
  controller's step confirms them, then ``TurnDriver.run_turn`` with the in-process
  no-op host), on a store opened with ``open_store("postgresql://...")``.
* :class:`StoreAppend` — one durable ``SqlEventStore.append`` (one event and its
  projection), the store's part of a turn alone.
* :class:`PgDbosStep` — ``peers.DbosStep`` with its system database on the server;
  :class:`PgDbosTurn` — DBOS at the turn's durability: an intent step and a result
  step, two commits.
* :func:`server_commits` — the server's own count of a database's committed
  transactions (``pg_stat_database.xact_commit``).

Databases: :func:`create_database` / :func:`drop_database` on the server's
maintenance URL; every database the benchmark makes carries its run's prefix.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from benchmarks._common import CommitCounter, TurnLoop, git_workspace, timed
from benchmarks.peers import DbosStep, _dbos_functions, _loop_samples
from turnkeeper.kernel.session import NextTurn, plan_next_turn
from turnkeeper.runtime.log.streams import heads_read_together
from turnkeeper.runtime.services.extension_settings import EXTENSIONS_STREAM
from turnkeeper.runtime.services.goals import goal_stream
from turnkeeper.runtime.services.sessions import session_stream
from turnkeeper.runtime.turn.planning import goal_view
from turnkeeper.store import NewEvent, open_store

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
        self.streams = [
            session_stream(self.loop.session_id),
            EXTENSIONS_STREAM,
            goal_stream(self.loop.goal_id),
        ]
        self.counter = CommitCounter(self.store)
        self.cpu_s = 0.0
        self.turns = 0

    def step(self) -> None:
        """One worker turn: load and plan with the heads read together, as the
        controller's step does (controller.py), then run it."""
        loop = self.loop
        ctl, sid = loop.controller, loop.session_id
        with heads_read_together(self.store, self.streams):
            session = ctl.sessions.load(sid)
            now = ctl.sessions.now()
            goal = ctl.goals.load(session.goal_id)
            plan = plan_next_turn(session, goal_view(goal, session, now), now)
        if not isinstance(plan, NextTurn):
            raise RuntimeError(f"session {sid} stopped: {plan}")
        result = ctl.driver.run_turn(session, plan, goal)
        if not result.succeeded:
            raise RuntimeError(f"turn {result.turn_id} failed: {result.outcome}")
        loop.turns += 1

    def samples(self, n: int) -> list[float]:
        cpu0 = time.process_time()
        out = timed(self.step, n)
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


class PgDbosTurn:
    """DBOS at a turn's durability, on the DBOS a :class:`PgDbosStep` launched: an
    intent step and a result step in the long workflow, each one commit."""

    name = "DBOS turn: intent step + result step in a long workflow (PostgreSQL)"

    def samples(self, n: int) -> list[float]:
        return _loop_samples(n, intent=True)

    def close(self) -> None:
        """Nothing of its own: the step's DBOS is closed with the step."""


# -- what the server counted ---------------------------------------------------------

# A backend reports its statistics when idle, at most once a second (PostgreSQL 15's
# PGSTAT_MIN_INTERVAL): waited for before each read of them.
STATS_SETTLE_S = 1.5


def server_commits(server: str, name: str) -> int:
    """Transactions committed in database ``name``, as the server counts them (every
    statement run outside a transaction is one too), once its backends reported."""
    time.sleep(STATS_SETTLE_S)
    with admin(server) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (name,)
        ).fetchone()
    return int(row[0]) if row else 0
