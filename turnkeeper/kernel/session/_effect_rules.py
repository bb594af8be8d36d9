"""Step 6 of the turn transaction: decisions on effects, and how their events fold.

The kernel checks each effect against the plan it derives from the turn's durable
receipt (:func:`~turnkeeper.kernel.session.effects.plan_effects`), so an intent
can only name an effect the agent asked for, under the key derived for it. The
ledger in :class:`InFlightTurn` keeps one entry per effect: ``open`` from the
durable intent until the outcome, established by readback, is recorded.
Invariant 3 rests on three rules here: an outcome needs an intent, a recorded
outcome is final (``indeterminate`` is never turned into a retry), and a turn
completes only when every requested effect has an outcome.
"""

from __future__ import annotations

from datetime import datetime

from turnkeeper.errors import AlreadyExists, DataLoss, FailedPrecondition, InvalidArgument
from turnkeeper.kernel.session import commands as cmd
from turnkeeper.kernel.session import events as ev
from turnkeeper.kernel.session.effects import PlannedEffect, plan_effects
from turnkeeper.kernel.session.events import SessionEvent
from turnkeeper.kernel.session.records import EffectRef
from turnkeeper.kernel.session.state import InFlightTurn, SessionState, TurnPhase

_EFFECT_PHASES = (TurnPhase.WRITTEN_BACK, TurnPhase.EFFECTS)


def _fail(message: str, reason: str, **details: object) -> FailedPrecondition:
    return FailedPrecondition(
        message, reason=reason, details={k: str(v) for k, v in details.items()}
    )


def planned(turn: InFlightTurn) -> tuple[PlannedEffect, ...]:
    """The effects the turn's receipt requests (none before a success receipt)."""
    if turn.receipt is None:
        return ()
    return plan_effects(turn.receipt.result, turn.envelope.idempotency_key)


def unresolved(turn: InFlightTurn) -> list[str]:
    """Requested effects with no outcome yet: never recorded, or intended and open."""
    out = []
    for item in planned(turn):
        entry = turn.effect(item.effect_id)
        if entry is None or entry.outcome == "open":
            out.append(item.effect_id)
    return out


def require_effects_settled(turn: InFlightTurn) -> None:
    pending = unresolved(turn)
    if pending:
        raise _fail(
            f"turn {turn.envelope.turn_id} has effects without an outcome: {', '.join(pending)}",
            "effects_unresolved",
            turn_id=turn.envelope.turn_id,
            effect_ids=",".join(pending),
        )


def _step_turn(turn: InFlightTurn) -> None:
    if turn.phase not in _EFFECT_PHASES:
        raise _fail(f"turn {turn.envelope.turn_id} is in phase {turn.phase}", "write_back_missing")


def _planned_item(turn: InFlightTurn, effect_id: str) -> PlannedEffect:
    item = next((p for p in planned(turn) if p.effect_id == effect_id), None)
    if item is None:
        raise InvalidArgument(
            f"the turn's result requests no effect {effect_id}",
            reason="effect_not_requested",
            details={"effect_id": effect_id},
        )
    return item


def intended(
    state: SessionState, turn: InFlightTurn, command: cmd.RecordEffectIntended, now: datetime
) -> list[SessionEvent]:
    _step_turn(turn)
    item = _planned_item(turn, command.effect_id)
    if item.rejection is not None:
        raise _fail(f"effect {item.effect_id} cannot run: {item.detail}", item.rejection)
    asked = (command.idempotency_key, command.provider, command.request)
    if asked != (item.idempotency_key, item.provider, item.request):
        # The key is derived, and the request is the agent's: anything else would
        # run an effect nobody asked for, or under a key a provider cannot dedupe.
        raise InvalidArgument(
            f"effect {item.effect_id} does not match the turn's result",
            reason="effect_mismatch",
            details={"effect_id": item.effect_id, "expected_key": item.idempotency_key},
        )
    entry = turn.effect(item.effect_id)
    if entry is not None:
        if entry.outcome == "rejected":
            raise _fail(f"effect {item.effect_id} was rejected", "effect_rejected")
        return []  # a retried intent joins the one already recorded
    return [
        ev.EffectIntended(
            turn_id=command.turn_id,
            effect_id=item.effect_id,
            idempotency_key=item.idempotency_key,
            provider=item.provider,
            request=item.request,
            at=now,
        )
    ]


