"""The append hot path: DBAPI statements and leader/follower group commit.

SQLAlchemy's per-statement cost is a visible fraction of a ~150 us fsync'd
commit, so appends run on one long-lived DBAPI connection with pre-built SQL
(_statements.py): per stream, its head check (the events' head and the projection
row's kind, one SELECT; a new stream's: its projection row's insert), its projection
write when it carries one (a large state's projection may lag its stream), and one
insert per event; then one COMMIT.

Group commit: callers enqueue a request -- one stream's append, or an
``append_many`` group of parts on several streams that commit all or nothing.
A caller that finds no commit in progress becomes the leader, takes every
queued request, runs them in one transaction, commits -- one fsync -- and wakes
the others. A request that fails its head check has written nothing and fails
alone (a group wraps its parts' head checks in a SAVEPOINT, so a later part's
failure undoes the earlier parts' projection writes); one that fails later
(index collision) makes the leader roll back and redo the batch with a
SAVEPOINT per request, so again only that request fails. A lone caller
therefore commits inline with no thread hand-off, and nobody is acknowledged
before the COMMIT that carries its rows has returned.

Where the driver can send a whole transaction at once (PostgreSQL's pipeline), a
batch first goes that way: BEGIN, every head-checked projection write, the events,
the index entries and COMMIT in one round trip. Nothing can be looked at before the
COMMIT is sent, so each write there fails the transaction when it wrote nothing
(``CHECKED_*`` statements); any failure rolls it back and the batch runs again as
above, statement by statement, where each request's own error is found.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field

from turnkeeper.errors import (
    AlreadyExists,
    DataLoss,
    FailedPrecondition,
    InvalidArgument,
    TurnkeeperError,
)
from turnkeeper.store._connections import PooledConnection
from turnkeeper.store._dialect import DBAPICursor, Dialect, SqlParams
from turnkeeper.store._head_checks import check_heads, collided, conflict, pipeline_steps
from turnkeeper.store._reads import as_int
from turnkeeper.store._rows import EventColumns, index_from_row
from turnkeeper.store._statements import (
    CHECKED_HEAD,
    CHECKED_INSERT_INDEX,
    CHECKED_INSERT_PROJECTION,
    CHECKED_UNCHANGED,
    CHECKED_UPDATE_PROJECTION,
    COMMIT,
    INSERT_EVENT,
    INSERT_INDEX,
    INSERT_PROJECTION,
    RELEASE_APPEND,
    RELEASE_GROUP,
    ROLLBACK,
    ROLLBACK_TO_APPEND,
    ROLLBACK_TO_GROUP,
    SAVEPOINT_APPEND,
    SAVEPOINT_GROUP,
    SELECT_EVENTS_HEAD,
    SELECT_HEAD_AND_KIND,
    SELECT_INDEX,
    SELECT_PROJECTION_HEAD,
    UPDATE_PROJECTION,
)


@dataclass(slots=True, eq=False)
class StreamWrite:
    """One stream's append, fully prepared (checksums computed) before it is queued."""

    stream_id: str
    kind: str
    expected_seq: int
    new_head: int
    # (schema_version, state, checksum, created_at, created_check); None: the append
    # leaves the projection row as it is (folded to an earlier seq)
    projection: tuple[int, str, str, int, str] | None
    events: list[EventColumns]  # rows for INSERT_EVENT
    index: list[tuple[str, str, str, str]]  # rows for INSERT_INDEX


@dataclass(slots=True, eq=False)
class AppendRequest:
    """What one caller waits for: its parts commit together, in one commit, or not at all."""

    parts: list[StreamWrite]
    durable: bool = True
    # Streams the commit must find at these heads, writing nothing to them.
    checks: list[tuple[str, int]] = field(default_factory=list)
    error: BaseException | None = None
    done: bool = False
    waiter: threading.Lock | None = field(default=None)


