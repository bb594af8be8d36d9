"""The runner's journal: SQLite (WAL, ``synchronous=FULL``) in ``runner/journal.db``.

Three tables:

* ``commands`` — every command with an effect: its id, the sha256 of its canonical
  bytes, ``pending`` / ``done`` / ``indeterminate`` and its result or error. A
  command with an effect outside the journal (starting a host, killing one) is
  committed ``pending`` before it acts and ``done`` after; one the journal alone
  carries out (``ack``, ``close``) commits in the same transaction as its effect.
* ``turns`` — each turn the runner started: host kind, process identity, state
  (``starting`` before the host runs, ``live``, ``finished``), the last event seq
  journaled, the cumulative ack, the outcome and why the runner ended it if it did.
* ``events`` — each host event, committed before any client sees it. Acknowledged
  events are deleted as the ack arrives: a client that acknowledged seq n never asks
  for it again, and the disk holds only what is unacknowledged.

One connection, one lock: every statement is short and the runner's throughput is
bounded by the fsync of each commit, not by contention.

The schema is versioned in SQLite's ``user_version``. Opening for writing applies, in
one transaction, each step of :data:`_MIGRATIONS` the file has not had (a step i
brings version i to i + 1); a journal of a version newer than this code knows is
refused (``FAILED_PRECONDITION``, ``journal_too_new``) and left as it is. To change the
schema, append a step: never edit one that has shipped.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from turnkeeper.errors import AlreadyExists, FailedPrecondition, NotFound
from turnkeeper.host_reports import HostEvent, ProcessIdentity
from turnkeeper.json_types import JsonDict, JsonValue
from turnkeeper.runner.protocol import TurnEnd, TurnInfo

# Version 1, the schema every journal had before it was versioned. Such a journal is at
# ``user_version`` 0 with these tables already there: its step only stamps it.
_SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS commands (
    command_id TEXT PRIMARY KEY,
    op TEXT NOT NULL,
    turn_id TEXT,
    digest TEXT NOT NULL,
    status TEXT NOT NULL,
    result TEXT,
    error TEXT,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS turns (
    turn_id TEXT PRIMARY KEY,
    host_kind TEXT NOT NULL,
    identity TEXT,
    state TEXT NOT NULL,
    last_seq INTEGER NOT NULL DEFAULT 0,
    acked_seq INTEGER NOT NULL DEFAULT 0,
    turn_end TEXT,
    created_at REAL NOT NULL,
    finished_at REAL
);
CREATE TABLE IF NOT EXISTS events (
    turn_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    PRIMARY KEY (turn_id, seq)
) WITHOUT ROWID;
"""


def _create_v1(conn: sqlite3.Connection) -> None:
    # One statement at a time: ``executescript`` would commit the open transaction.
    for statement in _SCHEMA_V1.split(";"):
        if statement.strip():
            conn.execute(statement)


# Step i brings a journal from version i to i + 1, in order; the last one reached is
# this code's version.
_MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_create_v1,)
JOURNAL_SCHEMA_VERSION = len(_MIGRATIONS)


@dataclass(frozen=True)
class CommandRow:
    command_id: str
    op: str
    turn_id: str | None
    digest: str
    status: str  # pending | done | indeterminate
    result: JsonValue
    error: JsonDict | None


@dataclass(frozen=True)
class TurnRow:
    turn_id: str
    host_kind: str
    identity: ProcessIdentity | None
    state: str  # starting | live | finished
    last_seq: int
    acked_seq: int
    turn_end: TurnEnd | None

    def info(self) -> TurnInfo:
        reason = self.turn_end.end_reason if self.turn_end is not None else None
        return TurnInfo(
            turn_id=self.turn_id,
            state=self.state,
            last_seq=self.last_seq,
            acked_seq=self.acked_seq,
            end_reason=reason,
            identity=self.identity,
        )


def _connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    uri = f"file:{path}?mode=ro" if readonly else f"file:{path}"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    if not readonly:
        conn.execute("PRAGMA journal_mode = WAL")
        # FULL: a commit is on disk when it returns, so an event a client was sent
        # (or a command reported done) survives a power cut of the machine.
        conn.execute("PRAGMA synchronous = FULL")
    return conn


