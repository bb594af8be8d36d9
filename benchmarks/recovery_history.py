"""The store a recovery benchmark restarts on: a recorded template, cloned many times.

A template (a goal and a session that works on it) is recorded once through the
real runtime, with every id in it turned into a placeholder; the store under test
is filled with clones of it under fresh ids, appended directly through the store
API, and a few clones of the mid-work template are driven into a turn the control
plane "dies" in (see :class:`~benchmarks.noop_host.CrashAfterStartHost`).
"""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks._common import LEASE_SECONDS, Say, TurnLoop, count_events
from benchmarks.noop_host import CrashAfterStartHost, SimulatedCrash
from turnkeeper.hosts import process_tree
from turnkeeper.kernel.session import NextTurn, SetStatus, plan_next_turn
from turnkeeper.kernel.session.envelope import IDEMPOTENCY_KEY_PREFIX, derive_idempotency_key
from turnkeeper.runtime.control.controller import Controller, ControllerConfig
from turnkeeper.runtime.control.controller_identity import owner_name
from turnkeeper.runtime.services.goals import goal_stream
from turnkeeper.runtime.services.sessions import session_stream
from turnkeeper.runtime.turn.planning import goal_view
from turnkeeper.store import IndexEntry, NewEvent, SqlEventStore, open_store

TEMPLATE_SESSION = "0badcafe-0000-4000-8000-000000000000"
TEMPLATE_GOAL = "goal-template00"
TEMPLATE_TODO = "todo-template00"
TURN_ID = re.compile(r"turn-[0-9a-f]{16}")
KEY = re.compile(re.escape(IDEMPOTENCY_KEY_PREFIX) + r"[0-9a-f]{40}")


# -- a dead process --------------------------------------------------------------------


def dead_process() -> tuple[int, int]:
    """Start a process, SIGKILL it, reap it: its (pid, start time) name nothing alive."""
    proc = subprocess.Popen(["sleep", "600"])
    try:
        identity = process_tree.identify(proc.pid, "bench-dead")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return identity.pid, identity.start_time


def dead_owner(pid: int, start_time: int) -> str:
    """The lease-owner name a controller in that dead process would have had."""
    return owner_name(pid, start_time)


# -- the template ----------------------------------------------------------------------


@dataclass
class StreamTemplate:
    """A stream recorded once, with every id turned into a placeholder."""

    stream_key: str  # "session" or "goal"
    kind: str
    events: list[tuple[str, int, list[str | int]]]  # type, schema version, pieces
    state: list[str | int]
    schema_version: int
    index: list[tuple[list[str | int], str]]


class Templater:
    """Splits text into literal pieces and id slots; ``fill`` puts a clone's ids back.

    Slots: 0 the session id, 1 the goal id, 2 the todo id, 3+j the j-th turn id, and
    ``KEY_SLOT + 16*j + attempt`` the idempotency key of turn j's attempt (a digest of
    the session, turn and attempt, so a clone's is derived afresh from its own ids).
    """

    KEY_SLOT = 1 << 20
    _MAX_ATTEMPTS = 16

    def __init__(self) -> None:
        self.turns: dict[str, int] = {}

    def split(self, text: str) -> list[str | int]:
        fixed = {TEMPLATE_SESSION: 0, TEMPLATE_GOAL: 1, TEMPLATE_TODO: 2}
        for turn in TURN_ID.findall(text):  # a key may come before its turn's id
            self.turns.setdefault(turn, len(self.turns))
        pattern = "|".join([*(re.escape(k) for k in fixed), TURN_ID.pattern, KEY.pattern])
        out: list[str | int] = []
        pos = 0
        for m in re.finditer(pattern, text):
            if m.start() > pos:
                out.append(text[pos : m.start()])
            token = m.group(0)
            if token in fixed:
                out.append(fixed[token])
            elif token.startswith(IDEMPOTENCY_KEY_PREFIX):
                out.append(self._key_slot(token))
            else:
                out.append(3 + self.turns[token])
            pos = m.end()
        if pos < len(text):
            out.append(text[pos:])
        return out

    def _key_slot(self, key: str) -> int:
        for turn, j in self.turns.items():
            for attempt in range(1, self._MAX_ATTEMPTS):
                if derive_idempotency_key(TEMPLATE_SESSION, turn, attempt) == key:
                    return self.KEY_SLOT + self._MAX_ATTEMPTS * j + attempt
        raise ValueError(f"idempotency key {key} of no recorded turn")

    @classmethod
    def fill(cls, pieces: list[str | int], ids: list[str]) -> str:
        return "".join(p if isinstance(p, str) else cls._value(p, ids) for p in pieces)

    @classmethod
    def _value(cls, slot: int, ids: list[str]) -> str:
        if slot < cls.KEY_SLOT:
            return ids[slot]
        j, attempt = divmod(slot - cls.KEY_SLOT, cls._MAX_ATTEMPTS)
        return derive_idempotency_key(ids[0], ids[3 + j], attempt)


