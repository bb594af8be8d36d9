"""The turn transaction: every step accepted in order, every out-of-order step rejected."""

from __future__ import annotations

import pytest

from tests.kernel_session.helpers import (
    GOAL,
    HANDLE,
    HOST,
    accept,
    at,
    complete_turn,
    envelope,
    failure,
    new_session,
    proc,
    snapshot,
    spec,
    start_host,
    success,
)
from turnkeeper.errors import AlreadyExists, InvalidArgument, NotFound
from turnkeeper.host_reports import HostEvent
from turnkeeper.kernel.session import (
    AcceptTurn,
    CompleteTurn,
    CreateSession,
    EffectRef,
    EffectsRecorded,
    HostEventsJournaled,
    HostStarted,
    ProposalDecision,
    ReceiptFailure,
    ReceiptRecorded,
    RecordEffects,
    RecordHostEvents,
    RecordHostStarted,
    RecordReceipt,
    RecordWriteBack,
    TurnAccepted,
    TurnCompleted,
    TurnFailed,
    WrittenBack,
    decide_session,
)


def _events(n: int, first: int = 1) -> tuple[HostEvent, ...]:
    return tuple(HostEvent(seq=first + i, kind="item.completed") for i in range(n))


def test_create_session_and_retry_joins() -> None:
    h = new_session()
    assert h.s.status == "ready"
    assert h.s.lease.epoch == 1
    same = CreateSession(session_id=h.s.session_id, goal_id=GOAL, workspace="/ws", host_kind=HOST)
    assert h.run(same) == []
    other = CreateSession(session_id=h.s.session_id, goal_id=GOAL, workspace="/x", host_kind=HOST)
    h.rejects(other, AlreadyExists, "session_exists")


def test_command_on_missing_session_is_not_found() -> None:
    h = new_session()
    with pytest.raises(NotFound) as info:
        decide_session(None, AcceptTurn(lease=h.token, envelope=envelope(h, "t1")), at(1))
    assert info.value.reason == "session_not_found"


def test_naive_now_is_rejected() -> None:
    h = new_session()
    with pytest.raises(InvalidArgument) as info:
        decide_session(
            h.state,
            AcceptTurn(lease=h.token, envelope=envelope(h, "t1")),
            at(1).replace(tzinfo=None),
        )
    assert info.value.reason == "naive_datetime"


def test_full_turn_emits_each_step_once_in_order() -> None:
    h = new_session()
    env = envelope(h, "t1")
    assert h.run(AcceptTurn(lease=h.token, envelope=env)) == [TurnAccepted(envelope=env, at=h.now)]
    assert h.s.status == "running"
    assert h.s.in_flight is not None and h.s.in_flight.phase == "accepted"

    started = h.run(
        RecordHostStarted(
            lease=h.token, turn_id="t1", host_kind=HOST, process=proc(), host_session_handle=HANDLE
        )
    )
    assert started == [
        HostStarted(
            turn_id="t1", host_kind=HOST, process=proc(), host_session_handle=HANDLE, at=h.now
        )
    ]
    assert h.s.host_session_handle == HANDLE

    batch = _events(3)
    assert h.run(RecordHostEvents(lease=h.token, turn_id="t1", events=batch)) == [
        HostEventsJournaled(turn_id="t1", events=batch, at=h.now)
    ]
    h.run(RecordHostEvents(lease=h.token, turn_id="t1", events=_events(2, first=4)))
    assert h.s.in_flight is not None and h.s.in_flight.last_host_seq == 5

    receipt = success()
    assert h.run(RecordReceipt(lease=h.token, turn_id="t1", receipt=receipt)) == [
        ReceiptRecorded(turn_id="t1", receipt=receipt, at=h.now)
    ]
    assert h.s.in_flight is not None and h.s.in_flight.receipt == receipt

    acc = (ProposalDecision(proposal_id="p1"),)
    rej = (ProposalDecision(proposal_id="p2", reason="gate not resolved"),)
    assert h.run(RecordWriteBack(lease=h.token, turn_id="t1", accepted=acc, rejected=rej)) == [
        WrittenBack(turn_id="t1", accepted=acc, rejected=rej, at=h.now)
    ]
    assert h.run(RecordEffects(lease=h.token, turn_id="t1")) == [
        EffectsRecorded(turn_id="t1", at=h.now)
    ]
    snap = snapshot()
    assert h.run(CompleteTurn(lease=h.token, turn_id="t1", snapshot=snap)) == [
        TurnCompleted(turn_id="t1", snapshot=snap, at=h.now)
    ]
    s = h.s
    assert s.in_flight is None
    assert s.status == "ready"
    assert s.last_completed is not None and s.last_completed.snapshot == snap
    assert s.last_turn_end is not None and s.last_turn_end.outcome == "completed"
    assert s.counters.turns_accepted == 1
    assert s.counters.turns_completed == 1
    assert s.counters.host_events == 5


def test_effects_step_is_optional() -> None:
    h = new_session()
    complete_turn(h, "t1")
    assert h.s.counters.turns_completed == 1


def test_effects_summary_must_match_the_ledger() -> None:
    """Effect outcomes come from intent and readback (test_effects.py), never from a
    summary: refs the kernel did not record are refused."""
    h = new_session()
    accept(h, "t1")
    start_host(h, "t1")
    h.run(RecordReceipt(lease=h.token, turn_id="t1", receipt=success()))
    h.run(RecordWriteBack(lease=h.token, turn_id="t1"))
    ref = EffectRef(effect_id="e1", idempotency_key="k", provider="http", outcome="applied")
    h.rejects(
        RecordEffects(lease=h.token, turn_id="t1", effects=(ref,)),
        InvalidArgument,
        "effects_mismatch",
    )


def test_failure_receipt_fails_the_turn_and_awaits_recovery() -> None:
    h = new_session()
    accept(h, "t1")
    start_host(h, "t1")
    receipt = failure(h, "t1")
    events = h.run(RecordReceipt(lease=h.token, turn_id="t1", receipt=receipt))
    assert events == [
        ReceiptRecorded(turn_id="t1", receipt=receipt, at=h.now),
        TurnFailed(turn_id="t1", error_kind="signal", message="killed", at=h.now),
    ]
    s = h.s
    assert s.in_flight is None
    assert s.consecutive_host_failures == 1
    assert s.counters.turns_failed == 1
    assert s.recovery is not None
    assert (s.recovery.turn_id, s.recovery.status, s.recovery.cause) == (
        "t1",
        "awaiting_resolution",
        "failed",
    )


def test_spawn_failure_needs_no_host_started() -> None:
    h = new_session()
    accept(h, "t1")
    receipt = ReceiptFailure.model_validate(
        {**failure(h, "t1").model_dump(), "error_kind": "spawn"}
    )
    events = h.run(RecordReceipt(lease=h.token, turn_id="t1", receipt=receipt))
    assert [e.type for e in events] == ["turn.receipt_recorded", "turn.failed"]


def test_completed_turn_resets_consecutive_host_failures() -> None:
    h = new_session()
    accept(h, "t0", spec(kind="repair", todo_id=None))
    start_host(h, "t0")
    h.run(RecordReceipt(lease=h.token, turn_id="t0", receipt=failure(h, "t0")))
    assert h.s.consecutive_host_failures == 1
    complete_turn(h, "t1", spec(kind="repair", todo_id=None))
    assert h.s.consecutive_host_failures == 0
