"""Reading a session's log: what happened to each turn it accepted."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TERMINAL_TYPES = frozenset({"turn.completed", "turn.failed", "turn.lost", "turn.abandoned"})


@dataclass(frozen=True)
class Record:
    seq: int
    type: str
    payload: dict[str, Any]


@dataclass
class TurnHistory:
    """What the session stream says about one turn."""

    turn_id: str
    envelope: dict[str, Any]
    terminals: list[str] = field(default_factory=list)
    lost_proof: dict[str, Any] | None = None
    receipt: dict[str, Any] | None = None

    @property
    def attempt(self) -> int:
        return int(self.envelope["attempt"])

    @property
    def todo_id(self) -> str | None:
        value = self.envelope.get("todo_id")
        return None if value is None else str(value)

    @property
    def terminal(self) -> str | None:
        return self.terminals[0] if len(self.terminals) == 1 else None


def turn_histories(records: list[Record]) -> dict[str, TurnHistory]:
    """Every accepted turn in order of acceptance, with its terminal events."""
    turns: dict[str, TurnHistory] = {}
    for record in records:
        payload = record.payload
        if record.type == "turn.accepted":
            envelope = payload["envelope"]
            turn_id = str(envelope["turn_id"])
            assert turn_id not in turns, f"turn {turn_id} accepted twice"
            turns[turn_id] = TurnHistory(turn_id=turn_id, envelope=envelope)
        elif record.type in TERMINAL_TYPES or record.type == "turn.receipt_recorded":
            turn_id = str(payload["turn_id"])
            assert turn_id in turns, f"{record.type} for turn {turn_id} never accepted"
            if record.type == "turn.receipt_recorded":
                assert turns[turn_id].receipt is None, f"turn {turn_id} has two receipts"
                turns[turn_id].receipt = payload["receipt"]
                continue
            turns[turn_id].terminals.append(record.type)
            if record.type == "turn.lost":
                turns[turn_id].lost_proof = payload["proof"]
    return turns
