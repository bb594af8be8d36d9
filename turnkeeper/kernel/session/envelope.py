"""The turn envelope: what one bounded turn is asked to do, and under which contract."""

from __future__ import annotations

import hashlib
from typing import Literal, Self

from pydantic import Field, model_validator

from turnkeeper.kernel.session._model import Id, KernelModel, ShortText, Text, UuidStr
from turnkeeper.vocabulary import TurnKind

IDEMPOTENCY_KEY_PREFIX = "tkturn1-"


def derive_idempotency_key(session_id: str, turn_id: str, attempt: int) -> str:
    """Stable key for a turn attempt, so providers can dedupe effects across restarts.

    A hash (not the raw ids) keeps the key short and free of separators that a
    provider might reject; the NUL separators make the encoding unambiguous.
    """
    material = f"turnkeeper.turn.v1\0{session_id}\0{turn_id}\0{attempt}".encode()
    return IDEMPOTENCY_KEY_PREFIX + hashlib.sha256(material).hexdigest()[:40]


class TurnBudget(KernelModel):
    """Upper bounds the host must respect for one turn; ``None`` means unbounded."""

    max_wall_seconds: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_cost: float | None = Field(default=None, ge=0)


class InteractionContract(KernelModel):
    """When the agent must stop and hand control back: the turn's interaction contract."""

    stop_condition: ShortText
    budget: TurnBudget = TurnBudget()


class NextTurn(KernelModel):
    """The specification of a turn to accept next: everything but its id and contract."""

    decision: Literal["next_turn"] = "next_turn"
    kind: TurnKind
    todo_id: Id | None
    attempt: int = Field(ge=1)
    instructions: Text
    resume_host_session: bool
    reconcile_note: Text | None = None
    recovers_turn_id: Id | None = None


class TurnEnvelope(KernelModel):
    turn_id: Id
    session_id: UuidStr
    generation: int = Field(ge=1)
    goal_id: Id
    todo_id: Id | None
    attempt: int = Field(ge=1)
    kind: TurnKind
    instructions: Text
    contract: InteractionContract
    idempotency_key: str
    resume_host_session: bool
    reconcile_note: Text | None = None
    recovers_turn_id: Id | None = None

    @model_validator(mode="after")
    def _key_is_derived(self) -> Self:
        # The key is a function of the identity; accepting any other value would
        # let two attempts share a key and make a provider skip a real effect.
        expected = derive_idempotency_key(self.session_id, self.turn_id, self.attempt)
        if self.idempotency_key != expected:
            raise ValueError("idempotency_key is not derived from session, turn and attempt")
        if self.recovers_turn_id == self.turn_id:
            raise ValueError("a turn cannot recover itself")
        return self

    @classmethod
    def create(
        cls,
        *,
        turn_id: str,
        session_id: str,
        generation: int,
        goal_id: str,
        spec: NextTurn,
        contract: InteractionContract,
    ) -> TurnEnvelope:
        """Build an envelope from a planned turn, deriving the idempotency key."""
        return cls(
            turn_id=turn_id,
            session_id=session_id,
            generation=generation,
            goal_id=goal_id,
            todo_id=spec.todo_id,
            attempt=spec.attempt,
            kind=spec.kind,
            instructions=spec.instructions,
            contract=contract,
            idempotency_key=derive_idempotency_key(session_id, turn_id, spec.attempt),
            resume_host_session=spec.resume_host_session,
            reconcile_note=spec.reconcile_note,
            recovers_turn_id=spec.recovers_turn_id,
        )
