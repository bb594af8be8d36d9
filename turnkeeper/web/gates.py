"""Gates as the web view shows them: each open one with what opened it.

A gate records its question (its title), not who asked it. What opened it is read
back from the log, in this order:

* an **indeterminate effect**: its id is the one formula the effect step uses
  (``effect_gate_id``), which names the turn;
* an **agent's question**: the receipt of one of the goal's sessions' turns holds an
  ``open_gate`` proposal with its id (the agent's tool calls are in that result), and
  the turn's envelope says what kind of turn asked (a replan, a todo's start, ...);
* else a **person** opened it (``turnkeeper gate open`` or the API).

A gate's origin never changes, and finding an agent's means reading the goal's
session streams, so :class:`GateOrigins` keeps each one it found (per app, bounded):
the pages that list open gates every few seconds read each stream once per gate.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from turnkeeper.api import routes_goals
from turnkeeper.kernel import GoalState
from turnkeeper.kernel.model import Gate, GateStatus
from turnkeeper.kernel.session import events as ev
from turnkeeper.kernel.session.records import ReceiptSuccess
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SESSION_CODEC, SessionService, session_stream
from turnkeeper.runtime.turn.effects import effect_gate_id
from turnkeeper.store.base import EventStore

# Origins kept per app: far more than the gates a project has open at once.
MAX_KEPT: Final = 4096
_EFFECT_GATE: Final = re.compile(r"effect-(turn-[0-9a-f]{16})-(.+)")

Kind = Literal["agent", "effect", "person"]


@dataclass(frozen=True)
class GateOrigin:
    """What opened a gate: which session's turn (for an agent or an effect)."""

    kind: Kind
    session_id: str | None = None
    turn_id: str | None = None
    turn_kind: str | None = None  # start, continue, replan, ... (an agent's turn)
    todo_id: str | None = None


PERSON: Final = GateOrigin("person")


@dataclass(frozen=True)
class GateRow:
    """One gate with its goal and its origin, as a page lists it."""

    gate: Gate
    goal_id: str
    goal_title: str
    origin: GateOrigin

    @property
    def open(self) -> bool:
        return self.gate.status is GateStatus.OPEN

    @property
    def opened_at(self) -> datetime:
        return self.gate.opened_at


class GateOrigins:
    """The origins found so far (thread safe: pages are served from threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[str, str], GateOrigin] = OrderedDict()

    def of(self, store: EventStore, goal_id: str, gate_id: str) -> GateOrigin:
        key = (goal_id, gate_id)
        with self._lock:
            found = self._kept.get(key)
        if found is not None:
            return found
        found = find_origin(store, goal_id, gate_id)
        with self._lock:
            self._kept[key] = found
            while len(self._kept) > MAX_KEPT:
                self._kept.popitem(last=False)
        return found


def find_origin(store: EventStore, goal_id: str, gate_id: str) -> GateOrigin:
    """What opened gate ``gate_id`` of goal ``goal_id`` (see the module docstring)."""
    effect = _EFFECT_GATE.fullmatch(gate_id)
    if effect is not None and effect_gate_id(effect[1], effect[2]) == gate_id:
        found = store.lookup(effect[1])
        if found is not None and found[1] == "turn":
            return GateOrigin("effect", found[0].removeprefix("session:"), effect[1])
    for session in SessionService(store).list():
        if session.goal_id == goal_id:
            origin = _asked_in(store, session.session_id, gate_id)
            if origin is not None:
                return origin
    return PERSON


def _asked_in(store: EventStore, session_id: str, gate_id: str) -> GateOrigin | None:
    """The turn of this session whose result proposed opening ``gate_id``, if any."""
    stream = session_stream(session_id)
    turn_id = None
    for record in store.read_stream(stream):
        # Only a receipt that names the gate is decoded.
        if record.type != "turn.receipt_recorded" or gate_id not in record.payload:
            continue
        event = SESSION_CODEC.decode_event(record)
        if isinstance(event, ev.ReceiptRecorded) and _proposes(event.receipt, gate_id):
            turn_id = event.turn_id
            break
    if turn_id is None:
        return None
    for record in store.read_stream(stream):
        if record.type != "turn.accepted" or turn_id not in record.payload:
            continue
        event = SESSION_CODEC.decode_event(record)
        if isinstance(event, ev.TurnAccepted) and event.envelope.turn_id == turn_id:
            env = event.envelope
            return GateOrigin("agent", session_id, turn_id, env.kind, env.todo_id)
    return GateOrigin("agent", session_id, turn_id)


def _proposes(receipt: object, gate_id: str) -> bool:
    if not isinstance(receipt, ReceiptSuccess):
        return False
    proposals = receipt.result.get("proposals")
    if not isinstance(proposals, list):
        return False
    return any(
        isinstance(p, dict) and p.get("kind") == "open_gate" and p.get("gate_id") == gate_id
        for p in proposals
    )


def rows_of(store: EventStore, origins: GateOrigins, goal: GoalState) -> list[GateRow]:
    """Every gate of ``goal``: the open ones first, newest first within each."""
    gates = sorted(
        goal.gates.values(),
        key=lambda g: (g.status is not GateStatus.OPEN, -g.opened_at.timestamp()),
    )
    return [
        GateRow(g, goal.goal.id, goal.goal.title, origins.of(store, goal.goal.id, g.id))
        for g in gates
    ]


def open_gates(store: EventStore, origins: GateOrigins) -> list[GateRow]:
    """Every open gate of every goal, newest first: the decisions people owe."""
    rows = [
        row
        for goal in GoalService(store).list_goals()
        for row in rows_of(store, origins, goal)
        if row.open
    ]
    return sorted(rows, key=lambda r: r.opened_at, reverse=True)


def gate_row(store: EventStore, origins: GateOrigins, gate_ref: str) -> GateRow:
    """One gate by its id or a unique prefix (NOT_FOUND otherwise), as the API finds it."""
    goal_id, gate_id = GoalService(store).locate("gate", gate_ref)
    goal = routes_goals.goal_state(goal_id, store)
    gate = goal.gates[gate_id]
    return GateRow(gate, goal.goal.id, goal.goal.title, origins.of(store, goal_id, gate_id))