class _RequestFailedError(Exception):
    """A request's own logical failure: roll back its savepoint, keep the batch."""

    def __init__(self, error: TurnkeeperError) -> None:
        super().__init__(str(error))
        self.error = error


class GroupCommitWriter:
    """Serializes appends onto one DBAPI connection, sharing commits between threads."""

    def __init__(self, connect: Callable[[], PooledConnection], dialect: Dialect) -> None:
        """``connect`` returns a pooled connection for the writer to own: called now,
        and again after the database dropped the last one."""
        self._connect = connect
        self._dialect = dialect
        self._proxy: PooledConnection | None = None
        self._cur: DBAPICursor = self._open()
        q = dialect.sql
        self._sql = {
            name: q(stmt)
            for name, stmt in {
                "update": UPDATE_PROJECTION,
                "insert": INSERT_PROJECTION,
                "event": INSERT_EVENT,
                "index": INSERT_INDEX,
                "select_index": SELECT_INDEX,
                "proj_head": SELECT_PROJECTION_HEAD,
                "events_head": SELECT_EVENTS_HEAD,
                "head_and_kind": SELECT_HEAD_AND_KIND,
                "checked_head": CHECKED_HEAD,
                "checked_update": CHECKED_UPDATE_PROJECTION,
                "checked_insert": CHECKED_INSERT_PROJECTION,
                "checked_index": CHECKED_INSERT_INDEX,
                "checked_unchanged": CHECKED_UNCHANGED,
            }.items()
        }
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._queue: list[AppendRequest] = []
        self._leading = False
        self._closed = False
        self._broken = False  # the database dropped the connection (see _commit_batch)
        self._commit_sent = False
        # The fast path writes every projection before any event: the heads it
        # wrote so far in this batch, which the events table does not show yet.
        self._pending: dict[str, int] = {}
        self.commits = 0  # statistics for benchmarks and tests
        self.committed_requests = 0

    def submit(self, req: AppendRequest) -> None:
        """Run ``req`` durably: return once its commit returned, or raise its typed error."""
        with self._lock:
            if self._closed:
                raise FailedPrecondition("the store is closed", reason="store_closed")
            self._queue.append(req)
            follow = self._leading
            if follow:
                # A bare lock as a one-shot signal: cheaper than a Condition, and
                # the wake-up needs no re-check under the queue lock.
                req.waiter = threading.Lock()
                req.waiter.acquire()
            else:
                self._leading = True
        if follow:
            assert req.waiter is not None
            req.waiter.acquire()  # a leader finished our request, or handed us the lead
        if not req.done:
            self._lead(req)
        if req.error is not None:
            raise req.error

    def _lead(self, own: AppendRequest) -> None:
        with self._lock:
            batch, self._queue = self._queue, []  # includes our own request
        try:
            self._commit_batch(batch)
        finally:
            with self._lock:
                for r in batch:
                    r.done = True
                    if r is not own and r.waiter is not None:
                        r.waiter.release()
                if self._queue:
                    # Leadership passes straight to the oldest waiter (which queued
                    # while we committed), so no newcomer can jump ahead of it.
                    assert self._queue[0].waiter is not None
                    self._queue[0].waiter.release()
                else:
                    self._leading = False
                    self._idle.notify_all()

    def close(self) -> None:
        """Refuse new requests, let queued ones commit, release the connection."""
        with self._lock:
            self._closed = True
            while self._leading or self._queue:
                self._idle.wait()
        self._close_connection()

    def _open(self) -> DBAPICursor:
        self._proxy = proxy = self._connect()
        # The driver's own connection (sqlite3's, psycopg's).
        cur = proxy.driver_connection.cursor()
        self._dialect.prepare_writer(cur)
        self._durable = True  # a new connection commits durably until told otherwise
        return cur

    def _close_connection(self) -> None:
        proxy, self._proxy = self._proxy, None
        if proxy is None:
            return
        with suppress(Exception):
            self._cur.close()
        # A connection the database dropped is discarded, not returned to the pool.
        with suppress(Exception):
            if self._broken:
                proxy.invalidate()
            else:
                proxy.close()

    # -- the leader's work -------------------------------------------------------------

    def _commit_batch(self, batch: list[AppendRequest]) -> None:
        committing = False
        self._commit_sent = False  # a pipeline with its COMMIT went out (_pipelined)
        try:
            # One durable request makes the whole shared commit wait for the disk.
            durable = any(r.durable for r in batch)
            if self._dialect.pipelines and self._pipelined(batch, durable):
                self.commits += 1
                self.committed_requests += len(batch)
                return
            cur = self._begin(durable)
            if not self._fast_path(batch):
                # A request failed after writing: undo everything, isolate each request.
                cur.execute(ROLLBACK)
                for req in batch:
                    req.error = None
                self._dialect.begin_write(cur, durable)
                self._safe_path(batch)
            if any(r.error is None for r in batch):
                committing = True
                cur.execute(COMMIT)
                self.commits += 1
                self.committed_requests += sum(1 for r in batch if r.error is None)
            else:
                cur.execute(ROLLBACK)
        except BaseException as exc:
            if self._dialect.is_disconnect(exc):
                # Nothing more can run on this connection: the next batch opens another.
                self._broken = True
                self._close_connection()
            else:
                self._rollback_quietly()
            for req in batch:
                if req.error is None:
                    req.error = self._typed(exc, req)
                    if (
                        (committing or self._commit_sent)
                        and self._broken
                        and isinstance(req.error, TurnkeeperError)
                        and not self._dialect.ended_before_commit(exc)
                    ):
                        # The COMMIT was sent and its answer lost: it may have landed.
                        req.error.details["commit_outcome"] = "unknown"
            if not isinstance(exc, Exception):
                raise  # KeyboardInterrupt & co: waiters got an error, now propagate

    def _pipelined(self, batch: list[AppendRequest], durable: bool) -> bool:
        """The batch in one round trip (see the module's doc). True: committed. False:
        a statement failed and the transaction was rolled back, or the batch could not
        be checked in one pipeline and nothing was sent; the batch is then run
        statement by statement.

        A connection the server ended while idle (a restart) fails before anything of
        the transaction committed, and says so: one new connection is tried then, so
        the first append after the database came back does not fail for the old one."""
        steps: list[tuple[str, list[SqlParams]]] | None = None
        for attempt in range(2):
            if self._proxy is None:
                self._broken = False
                self._cur = self._open()  # the database came back (or not: typed above)
            if durable != self._durable:
                self._dialect.set_commit_durability(self._cur, durable)
                self._durable = durable
            if steps is None:
                steps = pipeline_steps(batch, self._sql)
                if steps is None:
                    return False  # nothing sent: the statement path runs the batch
            try:
                # From here a lost connection may have lost COMMIT's answer, not it.
                self._commit_sent = True
                done = self._dialect.pipelined_commit(self._cur, steps)
            except Exception as exc:
                if attempt or not self._dialect.ended_before_commit(exc):
                    if self._dialect.is_disconnect(exc):
                        self._broken = True
                    raise
                self._commit_sent = False  # nothing of it reached the server
                self._broken = True
                self._close_connection()
                continue
            self._commit_sent = False
            return done
        raise AssertionError("unreachable")  # the loop returns or raises

    def _begin(self, durable: bool) -> DBAPICursor:
        """Begin the batch's transaction, on a new connection if the last one was lost.

        A connection the server dropped while idle (a restart) fails at BEGIN, before
        anything of this batch was sent: one new connection is tried then, so the first
        append after the database came back does not fail for the old connection."""
        for attempt in range(2):
            if self._proxy is None:
                self._broken = False
                self._cur = self._open()  # the database came back (or not: typed above)
            cur = self._cur
            try:
                if durable != self._durable:
                    self._dialect.set_commit_durability(cur, durable)
                    self._durable = durable
                self._dialect.begin_write(cur, durable)
                return cur
            except Exception as exc:
                if attempt or not self._dialect.is_disconnect(exc):
                    raise
                self._broken = True
                self._close_connection()
        raise AssertionError("unreachable")  # the loop returns or raises

    def _fast_path(self, batch: list[AppendRequest]) -> bool:
        """No per-request savepoints, one insert batch for every event: the common case.

        A request that fails its head check has written nothing (a conditional
        write that matched no row, or a group's savepoint rolled back), so it can
        fail alone. Anything that fails later -- an index collision, an event key
        collision -- returns False and the caller redoes the batch on the safe path.
        """
        cur = self._cur
        rows: list[EventColumns] = []
        index: list[tuple[str, str, str, str]] = []
        pending = self._pending
        try:
            for req in batch:
                parts = req.parts
                if req.checks:
                    req.error = check_heads(cur, self._sql, pending, req.checks)
                    if req.error is not None:
                        continue
                if len(parts) == 1:
                    req.error = self._write_projection(parts[0])
                else:
                    req.error = self._write_group_projections(parts)
                if req.error is None:
                    for part in parts:
                        pending[part.stream_id] = part.new_head
                        rows += part.events
                        index += part.index
        finally:
            pending.clear()
        if not rows:
            return True
        try:
            self._insert("event", rows)
        except Exception as exc:
            if self._dialect.is_integrity_error(exc):
                return False
            raise
        if index:
            self._insert("index", index)
            # Fewer rows than entries: a collision or a repeated registration; sort it out safely.
            return bool(cur.rowcount == len(index))
        return True

    def _insert(self, statement: str, rows: Sequence[SqlParams]) -> None:
        """Insert ``rows``; ``rowcount`` is then how many went in. One row goes as one
        statement: a batch costs PostgreSQL an extra pipeline exchange."""
        if len(rows) == 1:
            self._cur.execute(self._sql[statement], rows[0])
        else:
            self._cur.executemany(self._sql[statement], rows)

    def _write_group_projections(self, parts: list[StreamWrite]) -> TurnkeeperError | None:
        """Every part's head check and projection write, all or nothing."""
        cur = self._cur
        cur.execute(SAVEPOINT_GROUP)
        for i, part in enumerate(parts):
            error = self._write_projection(part)
            if error is not None:
                if i:  # earlier parts wrote their projections: undo them
                    cur.execute(ROLLBACK_TO_GROUP)
                cur.execute(RELEASE_GROUP)
                error.details["part"] = i
                return error
        cur.execute(RELEASE_GROUP)
        return None

    def _safe_path(self, batch: list[AppendRequest]) -> None:
        cur = self._cur
        for req in batch:
            if req.checks:
                # Nothing is written yet: a moved head fails the request alone.
                req.error = check_heads(cur, self._sql, {}, req.checks)
                if req.error is not None:
                    continue
            cur.execute(SAVEPOINT_APPEND)
            for i, part in enumerate(req.parts):
                try:
                    self._apply(part)
                except _RequestFailedError as failed:
                    req.error = failed.error
                    if len(req.parts) > 1:
                        req.error.details["part"] = i
                    cur.execute(ROLLBACK_TO_APPEND)
                    break
            cur.execute(RELEASE_APPEND)

    def _write_projection(self, part: StreamWrite) -> TurnkeeperError | None:
        """The head check and the projection write (when the part carries one); on
        failure nothing is written.

        A new stream's check is its projection row's insert (``ON CONFLICT DO
        NOTHING``: its rowcount). Any other append checks the stream's events head and
        the row's kind first: the writer holds the write lock on SQLite, so nothing
        moves between the check and the write; on PostgreSQL (this path is the
        pipeline's fallback) a writer that commits in between makes this batch's event
        insert collide on the events' key, and the batch is redone, this check then
        seeing its events. ``pending``: the heads this batch wrote so far, which the
        events table does not show yet (the fast path inserts every event last)."""
        cur = self._cur
        if part.expected_seq == 0:
            assert part.projection is not None  # prepare_write refuses a new stream without
            sv, state, checksum, created_at, created_check = part.projection
            cur.execute(
                self._sql["insert"],
                (
                    part.stream_id,
                    part.kind,
                    part.new_head,
                    sv,
                    state,
                    checksum,
                    created_at,
                    created_check,
                ),
            )
            return None if cur.rowcount == 1 else conflict(cur, self._sql, self._pending, part)
        cur.execute(self._sql["head_and_kind"], (part.stream_id, part.stream_id))
        found = cur.fetchone()
        head = self._pending.get(part.stream_id)
        if head is None:
            head = as_int(found[0]) if found is not None and found[0] is not None else 0
        if (
            found is None
            or found[1] != part.kind
            or head != part.expected_seq
            or found[2] is None
            or as_int(found[2]) > head  # the row leads its events: damage
        ):
            return conflict(cur, self._sql, self._pending, part)
        if part.projection is None:
            return None
        sv, state, checksum, _, _ = part.projection
        cur.execute(
            self._sql["update"], (part.new_head, sv, state, checksum, part.stream_id, part.kind)
        )
        return None if cur.rowcount == 1 else conflict(cur, self._sql, self._pending, part)

    def _apply(self, part: StreamWrite) -> None:
        cur = self._cur
        error = self._write_projection(part)
        if error is not None:
            raise _RequestFailedError(error)
        try:
            self._insert("event", part.events)
        except Exception as exc:
            if not self._dialect.is_integrity_error(exc):
                raise
            # The head check passed, yet the events' key holds this seq: another writer
            # committed it since (PostgreSQL: between the check and this insert; its
            # events are visible now), or the events' index hid them from the check.
            # Asked after the request's savepoint is rolled back: PostgreSQL runs
            # nothing more in a transaction a failed statement aborted.
            cur.execute(ROLLBACK_TO_APPEND)
            raise _RequestFailedError(collided(cur, self._sql, part)) from exc
        if part.index:
            self._insert("index", part.index)
            if cur.rowcount != len(part.index):
                self._check_index(part)

    def _check_index(self, part: StreamWrite) -> None:
        for entity_id, _stream, entity_kind, _checksum in part.index:
            self._cur.execute(self._sql["select_index"], (entity_id,))
            found = self._cur.fetchone()
            try:
                owner = None if found is None else index_from_row(entity_id, found)
            except DataLoss as exc:
                raise _RequestFailedError(exc) from exc
            if owner is not None and owner != (part.stream_id, entity_kind):
                raise _RequestFailedError(
                    AlreadyExists(
                        f"entity {entity_id!r} already belongs to stream {owner[0]!r} "
                        f"as {owner[1]!r}",
                        reason="entity_owned",
                        details={
                            "entity_id": entity_id,
                            "stream_id": owner[0],
                            "entity_kind": owner[1],
                            "requested_stream_id": part.stream_id,
                        },
                    )
                )

    def _typed(self, exc: BaseException, req: AppendRequest) -> BaseException:
        if isinstance(exc, TurnkeeperError):
            return exc
        first = req.parts[0]
        typed = self._dialect.translate(exc, stream_id=first.stream_id, seq=first.expected_seq + 1)
        if typed is not None:
            typed.__cause__ = exc
            return typed
        if isinstance(exc, UnicodeEncodeError):
            return InvalidArgument(f"text is not encodable as UTF-8: {exc}", reason="bad_text")
        streams = ", ".join(repr(p.stream_id) for p in req.parts)
        err = TurnkeeperError(f"append to {streams} failed: {exc!r}", reason="internal")
        err.__cause__ = exc
        return err

    def _rollback_quietly(self) -> None:
        # No transaction open is fine here: the original error is the one to report.
        with suppress(Exception):
            self._cur.execute(ROLLBACK)