def _capture(
    db: Path, store: SqlEventStore, stream: str, key: str, templater: Templater
) -> StreamTemplate:
    projection = store.read_projection(stream)
    assert projection is not None
    records = store.read_stream(stream)
    conn = sqlite3.connect(db)
    try:
        index = conn.execute(
            "SELECT entity_id, entity_kind FROM entity_index WHERE stream_id = ?", (stream,)
        ).fetchall()
    finally:
        conn.close()
    return StreamTemplate(
        stream_key=key,
        kind=projection.kind,
        events=[(r.type, r.schema_version, templater.split(r.payload)) for r in records],
        state=templater.split(projection.state),
        schema_version=projection.schema_version,
        index=[(templater.split(str(e)), str(k)) for e, k in index],
    )


@dataclass
class Templates:
    mid_work: list[StreamTemplate]  # goal + session, lease held by the dead controller
    closed: list[StreamTemplate]  # goal + session, closed after turns_per_session turns
    turn_slots: int
    closed_events: int
    mid_work_events: int
    closed_payload_bytes: int


def record_templates(
    work: Path, inflight_turns: int, turns_per_session: int, owner: str, say: Say
) -> Templates:
    """The mid-work template after ``inflight_turns`` turns, the closed one after
    ``turns_per_session``; their session's lease is ``owner``'s."""
    db = work / "template.db"
    store = open_store(db)
    loop = TurnLoop(
        store,
        work / "workspace",
        "template",
        owner=owner,
        goal_id=TEMPLATE_GOAL,
        todo_id=TEMPLATE_TODO,
        session_id=TEMPLATE_SESSION,
    )
    ctl = loop.controller
    templater = Templater()
    for _ in range(inflight_turns):
        loop.step()
    mid = [
        _capture(db, store, goal_stream(TEMPLATE_GOAL), "goal", templater),
        _capture(db, store, session_stream(TEMPLATE_SESSION), "session", templater),
    ]
    for _ in range(turns_per_session - inflight_turns):
        loop.step()
    ctl.sessions.execute(
        TEMPLATE_SESSION,
        SetStatus(lease=ctl.token(TEMPLATE_SESSION), action="close", reason="work done"),
    )
    closed = [
        _capture(db, store, goal_stream(TEMPLATE_GOAL), "goal", templater),
        _capture(db, store, session_stream(TEMPLATE_SESSION), "session", templater),
    ]
    store.close()
    payload = sum(sum(len(p) if isinstance(p, str) else 36 for p in e[2]) for e in closed[1].events)
    say(
        f"  template: {len(closed[1].events)} session + {len(closed[0].events)} goal events "
        f"for {turns_per_session} turns (~{payload // len(closed[1].events)} B/event)"
    )
    return Templates(
        mid_work=mid,
        closed=closed,
        turn_slots=len(templater.turns),
        closed_events=sum(len(t.events) for t in closed),
        mid_work_events=sum(len(t.events) for t in mid),
        closed_payload_bytes=payload,
    )


# -- cloning ---------------------------------------------------------------------------


