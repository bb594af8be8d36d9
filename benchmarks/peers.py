"""The peers turnkeeper is measured against, all on the same disk in the same run.

* :class:`BareCommit` — the floor: plain ``sqlite3``, WAL, ``synchronous=FULL``,
  one insert, one fsync'd commit.
* :class:`DbosStep` — one ``@DBOS.step`` inside a long-running ``@DBOS.workflow``
  (DBOS Transact, SQLite system database): it records only its output, one commit.
* :class:`DbosTurn` — a turn at turnkeeper's durability on DBOS: an intent step
  before the host, a result step after, in a long-running workflow or as a workflow
  of its own per turn.
* :class:`LangGraphNode` — a one-node graph invoked once per turn on the same
  thread id, checkpointed by ``SqliteSaver`` with ``durability="sync"``: as its users
  run a turn, its input checkpointed before the node runs and its output after.
* :class:`LangGraphConversation` — the same conversation turnkeeper's storage
  benchmark runs, as a graph whose state accumulates the messages, to measure how
  its checkpoints grow.

The peers come from the ``bench`` extra (``pip install -e '.[bench]'``);
:func:`missing_peers` says which are absent and why, so a caller can skip them
visibly.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from benchmarks._common import timed

PAYLOAD = json.dumps({"type": "host.item", "text": "x" * 160, "n": 0})

PEER_PACKAGES = {
    "dbos": ("dbos",),
    "langgraph": ("langgraph", "langgraph.checkpoint.sqlite"),
}


def missing_peers() -> dict[str, str]:
    """Peer name -> why it cannot run here (absent when it can)."""
    missing: dict[str, str] = {}
    for peer, modules in PEER_PACKAGES.items():
        for module in modules:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ModuleNotFoundError, ValueError):
                found = False
            if not found:
                missing[peer] = (
                    f"{module} is not installed (install the bench extra: "
                    "pip install -e '.[bench]')"
                )
                break
    return missing


def peer_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {"sqlite": sqlite3.sqlite_version}
    for dist in ("dbos", "langgraph", "langgraph-checkpoint-sqlite"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    return out


class Peer(Protocol):
    name: str

    def samples(self, n: int) -> list[float]:
        """Run ``n`` operations; each one's wall time in microseconds."""
        ...

    def close(self) -> None: ...


def _wal_full(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")


# -- the floor -------------------------------------------------------------------------


class BareCommit:
    """One insert in its own fsync'd commit: what any durable step costs at least."""

    name = "bare fsync'd sqlite3 commit (1 insert)"

    def __init__(self, directory: Path) -> None:
        self._conn = sqlite3.connect(
            directory / "bare.db", isolation_level=None, check_same_thread=False
        )
        _wal_full(self._conn)
        self._conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT)")
        self._cur = self._conn.cursor()

    def _commit(self) -> None:
        cur = self._cur
        cur.execute("BEGIN")
        cur.execute("INSERT INTO t (v) VALUES (?)", (PAYLOAD,))
        cur.execute("COMMIT")

    def samples(self, n: int) -> list[float]:
        return timed(self._commit, n)

    def close(self) -> None:
        self._conn.close()


# -- DBOS ------------------------------------------------------------------------------

_dbos_lock = threading.Lock()
_dbos_registered: dict[str, Any] = {}
_dbos_samples: list[float] = []


def _dbos_functions() -> Any:
    """Register the benchmark's workflow and step once per process (DBOS keeps a global
    registry keyed by name)."""
    from dbos import DBOS

    with _dbos_lock:
        if "workflow" in _dbos_registered:
            return _dbos_registered["workflow"]

        @DBOS.step()
        def turn_step(turn: int, note: str) -> int:
            del note
            return turn + 1

        # A turn at turnkeeper's durability records its intent before the host runs and
        # its result after: an intent step, then the result step, each one commit.
        @DBOS.step()
        def intent_step(turn: int, note: str) -> int:
            del note
            return turn

        def two_steps(turn: int) -> int:
            return int(turn_step(intent_step(turn, PAYLOAD), PAYLOAD))

        @DBOS.workflow()
        def agent_loop(turns: int, intent: bool) -> int:
            """A long-running agent: per turn one step, or (``intent``) an intent step
            and the result step; each turn timed from inside."""
            clock = time.perf_counter_ns
            turn = 0
            for _ in range(turns):
                t0 = clock()
                turn = two_steps(turn) if intent else turn_step(turn, PAYLOAD)
                _dbos_samples.append((clock() - t0) / 1000)
            return turn

        @DBOS.workflow()
        def one_turn(turn: int) -> int:
            """One turn as a workflow of its own: the two steps inside it."""
            return two_steps(turn)

        _dbos_registered.update(workflow=agent_loop, one_turn=one_turn)
        return agent_loop


def _loop_samples(turns: int, intent: bool) -> list[float]:
    """``turns`` turns of the long-running workflow; each one's wall time in µs."""
    _dbos_samples.clear()
    _dbos_functions()(turns, intent)
    out = list(_dbos_samples)
    _dbos_samples.clear()
    return out


