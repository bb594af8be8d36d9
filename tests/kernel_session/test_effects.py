"""Step 6 in the session kernel: effect intent, outcome by readback, rejection, and the
rule that a turn completes only when every effect it requested has an outcome."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import JsonValue, ValidationError

from tests.kernel_session.helpers import (
    OWNER,
    Harness,
    accept,
    at,
    envelope,
    new_session,
    snapshot,
    start_host,
)
from turnkeeper.errors import Aborted, AlreadyExists, FailedPrecondition, InvalidArgument
from turnkeeper.kernel.session import (
    MAX_EFFECTS_PER_TURN,
    AcquireLease,
    CompleteTurn,
    EffectIntended,
    EffectReadback,
    EffectRef,
    EffectResolved,
    LeaseToken,
    ReceiptSuccess,
    RecordEffectIntended,
    RecordEffectRejected,
    RecordEffectResolved,
    RecordEffects,
    RecordReceipt,
    RecordWriteBack,
    derive_effect_key,
    fold_session,
    plan_effects,
)

HTTP: dict[str, JsonValue] = {"provider": "http", "request": {"body": {"n": 1}}}
APPLIED = EffectReadback(status="applied", value={"n": 1})
UNKNOWN = EffectReadback(status="unknown", detail="HTTP 503")


def written_back(effects: Any, turn_id: str = "t1") -> Harness:
    h = new_session()
    accept(h, turn_id)
    start_host(h, turn_id)
    receipt = ReceiptSuccess(result={"summary": "done", "effects": effects})
    h.run(RecordReceipt(lease=h.token, turn_id=turn_id, receipt=receipt))
    h.run(RecordWriteBack(lease=h.token, turn_id=turn_id))
    return h


def key(h: Harness, n: int, turn_id: str = "t1") -> str:
    return derive_effect_key(envelope(h, turn_id).idempotency_key, n)


def intend(h: Harness, n: int = 0, **overrides: Any) -> RecordEffectIntended:
    fields: dict[str, Any] = {
        "lease": h.token,
        "turn_id": "t1",
        "effect_id": f"e{n}",
        "idempotency_key": key(h, n),
        "provider": "http",
        "request": {"body": {"n": 1}},
    }
    fields.update(overrides)
    return RecordEffectIntended(**fields)


def resolve(
    h: Harness, n: int = 0, readback: EffectReadback = APPLIED, **overrides: Any
) -> RecordEffectResolved:
    fields: dict[str, Any] = {
        "lease": h.token,
        "turn_id": "t1",
        "effect_id": f"e{n}",
        "outcome": "applied" if readback.status == "applied" else "indeterminate",
        "readback": readback,
        "apply_called": True,
    }
    fields.update(overrides)
    return RecordEffectResolved(**fields)


def complete(h: Harness) -> CompleteTurn:
    return CompleteTurn(lease=h.token, turn_id="t1", snapshot=snapshot())


# --- the plan -------------------------------------------------------------------------


def test_keys_derive_from_the_turn_key_and_position() -> None:
    result: dict[str, JsonValue] = {"effects": [HTTP, {"provider": "cmd"}]}
    plan = plan_effects(result, "tkturn1-abc")
    assert [(p.effect_id, p.idempotency_key, p.provider) for p in plan] == [
        ("e0", "tkturn1-abc-e0", "http"),
        ("e1", "tkturn1-abc-e1", "cmd"),
    ]
    assert plan[1].request == {}
    assert plan_effects(result, "tkturn1-abc") == plan  # stable: a restart derives the same
    assert plan_effects({"summary": "x"}, "k") == ()


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("not an object", "malformed_effect"),
        ({"provider": "http", "request": [1]}, "malformed_effect"),
        ({"provider": "bad name!", "request": {}}, "malformed_effect"),
        ({"provider": "http", "surprise": 1}, "malformed_effect"),
        ({"request": {}}, "malformed_effect"),
    ],
)
def test_malformed_entries_are_planned_as_rejected(entry: JsonValue, reason: str) -> None:
    (planned,) = plan_effects({"effects": [entry]}, "k")
    assert planned.rejection == reason
    assert planned.detail


def test_too_many_effects_reject_them_all_and_a_non_list_is_one_rejection() -> None:
    many = plan_effects({"effects": [HTTP] * (MAX_EFFECTS_PER_TURN + 1)}, "k")
    assert len(many) == MAX_EFFECTS_PER_TURN
    assert {p.rejection for p in many} == {"too_many_effects"}
    (single,) = plan_effects({"effects": {"provider": "http"}}, "k")
    assert single.rejection == "malformed_effects"


# --- intent and outcome -------------------------------------------------------------------


def test_intent_then_readback_outcome_then_completion() -> None:
    h = written_back([HTTP])
    events = h.run(intend(h))
    assert events == [
        EffectIntended(
            turn_id="t1",
            effect_id="e0",
            idempotency_key=key(h, 0),
            provider="http",
            request={"body": {"n": 1}},
            at=h.now,
        )
    ]
    turn = h.s.in_flight
    assert turn is not None and turn.phase == "effects"
    assert turn.effects == (
        EffectRef(effect_id="e0", idempotency_key=key(h, 0), provider="http", outcome="open"),
    )
    h.rejects(complete(h), FailedPrecondition, "effects_unresolved")
    assert h.run(resolve(h)) == [
        EffectResolved(
            turn_id="t1",
            effect_id="e0",
            idempotency_key=key(h, 0),
            outcome="applied",
            readback=APPLIED,
            apply_called=True,
            at=h.now,
        )
    ]
    assert h.s.counters.effects_applied == 1
    h.run(complete(h))
    assert h.s.in_flight is None and h.s.counters.turns_completed == 1
    assert fold_session(h.events) == h.s


def test_every_requested_effect_needs_an_outcome_before_completion() -> None:
    h = written_back([HTTP, HTTP])
    h.rejects(complete(h), FailedPrecondition, "effects_unresolved")
    h.run(intend(h, 0))
    h.run(resolve(h, 0))
    err = h.rejects(complete(h), FailedPrecondition, "effects_unresolved")
    assert err.details["effect_ids"] == "e1"
    h.run(intend(h, 1))
    h.run(resolve(h, 1, UNKNOWN, apply_called=False))
    assert h.s.counters.effects_indeterminate == 1
    h.run(complete(h))


def test_intent_must_match_the_receipt() -> None:
    h = written_back([HTTP, "junk"])
    h.rejects(intend(h, idempotency_key="tkturn1-forged-e0"), InvalidArgument, "effect_mismatch")
    h.rejects(intend(h, provider="command"), InvalidArgument, "effect_mismatch")
    h.rejects(intend(h, request={"body": {"n": 2}}), InvalidArgument, "effect_mismatch")
    h.rejects(intend(h, 5, effect_id="e5"), InvalidArgument, "effect_not_requested")
    h.rejects(intend(h, 1), FailedPrecondition, "malformed_effect")


def test_intent_needs_the_write_back_first() -> None:
    h = new_session()
    accept(h, "t1")
    start_host(h, "t1")
    receipt = ReceiptSuccess(result={"effects": [HTTP]})
    h.run(RecordReceipt(lease=h.token, turn_id="t1", receipt=receipt))
    h.rejects(intend(h), FailedPrecondition, "write_back_missing")


def test_retries_join_and_outcomes_are_final() -> None:
    h = written_back([HTTP])
    h.run(intend(h))
    assert h.run(intend(h)) == []
    h.run(resolve(h, 0, UNKNOWN, apply_called=False))
    # Invariant 3: an indeterminate effect is never turned into a retry or an apply.
    assert h.run(resolve(h, 0, UNKNOWN, apply_called=False)) == []
    h.rejects(resolve(h, 0, APPLIED), FailedPrecondition, "effect_already_resolved")
    assert h.run(intend(h)) == []  # a re-intent changes nothing either
    assert h.s.in_flight is not None and h.s.in_flight.effects[0].outcome == "indeterminate"


def test_outcome_needs_an_intent_and_must_agree_with_its_readback() -> None:
    h = written_back([HTTP])
    h.rejects(resolve(h), FailedPrecondition, "effect_not_intended")
    h.run(intend(h))
    absent = EffectReadback(status="not_applied")
    h.rejects(
        resolve(h, 0, absent, outcome="applied"), InvalidArgument, "readback_contradicts_outcome"
    )
    h.rejects(
        resolve(h, 0, APPLIED, outcome="indeterminate"),
        InvalidArgument,
        "readback_contradicts_outcome",
    )
    # Applied once but not confirmed by readback: indeterminate, not a second apply.
    h.run(resolve(h, 0, absent, outcome="indeterminate"))


def test_rejection_is_final_and_excludes_intent() -> None:
    h = written_back([HTTP, {"provider": "unconfigured"}])
    h.run(RecordEffectRejected(lease=h.token, turn_id="t1", effect_id="e1", reason="no_provider"))
    assert (
        h.run(
            RecordEffectRejected(lease=h.token, turn_id="t1", effect_id="e1", reason="no_provider")
        )
        == []
    )
    h.rejects(
        intend(h, 1, provider="unconfigured", request={}), FailedPrecondition, "effect_rejected"
    )
    h.run(intend(h, 0))
    h.rejects(
        RecordEffectRejected(lease=h.token, turn_id="t1", effect_id="e0", reason="late"),
        AlreadyExists,
        "effect_already_intended",
    )
    h.rejects(resolve(h, 1), FailedPrecondition, "effect_not_intended")
    h.run(resolve(h, 0))
    assert h.s.counters.effects_rejected == 1
    h.run(complete(h))


def test_summary_lists_the_ledger() -> None:
    h = written_back([HTTP])
    h.rejects(RecordEffects(lease=h.token, turn_id="t1"), FailedPrecondition, "effects_unresolved")
    h.run(intend(h))
    h.run(resolve(h))
    turn = h.s.in_flight
    assert turn is not None
    (recorded,) = h.run(RecordEffects(lease=h.token, turn_id="t1", effects=turn.effects))
    assert recorded.type == "turn.effects_recorded"
    h.run(complete(h))


def test_effect_commands_are_fenced_by_the_lease() -> None:
    h = written_back([HTTP])
    stale = LeaseToken(owner=OWNER, epoch=h.s.lease.epoch)
    h.run(AcquireLease(owner="worker-b", expires_at=at(7200)), now=at(3601))
    h.rejects(intend(h, lease=stale), Aborted, "stale_lease", now=at(3602))
    h.run(intend(h), now=at(3602))
    h.rejects(resolve(h), Aborted, "lease_expired", now=at(7201))


def test_readback_values_are_bounded() -> None:
    with pytest.raises(ValidationError):
        EffectReadback(status="applied", value="x" * 9_000)
    assert EffectReadback(status="applied", value="x" * 8_000).value


def test_stop_is_refused_while_an_effect_outcome_is_open() -> None:
    from turnkeeper.errors import FailedPrecondition
    from turnkeeper.kernel.session import SetStatus

    h = written_back([HTTP])
    h.run(intend(h))
    h.rejects(SetStatus(lease=h.token, action="stop"), FailedPrecondition, "effects_open")
    h.run(resolve(h))
    assert h.run(SetStatus(lease=h.token, action="stop"))  # settled: the stop may abandon