IN_FLIGHT, CLOSED = 1, 2  # id spaces of the two kinds of clone


def _clone_ids(space: int, n: int, turn_slots: int) -> list[str]:
    # Same shapes and lengths as the runtime's ids (uuid4, turn-<16 hex>).
    return [
        f"{n:08x}-{space:04x}-4000-8000-{n:012x}",
        f"goal-{space}-{n:010d}",
        f"todo-{space}-{n:010d}",
        *(f"turn-{space:x}{n:07x}{j:08x}" for j in range(turn_slots)),
    ]


def append_clone(
    store: SqlEventStore, templates: list[StreamTemplate], ids: list[str], durable: bool
) -> int:
    """Append one clone of a goal + session; the events written."""
    written = 0
    fill = Templater.fill
    for t in templates:
        stream = session_stream(ids[0]) if t.stream_key == "session" else goal_stream(ids[1])
        events = [
            NewEvent(type=typ, schema_version=sv, payload=fill(pieces, ids))
            for typ, sv, pieces in t.events
        ]
        index = [IndexEntry(entity_id=fill(e, ids), entity_kind=k) for e, k in t.index]
        store.append(
            stream,
            t.kind,
            0,
            events,
            fill(t.state, ids),
            t.schema_version,
            index,
            durable=durable,
        )
        written += len(events)
    return written


def checkpoint(db: Path) -> int:
    """Fold the WAL into the database file; the file's size."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.close()
    return db.stat().st_size


def crash_in_flight(
    store: SqlEventStore,
    templates: Templates,
    sessions: int,
    owner: str,
    dead: tuple[int, int],
    say: Say,
) -> list[str]:
    """Clone ``sessions`` mid-work sessions and drive each into a turn the control plane
    dies in; their session ids."""
    host = CrashAfterStartHost(dead_pid=dead[0], dead_start_time=dead[1])
    ctl = Controller(
        store,
        ControllerConfig(lease_seconds=LEASE_SECONDS, host_loader=host.loader),
        owner=owner,
    )
    sids = []
    for i in range(sessions):
        ids = _clone_ids(IN_FLIGHT, i, templates.turn_slots)
        append_clone(store, templates.mid_work, ids, durable=False)
        sid = ids[0]
        ctl.acquire(sid)
        session = ctl.sessions.load(sid)
        now = ctl.sessions.now()
        plan = plan_next_turn(
            session, goal_view(ctl.goals.load(session.goal_id), session, now), now
        )
        assert isinstance(plan, NextTurn), plan
        try:
            ctl.driver.run_turn(session, plan)
        except SimulatedCrash:
            pass
        else:
            raise AssertionError("the crashing host did not crash the turn")
        in_flight = ctl.sessions.load(sid).in_flight
        assert in_flight is not None, f"session {sid}: no turn in flight after the crash"
        sids.append(sid)
    say(f"  {len(sids)} sessions with a turn in flight (host pid {dead[0]}, SIGKILLed)")
    return sids


def grow(
    db: Path, templates: Templates, target: int, start: int, batch_events: int, say: Say
) -> tuple[int, int]:
    """Add closed sessions until the store holds ``target`` events; (events, sessions added).

    Clones are appended with ``durable=False``; every ``batch_events`` events, and at
    the end, one durable append makes all the cheap ones before it durable too.
    """
    events = first = count_events(db)
    store = open_store(db)
    n = start
    since_durable = 0
    t0 = last_say = time.perf_counter()
    try:
        while events < target:
            remaining = target - events
            durable = (
                since_durable + templates.closed_events >= batch_events
                or templates.closed_events >= remaining
            )
            written = append_clone(
                store, templates.closed, _clone_ids(CLOSED, n, templates.turn_slots), durable
            )
            n += 1
            events += written
            since_durable = 0 if durable else since_durable + written
            now = time.perf_counter()
            if now - last_say > 2.0:
                rate = (events - first) / (now - t0)
                say(f"    {events:,} / {target:,} events ({rate:,.0f} events/s)")
                last_say = now
    finally:
        store.close()
    return events, n - start
