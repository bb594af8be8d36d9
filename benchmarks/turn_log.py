"""When each turn happened, read from the session streams in the store.

Every session event carries its own timestamp (``at``, the controller's clock when it
decided the event); the turn's ``turn.accepted``, ``turn.host_started`` and terminal
event say when it was accepted, when its host started and when it ended. Read with
plain ``sqlite3``, read-only, so the store of a running controller can be polled.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import statistics
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

TERMINAL = ("turn.completed", "turn.failed", "turn.lost", "turn.abandoned")


@dataclass
class Turn:
    turn_id: str
    accepted: float  # seconds since the epoch
    host_started: float | None = None
    ended: float | None = None
    outcome: str = ""  # completed, failed, lost, abandoned; empty while in flight
    # When each of the turn's events was decided, by type (the last of a type).
    marks: dict[str, float] = field(default_factory=dict)


def _seconds(at: str) -> float:
    return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


def read_turns(database: Path) -> dict[str, list[Turn]]:
    """Every session's turns in order, by session stream."""
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30)
    try:
        rows = conn.execute(
            "SELECT stream_id, type, payload FROM events WHERE type LIKE 'turn.%' "
            "ORDER BY stream_id, seq"
        ).fetchall()
    finally:
        conn.close()
    out: dict[str, list[Turn]] = {}
    by_id: dict[str, Turn] = {}
    for stream, kind, payload in rows:
        event = json.loads(payload)
        at = _seconds(event["at"])
        if kind == "turn.accepted":
            turn = Turn(turn_id=event["envelope"]["turn_id"], accepted=at, marks={kind: at})
            by_id[turn.turn_id] = turn
            out.setdefault(stream, []).append(turn)
            continue
        known = by_id.get(event.get("turn_id", ""))
        if known is None:
            continue
        known.marks[kind] = at
        if kind == "turn.host_started":
            known.host_started = at
        elif kind in TERMINAL:
            known.ended, known.outcome = at, kind.removeprefix("turn.")
    return out


@dataclass
class Window:
    """The fleet's steady state: from the moment every session has begun its second
    turn to the moment the run accepted its last turn (the budget then stops it), so
    the first round (every workspace's first snapshot) and the last, cut short by the
    budget, are left out."""

    start: float
    end: float
    turns: int  # turns accepted in (start, end]
    sessions: int

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.seconds if self.seconds > 0 else 0.0


def steady_window(turns: dict[str, list[Turn]]) -> Window:
    """The steady window of a run (see :class:`Window`); raises if some session ran
    fewer than three turns (there is no steady state to measure)."""
    short = [s for s, ts in turns.items() if len(ts) < 3]
    if short or not turns:
        raise RuntimeError(f"{len(short)} session(s) ran fewer than 3 turns: no steady window")
    start = max(ts[1].accepted for ts in turns.values())
    end = max(t.accepted for ts in turns.values() for t in ts)
    inside = sum(1 for ts in turns.values() for t in ts if start < t.accepted <= end)
    return Window(start=start, end=end, turns=inside, sessions=len(turns))


def cycles_in(turns: dict[str, list[Turn]], window: Window) -> list[float]:
    """Seconds from one turn's acceptance to the next, within the window, every session."""
    out = []
    for ts in turns.values():
        inside = [t.accepted for t in ts if window.start <= t.accepted <= window.end]
        out += [b - a for a, b in itertools.pairwise(inside)]
    return out


def gaps_in(turns: dict[str, list[Turn]], window: Window) -> list[float]:
    """Seconds from a turn's end to the same session's next acceptance, in the window:
    the controller's time between two turns of a session."""
    out = []
    for ts in turns.values():
        for a, b in itertools.pairwise(ts):
            if a.ended is not None and window.start <= b.accepted <= window.end:
                out.append(b.accepted - a.ended)
    return out


def steps_in(turns: dict[str, list[Turn]], window: Window) -> dict[str, float]:
    """Median milliseconds between a turn's successive events (``turn.accepted ->
    turn.host_started`` ...), and from its last to the session's next acceptance
    (``-> next turn.accepted``), over the window's turns: where a turn's wall time
    goes, as the controller's own clock saw it."""
    steps: dict[str, list[float]] = {}
    for ts in turns.values():
        for turn, following in itertools.zip_longest(ts, ts[1:]):
            if not window.start <= turn.accepted <= window.end:
                continue
            marks = sorted(turn.marks.items(), key=lambda kv: kv[1])
            if following is not None:
                marks.append(("next turn.accepted", following.accepted))
            for (a, t0), (b, t1) in itertools.pairwise(marks):
                steps.setdefault(f"{a} -> {b}", []).append((t1 - t0) * 1000)
    return {step: median(ms) for step, ms in steps.items()}


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0