def resolved(
    state: SessionState, turn: InFlightTurn, command: cmd.RecordEffectResolved, now: datetime
) -> list[SessionEvent]:
    entry = turn.effect(command.effect_id)
    if entry is None or entry.outcome == "rejected":
        # Invariant 3: an outcome (and so any apply) needs a durable intent first.
        raise _fail(f"effect {command.effect_id} has no intent", "effect_not_intended")
    seen = command.readback.status
    if (command.outcome == "applied") != (seen == "applied"):
        raise InvalidArgument(
            f"outcome {command.outcome} contradicts readback {seen}",
            reason="readback_contradicts_outcome",
            details={"effect_id": command.effect_id},
        )
    if entry.outcome != "open":
        if entry.outcome == command.outcome:
            return []  # a retried outcome joins the one already recorded
        raise _fail(
            f"effect {command.effect_id} is already {entry.outcome}",
            "effect_already_resolved",
            outcome=entry.outcome,
        )
    return [
        ev.EffectResolved(
            turn_id=command.turn_id,
            effect_id=command.effect_id,
            idempotency_key=entry.idempotency_key,
            outcome=command.outcome,
            readback=command.readback,
            apply_called=command.apply_called,
            at=now,
        )
    ]


def rejected(
    state: SessionState, turn: InFlightTurn, command: cmd.RecordEffectRejected, now: datetime
) -> list[SessionEvent]:
    _step_turn(turn)
    item = _planned_item(turn, command.effect_id)
    entry = turn.effect(item.effect_id)
    if entry is not None:
        if entry.outcome == "rejected":
            return []
        raise AlreadyExists(
            f"effect {item.effect_id} was intended: it can no longer be rejected",
            reason="effect_already_intended",
        )
    return [
        ev.EffectRejected(
            turn_id=command.turn_id,
            effect_id=item.effect_id,
            idempotency_key=item.idempotency_key,
            provider=item.provider,
            reason=command.reason,
            detail=command.detail,
            at=now,
        )
    ]


def closed(
    state: SessionState, turn: InFlightTurn, command: cmd.RecordEffects, now: datetime
) -> list[SessionEvent]:
    _step_turn(turn)
    require_effects_settled(turn)
    if command.effects and command.effects != turn.effects:
        raise InvalidArgument(
            "the effects listed differ from the recorded ledger", reason="effects_mismatch"
        )
    return [ev.EffectsRecorded(turn_id=command.turn_id, effects=turn.effects, at=now)]


# --- folding ----------------------------------------------------------------------------


def _broken(event: SessionEvent, why: str) -> DataLoss:
    return DataLoss(
        f"cannot fold {event.type}: {why}",
        reason="inconsistent_event_stream",
        details={"event_type": event.type},
    )


def fold_effect(state: SessionState, turn: InFlightTurn, event: SessionEvent) -> dict[str, object]:
    """The state update for an effect event on the in-flight ``turn``."""
    counters = state.counters.model_dump()
    match event:
        case ev.EffectIntended() | ev.EffectRejected():
            if turn.effect(event.effect_id) is not None:
                raise _broken(event, f"effect {event.effect_id} is already in the ledger")
            rejected_now = isinstance(event, ev.EffectRejected)
            entry = EffectRef(
                effect_id=event.effect_id,
                idempotency_key=event.idempotency_key,
                provider=event.provider,
                outcome="rejected" if rejected_now else "open",
            )
            effects = (*turn.effects, entry)
            counters["effects_rejected"] += int(rejected_now)
        case ev.EffectResolved():
            entry = turn.effect(event.effect_id) or _missing(event)
            if entry.outcome != "open":
                raise _broken(event, f"effect {event.effect_id} is not open")
            done = entry.model_copy(update={"outcome": event.outcome})
            effects = tuple(done if e is entry else e for e in turn.effects)
            counters[f"effects_{event.outcome}"] += 1
        case ev.EffectsRecorded():
            effects = turn.effects
        case _:  # pragma: no cover - guarded by the caller
            raise _broken(event, "not an effect event")
    return {
        "in_flight": turn.model_copy(update={"phase": TurnPhase.EFFECTS, "effects": effects}),
        "counters": type(state.counters).model_validate(counters),
    }


def _missing(event: ev.EffectResolved) -> EffectRef:
    raise _broken(event, f"effect {event.effect_id} was never intended")
