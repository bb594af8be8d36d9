"""Turns lost on restore and terminals for turns this session never bound."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.kernel_session.helpers import (
    HOST,
    accept,
    complete_turn,
    envelope,
    fail_turn,
    new_session,
    proc,
    spec,
    start_host,
    success,
)
from turnkeeper.errors import FailedPrecondition
from turnkeeper.kernel.session import (
    UNBOUND_RESTORED_TURN_LOST,
    AbandonTurn,
    AcceptTurn,
    LossProof,
    RecordHostStarted,
    RecordReceipt,
    RecordTurnLost,
    ReportUnboundTurn,
    SessionDiagnostic,
    TurnAbandoned,
    TurnLost,
    UnboundTurnRestored,
)

KILLED = LossProof(ended="killed", killed_pids=(4242, 4243), process=proc(), detail="marker search")


def test_lost_turn_queues_a_resuming_continuation_with_a_reconcile_note() -> None:
    h = new_session()
    accept(h, "t1")
    start_host(h, "t1")
    events = h.run(RecordTurnLost(lease=h.token, turn_id="t1", proof=KILLED))
    assert len(events) == 1 and isinstance(events[0], TurnLost)
    lost = events[0]
    assert lost.cause == "lost_on_restore" and lost.proof == KILLED
    nxt = lost.next
    assert nxt is not None
    assert (nxt.kind, nxt.attempt, nxt.resume_host_session, nxt.recovers_turn_id) == (
        "continuation",
        2,
        True,
        "t1",
    )
    assert nxt.reconcile_note is not None and "reconcile" in nxt.reconcile_note
    s = h.s
    assert s.in_flight is None and s.counters.turns_lost == 1
    assert s.consecutive_host_failures == 0  # a restart is not a host failure
    assert s.recovery is not None and s.recovery.status == "resolved"
    # The lost step is never replayed: its host step cannot be recorded again.
    h.rejects(
        RecordHostStarted(lease=h.token, turn_id="t1", host_kind=HOST, process=proc()),
        FailedPrecondition,
        "host_step_recovered",
    )
    h.rejects(
        AcceptTurn(lease=h.token, envelope=envelope(h, "t2", spec(todo_id="todo-2"))),
        FailedPrecondition,
        "recovery_continuation_expected",
    )
    accept(h, "t2", nxt)
    assert h.s.recovery is None and h.s.counters.turns_recovered == 1


def test_accepted_turn_without_host_identity_can_be_lost() -> None:
    h = new_session()
    accept(h, "t1")
    proof = LossProof(ended="proven_gone", detail="no process carries the turn marker")
    (event,) = h.run(RecordTurnLost(lease=h.token, turn_id="t1", proof=proof))
    assert isinstance(event, TurnLost)
    # No host session was ever bound, so the continuation is a fresh retry.
    assert event.next is not None and (event.next.kind, event.next.resume_host_session) == (
        "retry",
        False,
    )


def test_killed_proof_must_name_pids() -> None:
    with pytest.raises(ValidationError):
        LossProof(ended="killed")


def test_turn_with_a_receipt_is_not_lost() -> None:
    h = new_session()
    accept(h, "t1")
    start_host(h, "t1")
    h.run(RecordReceipt(lease=h.token, turn_id="t1", receipt=success()))
    h.rejects(
        RecordTurnLost(lease=h.token, turn_id="t1", proof=KILLED),
        FailedPrecondition,
        "turn_has_receipt",
    )


def test_lost_for_a_turn_not_in_flight() -> None:
    h = new_session()
    h.rejects(
        RecordTurnLost(lease=h.token, turn_id="t1", proof=KILLED),
        FailedPrecondition,
        "turn_not_in_flight",
    )
    complete_turn(h, "t1")
    h.rejects(
        RecordTurnLost(lease=h.token, turn_id="t1", proof=KILLED),
        FailedPrecondition,
        "turn_already_terminal",
    )


def test_lost_repair_turn_keeps_the_older_recovery() -> None:
    h = new_session()
    fail_turn(h, "t1")
    accept(h, "r1", spec(kind="repair", todo_id=None))
    (event,) = h.run(RecordTurnLost(lease=h.token, turn_id="r1", proof=KILLED))
    assert isinstance(event, TurnLost) and event.next is None
    assert h.s.recovery is not None and h.s.recovery.turn_id == "t1"


def test_abandon() -> None:
    h = new_session()
    accept(h, "t1")
    assert h.run(AbandonTurn(lease=h.token, turn_id="t1", reason="superseded")) == [
        TurnAbandoned(turn_id="t1", reason="superseded", at=h.now)
    ]
    h.rejects(
        AbandonTurn(lease=h.token, turn_id="t1", reason="again"),
        FailedPrecondition,
        "turn_already_terminal",
    )


# --- unbound turns ------------------------------------------------------------------


def test_unbound_turn_lost_on_restore_is_restored_history() -> None:
    h = new_session()
    accept(h, "t3")
    start_host(h, "t3")
    before = h.s.in_flight
    events = h.run(
        ReportUnboundTurn(
            lease=h.token, turn_id="t2", terminal="lost", cause="lost_on_restore", detail="seq 20"
        )
    )
    assert events == [
        UnboundTurnRestored(turn_id="t2", detail="seq 20", at=h.now),
        SessionDiagnostic(
            code=UNBOUND_RESTORED_TURN_LOST,
            turn_id="t2",
            message="a turn this session never bound was lost on restore; kept as history",
            at=h.now,
        ),
    ]
    # The session keeps its own turn and records no failure.
    assert h.s.in_flight == before
    assert h.s.counters.turns_failed == 0 and h.s.counters.turns_lost == 0
    assert h.s.counters.unbound_restored_turns == 1
    assert (
        h.s.last_diagnostic is not None and h.s.last_diagnostic.code == UNBOUND_RESTORED_TURN_LOST
    )


@pytest.mark.parametrize(
    ("terminal", "cause"),
    [
        ("completed", None),
        ("failed", "exit_code"),
        ("failed", "lost_on_restore"),
        ("lost", None),
        ("lost", "timeout"),
    ],
)
def test_other_terminals_for_an_unbound_turn_are_protocol_errors(
    terminal: str, cause: str | None
) -> None:
    h = new_session()
    accept(h, "t3")
    cmd = ReportUnboundTurn.model_validate(
        {"lease": h.token.model_dump(), "turn_id": "t2", "terminal": terminal, "cause": cause}
    )
    h.rejects(cmd, FailedPrecondition, "turn_binding_mismatch")


def test_report_for_a_bound_turn_is_refused() -> None:
    h = new_session()
    accept(h, "t1")
    cmd = ReportUnboundTurn(lease=h.token, turn_id="t1", terminal="lost", cause="lost_on_restore")
    h.rejects(cmd, FailedPrecondition, "turn_is_bound")