def _dbos_workflow(name: str) -> Any:
    _dbos_functions()
    return _dbos_registered[name]


class DbosStep:
    """``@DBOS.step`` calls inside one ``@DBOS.workflow``, SQLite system database.

    DBOS leaves the SQLite journal mode at SQLite's default (a rollback journal);
    the file is switched to WAL before launch (the mode persists in the file) so
    all peers commit the same way: WAL, ``synchronous=FULL`` (SQLite's default).
    Each round starts a new workflow; only the steps are timed.
    """

    name = "DBOS step (@DBOS.step in a @DBOS.workflow, SQLite)"

    def __init__(self, directory: Path, wal: bool = True) -> None:
        from dbos import DBOS

        path = directory / "dbos.sqlite"
        if wal:
            conn = sqlite3.connect(path)
            _wal_full(conn)
            conn.close()
        self.journal = "wal" if wal else "delete"
        _dbos_functions()  # DBOS wants its workflows registered before it launches
        DBOS(
            config={
                "name": "turnkeeper-bench",
                "system_database_url": f"sqlite:///{path}",
                "log_level": "WARNING",
            }
        )
        DBOS.launch()

    def samples(self, n: int) -> list[float]:
        return _loop_samples(n, intent=False)

    def close(self) -> None:
        from dbos import DBOS

        DBOS.destroy(destroy_registry=False)


class DbosTurn:
    """A turn on DBOS at turnkeeper's durability: an intent step and a result step.

    ``per_turn_workflow=False``: both steps inside one long-running workflow, each
    turn timed from inside it (two durable commits a turn, as turnkeeper's turn
    makes). ``True``: each turn is a workflow of its own started from outside (DBOS
    also records the workflow's start and its end), as a DBOS application runs one
    unit of work. Runs on the DBOS that ``step`` launched (one per process).
    """

    def __init__(self, step: DbosStep, per_turn_workflow: bool) -> None:
        del step  # launched: its database is the one these turns use
        self.per_turn_workflow = per_turn_workflow
        self.name = (
            "DBOS turn, a workflow per turn (intent step + result step)"
            if per_turn_workflow
            else "DBOS turn, intent step + result step in a long workflow"
        )
        self._one_turn = _dbos_workflow("one_turn")
        self._count = 0

    def _run_one(self) -> None:
        self._count += 1
        self._one_turn(self._count)

    def samples(self, n: int) -> list[float]:
        if self.per_turn_workflow:
            return timed(self._run_one, n)
        return _loop_samples(n, intent=True)

    def close(self) -> None:
        """Nothing of its own: the DBOS it runs on is closed with its :class:`DbosStep`."""


# -- LangGraph -------------------------------------------------------------------------


def _sqlite_saver(path: Path) -> tuple[sqlite3.Connection, Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA synchronous = FULL")  # SqliteSaver itself switches to WAL
    saver = SqliteSaver(conn)
    saver.setup()
    return conn, saver


class LangGraphNode:
    """A one-node graph invoked once per turn on one thread id, ``durability="sync"``."""

    name = 'LangGraph node (SqliteSaver, durability="sync")'

    def __init__(self, directory: Path) -> None:
        from benchmarks._lg_graphs import turn_graph

        self._conn, saver = _sqlite_saver(directory / "langgraph.sqlite")
        self._graph = turn_graph(saver)
        self._config = {"configurable": {"thread_id": "agent-1"}}
        self._input = {"note": PAYLOAD}

    def _invoke(self) -> None:
        self._graph.invoke(self._input, self._config, durability="sync")

    def samples(self, n: int) -> list[float]:
        return timed(self._invoke, n)

    def checkpoints(self) -> int:
        (n,) = self._conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()
        return int(n)

    def close(self) -> None:
        self._conn.close()


class LangGraphConversation:
    """The storage benchmark's conversation on LangGraph: each turn appends the user's
    message (input) and the reply (the node) to the state's ``messages``."""

    def __init__(self, path: Path, reply: str, delta: bool = False) -> None:
        from benchmarks._lg_graphs import conversation_graph

        self.path = path
        self._conn, saver = _sqlite_saver(path)
        self._graph = conversation_graph(saver, reply, delta=delta)
        self._config = {"configurable": {"thread_id": "conversation-1"}}

    def turn(self, user: str) -> None:
        message = {"role": "user", "content": user}
        self._graph.invoke({"messages": [message]}, self._config, durability="sync")

    def sql_bytes(self) -> int:
        """Bytes of checkpoint blobs, their metadata and pending writes, from SQL."""
        (checkpoints,) = self._conn.execute(
            "SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints"
        ).fetchone()
        (writes,) = self._conn.execute(
            "SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes"
        ).fetchone()
        return int(checkpoints) + int(writes)

    def rows(self) -> int:
        (n,) = self._conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()
        return int(n)

    def file_bytes(self) -> int:
        """The database file's size once the WAL is checkpointed into it."""
        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        (pages,) = self._conn.execute("PRAGMA page_count").fetchone()
        (size,) = self._conn.execute("PRAGMA page_size").fetchone()
        return int(pages) * int(size)

    def close(self) -> None:
        self._conn.close()