def _user_version(conn: sqlite3.Connection) -> int:
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    return int(version)


def _check_version(version: int, path: Path) -> None:
    if version > JOURNAL_SCHEMA_VERSION:
        raise FailedPrecondition(
            f"the runner journal {path} is schema version {version}, newer than this code "
            f"reads ({JOURNAL_SCHEMA_VERSION}): upgrade turnkeeper",
            reason="journal_too_new",
            details={"journal_version": version, "code_version": JOURNAL_SCHEMA_VERSION},
        )


class Journal:
    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = path
        self._conn = _connect(path, readonly=readonly)
        self._lock = threading.RLock()
        try:
            if readonly:
                _check_version(_user_version(self._conn), path)
            else:
                self._migrate()
        except BaseException:
            self._conn.close()
            raise

    def _migrate(self) -> None:
        # Under the write lock: two processes opening one fresh file do not both step it.
        with self._tx() as conn:
            version = _user_version(conn)
            _check_version(version, self.path)
            for step in _MIGRATIONS[version:]:
                step(conn)
            if version != JOURNAL_SCHEMA_VERSION:
                # PRAGMA takes no parameter; the value is this module's own integer.
                conn.execute(f"PRAGMA user_version = {JOURNAL_SCHEMA_VERSION:d}")

    @property
    def schema_version(self) -> int:
        with self._lock:
            return _user_version(self._conn)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def size_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal", "-shm"):
            with suppress(FileNotFoundError):
                total += Path(f"{self.path}{suffix}").stat().st_size
        return total

    # --- commands -----------------------------------------------------------------

    def command(self, command_id: str) -> CommandRow | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT command_id, op, turn_id, digest, status, result, error"
                " FROM commands WHERE command_id = ?",
                (command_id,),
            ).fetchone()
        if row is None:
            return None
        result = json.loads(row[5]) if row[5] is not None else None
        error = json.loads(row[6]) if row[6] is not None else None
        return CommandRow(row[0], row[1], row[2], row[3], row[4], result, error)

    def begin_command(self, command_id: str, op: str, turn_id: str | None, digest: str) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO commands (command_id, op, turn_id, digest, status, created_at)"
                " VALUES (?, ?, ?, ?, 'pending', ?)",
                (command_id, op, turn_id, digest, time.time()),
            )

    def finish_command(
        self, command_id: str, *, result: JsonValue = None, error: JsonDict | None = None
    ) -> None:
        with self._tx() as conn:
            self._set_done(conn, command_id, result, error)

    @staticmethod
    def _set_done(
        conn: sqlite3.Connection, command_id: str, result: JsonValue, error: JsonDict | None
    ) -> None:
        conn.execute(
            "UPDATE commands SET status = 'done', result = ?, error = ? WHERE command_id = ?",
            (
                json.dumps(result) if error is None else None,
                json.dumps(error) if error is not None else None,
                command_id,
            ),
        )

    def atomic_command(
        self,
        command_id: str,
        op: str,
        turn_id: str | None,
        digest: str,
        effect: Callable[[sqlite3.Connection], JsonDict],
    ) -> JsonDict:
        """Record the command done together with ``effect``'s changes, in one commit."""
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO commands (command_id, op, turn_id, digest, status, created_at)"
                " VALUES (?, ?, ?, ?, 'pending', ?)",
                (command_id, op, turn_id, digest, time.time()),
            )
            result = effect(conn)
            self._set_done(conn, command_id, result, None)
        return result

    def mark_indeterminate(self) -> int:
        """Commands a dead runner left ``pending``: never to be executed again."""
        with self._tx() as conn:
            cur = conn.execute(
                "UPDATE commands SET status = 'indeterminate' WHERE status = 'pending'"
            )
            return cur.rowcount

    # --- turns --------------------------------------------------------------------

    def add_turn(self, turn_id: str, host_kind: str) -> None:
        try:
            with self._tx() as conn:
                conn.execute(
                    "INSERT INTO turns (turn_id, host_kind, state, created_at)"
                    " VALUES (?, ?, 'starting', ?)",
                    (turn_id, host_kind, time.time()),
                )
        except sqlite3.IntegrityError:
            raise AlreadyExists(
                f"the runner already has turn {turn_id}", reason="turn_exists"
            ) from None

    def forget_turn(self, turn_id: str) -> None:
        with self._tx() as conn:
            conn.execute("DELETE FROM turns WHERE turn_id = ?", (turn_id,))

    def turn_started(self, turn_id: str, identity: ProcessIdentity) -> None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE turns SET state = 'live', identity = ? WHERE turn_id = ?",
                (identity.model_dump_json(), turn_id),
            )

    def append_events(self, turn_id: str, events: list[tuple[HostEvent, str, int]]) -> None:
        """Journal a batch of (event, its JSON, its size in bytes) in one commit."""
        with self._tx() as conn:
            conn.executemany(
                "INSERT INTO events (turn_id, seq, body, bytes) VALUES (?, ?, ?, ?)",
                [(turn_id, event.seq, body, size) for event, body, size in events],
            )
            conn.execute(
                "UPDATE turns SET last_seq = ? WHERE turn_id = ?", (events[-1][0].seq, turn_id)
            )

    def finish_turn(self, turn_id: str, end: TurnEnd) -> None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE turns SET state = 'finished', turn_end = ?, finished_at = ?"
                " WHERE turn_id = ?",
                (end.model_dump_json(), time.time(), turn_id),
            )

    def turn(self, turn_id: str) -> TurnRow:
        with self._lock:
            row = self._conn.execute(_TURN_SELECT + " WHERE turn_id = ?", (turn_id,)).fetchone()
        if row is None:
            raise NotFound(f"the runner has no turn {turn_id}", reason="turn_not_found")
        return _turn_row(row)

    def turns(self) -> list[TurnRow]:
        with self._lock:
            rows = self._conn.execute(_TURN_SELECT + " ORDER BY created_at").fetchall()
        return [_turn_row(r) for r in rows]

    def events_after(self, turn_id: str, after_seq: int, limit: int = 500) -> list[HostEvent]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT body FROM events WHERE turn_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (turn_id, after_seq, limit),
            ).fetchall()
        return [HostEvent.model_validate_json(body) for (body,) in rows]

    def unacked_bytes(self, turn_id: str) -> int:
        with self._lock:
            (total,) = self._conn.execute(
                "SELECT COALESCE(SUM(bytes), 0) FROM events WHERE turn_id = ?", (turn_id,)
            ).fetchone()
        return int(total)

    @staticmethod
    def apply_ack(conn: sqlite3.Connection, turn_id: str, seq: int) -> None:
        """Inside a transaction: move the cumulative ack, drop what it covers."""
        conn.execute("UPDATE turns SET acked_seq = ? WHERE turn_id = ?", (seq, turn_id))
        conn.execute("DELETE FROM events WHERE turn_id = ? AND seq <= ?", (turn_id, seq))

    @staticmethod
    def apply_close(conn: sqlite3.Connection, turn_id: str) -> None:
        """Inside a transaction: forget the turn. Its ``start_turn`` command row stays,
        so a late retry of that start still gets its stored result, not a new host."""
        conn.execute("DELETE FROM events WHERE turn_id = ?", (turn_id,))
        conn.execute("DELETE FROM turns WHERE turn_id = ?", (turn_id,))
        conn.execute("DELETE FROM commands WHERE turn_id = ? AND op IN ('ack', 'kill')", (turn_id,))


_TURN_SELECT = (
    "SELECT turn_id, host_kind, identity, state, last_seq, acked_seq, turn_end FROM turns"
)
# Its row, as _SCHEMA_V1 declares the columns (only this module writes the journal).
_TurnColumns = tuple[str, str, str | None, str, int, int, str | None]


def _turn_row(row: _TurnColumns) -> TurnRow:
    identity = ProcessIdentity.model_validate_json(row[2]) if row[2] else None
    end = TurnEnd.model_validate_json(row[6]) if row[6] else None
    return TurnRow(row[0], row[1], identity, row[3], row[4], row[5], end)
