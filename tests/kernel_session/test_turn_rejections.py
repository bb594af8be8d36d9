"""Out-of-order and invalid steps of the turn transaction: typed rejections, nothing emitted."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.kernel_session.helpers import (
    CONTRACT,
    HOST,
    OTHER_SID,
    accept,
    complete_turn,
    envelope,
    fail_turn,
    failure,
    finish,
    new_session,
    proc,
    snapshot,
    spec,
    start_host,
    success,
)
from turnkeeper.errors import Aborted, AlreadyExists, FailedPrecondition, InvalidArgument
from turnkeeper.host_reports import HostEvent
from turnkeeper.kernel.session import (
    AcceptTurn,
    CompleteTurn,
    ProposalDecision,
    RecordEffects,
    RecordHostEvents,
    RecordHostStarted,
    RecordReceipt,
    RecordWriteBack,
    TurnEnvelope,
    derive_idempotency_key,
)


def _events(n: int, first: int = 1) -> tuple[HostEvent, ...]:
    return tuple(HostEvent(seq=first + i, kind="item.completed") for i in range(n))


def test_second_turn_while_one_is_in_flight() -> None:
    h = new_session()
    accept(h, "t1")
    h.rejects(
        AcceptTurn(lease=h.token, envelope=envelope(h, "t2")), FailedPrecondition, "turn_in_flight"
    )


def test_retried_accept_joins_and_reused_id_is_rejected() -> None:
    h = new_session()
    env = envelope(h, "t1")
    h.run(AcceptTurn(lease=h.token, envelope=env))
    assert h.run(AcceptTurn(lease=h.token, envelope=env)) == []
    other = envelope(h, "t1", spec(todo_id="todo-9"))
    h.rejects(AcceptTurn(lease=h.token, envelope=other), AlreadyExists, "turn_id_reused")


def test_turn_id_of_a_finished_turn_cannot_be_reused() -> None:
    h = new_session()
    complete_turn(h, "t1")
    h.rejects(
        AcceptTurn(lease=h.token, envelope=envelope(h, "t1")), AlreadyExists, "turn_id_reused"
    )


def test_envelope_for_another_session_goal_or_generation() -> None:
    h = new_session()

    def env(**over: object) -> TurnEnvelope:
        data = {**envelope(h, "t1").model_dump(), **over}
        data["idempotency_key"] = derive_idempotency_key(str(data["session_id"]), "t1", 1)
        return TurnEnvelope.model_validate(data)

    h.rejects(
        AcceptTurn(lease=h.token, envelope=env(session_id=OTHER_SID)),
        InvalidArgument,
        "session_mismatch",
    )
    h.rejects(
        AcceptTurn(lease=h.token, envelope=env(goal_id="goal-x")), InvalidArgument, "goal_mismatch"
    )
    h.rejects(AcceptTurn(lease=h.token, envelope=env(generation=2)), Aborted, "stale_generation")


def test_envelope_idempotency_key_must_be_derived() -> None:
    h = new_session()
    data = envelope(h, "t1").model_dump()
    data["idempotency_key"] = "made-up"
    with pytest.raises(ValidationError):
        TurnEnvelope.model_validate(data)
    key = derive_idempotency_key(h.s.session_id, "t1", 1)
    assert key == derive_idempotency_key(h.s.session_id, "t1", 1)
    assert key != derive_idempotency_key(h.s.session_id, "t1", 2)
    assert key != derive_idempotency_key(h.s.session_id, "t2", 1)


def test_resume_without_bound_host_session() -> None:
    h = new_session()
    h.rejects(
        AcceptTurn(
            lease=h.token, envelope=envelope(h, "t1", spec(kind="continuation", resume=True))
        ),
        FailedPrecondition,
        "no_host_session",
    )


def test_recovers_a_turn_that_has_no_pending_recovery() -> None:
    h = new_session()
    env = envelope(h, "t1", spec(kind="continuation", recovers="t0", attempt=2))
    h.rejects(AcceptTurn(lease=h.token, envelope=env), FailedPrecondition, "turn_not_recoverable")


def test_steps_for_a_turn_that_is_not_in_flight() -> None:
    h = new_session()
    accept(h, "t1")
    h.rejects(
        RecordHostStarted(lease=h.token, turn_id="t9", host_kind=HOST, process=proc()),
        FailedPrecondition,
        "turn_not_in_flight",
    )
    h.rejects(
        RecordReceipt(lease=h.token, turn_id="t9", receipt=success()),
        FailedPrecondition,
        "turn_not_in_flight",
    )


def test_receipt_before_host_started() -> None:
    h = new_session()
    accept(h, "t1")
    h.rejects(
        RecordReceipt(lease=h.token, turn_id="t1", receipt=success()),
        FailedPrecondition,
        "host_not_started",
    )
    h.rejects(
        RecordReceipt(lease=h.token, turn_id="t1", receipt=failure(h, "t1")),
        FailedPrecondition,
        "host_not_started",
    )


def test_host_started_twice_and_wrong_host_kind() -> None:
    h = new_session()
    accept(h, "t1")
    h.rejects(
        RecordHostStarted(lease=h.token, turn_id="t1", host_kind="claude", process=proc()),
        FailedPrecondition,
        "host_kind_mismatch",
    )
    start_host(h, "t1")
    h.rejects(
        RecordHostStarted(lease=h.token, turn_id="t1", host_kind=HOST, process=proc()),
        FailedPrecondition,
        "host_already_started",
    )


def test_host_events_ordering() -> None:
    h = new_session()
    accept(h, "t1")
    h.rejects(
        RecordHostEvents(lease=h.token, turn_id="t1", events=_events(1)),
        FailedPrecondition,
        "host_not_started",
    )
    start_host(h, "t1")
    h.rejects(
        RecordHostEvents(lease=h.token, turn_id="t1", events=_events(1, first=2)),
        FailedPrecondition,
        "host_seq_gap",
    )
    bad_batch = (HostEvent(seq=1, kind="a"), HostEvent(seq=3, kind="b"))
    h.rejects(
        RecordHostEvents(lease=h.token, turn_id="t1", events=bad_batch),
        InvalidArgument,
        "host_seq_gap",
    )
    h.run(RecordHostEvents(lease=h.token, turn_id="t1", events=_events(2)))
    h.rejects(
        RecordHostEvents(lease=h.token, turn_id="t1", events=_events(1, first=2)),
        FailedPrecondition,
        "host_seq_repeat",
    )
    h.rejects(
        RecordHostEvents(lease=h.token, turn_id="t1", events=_events(1, first=1)),
        FailedPrecondition,
        "host_seq_repeat",
    )
    h.rejects(
        RecordHostEvents(lease=h.token, turn_id="t1", events=_events(1, first=4)),
        FailedPrecondition,
        "host_seq_gap",
    )
    h.run(RecordReceipt(lease=h.token, turn_id="t1", receipt=success()))
    h.rejects(
        RecordHostEvents(lease=h.token, turn_id="t1", events=_events(1, first=3)),
        FailedPrecondition,
        "receipt_already_recorded",
    )


def test_empty_host_event_batch_is_invalid() -> None:
    h = new_session()
    with pytest.raises(ValidationError):
        RecordHostEvents(lease=h.token, turn_id="t1", events=())


def test_host_handle_binding_rules() -> None:
    h = new_session()
    accept(h, "t1")
    start_host(h, "t1", handle=None)
    # The handle learned from a host event binds the session.
    h.run(
        RecordHostEvents(lease=h.token, turn_id="t1", events=_events(1), host_session_handle="th-A")
    )
    assert h.s.host_session_handle == "th-A"
    h.rejects(
        RecordHostEvents(
            lease=h.token, turn_id="t1", events=_events(1, first=2), host_session_handle="th-B"
        ),
        FailedPrecondition,
        "host_handle_mismatch",
    )
    finish(h, "t1")
    # A resumed turn must report the same host session.
    accept(h, "t2", spec(kind="continuation", resume=True))
    h.rejects(
        RecordHostStarted(
            lease=h.token, turn_id="t2", host_kind=HOST, process=proc(), host_session_handle="th-B"
        ),
        FailedPrecondition,
        "host_handle_mismatch",
    )
    start_host(h, "t2", handle="th-A")


def test_receipt_twice_and_write_back_out_of_order() -> None:
    h = new_session()
    accept(h, "t1")
    h.rejects(RecordWriteBack(lease=h.token, turn_id="t1"), FailedPrecondition, "receipt_missing")
    start_host(h, "t1")
    h.rejects(
        CompleteTurn(lease=h.token, turn_id="t1", snapshot=snapshot()),
        FailedPrecondition,
        "write_back_missing",
    )
    h.run(RecordReceipt(lease=h.token, turn_id="t1", receipt=success()))
    h.rejects(
        RecordReceipt(lease=h.token, turn_id="t1", receipt=success()),
        FailedPrecondition,
        "receipt_already_recorded",
    )
    h.rejects(RecordEffects(lease=h.token, turn_id="t1"), FailedPrecondition, "write_back_missing")
    dup = (ProposalDecision(proposal_id="p1"),)
    h.rejects(
        RecordWriteBack(lease=h.token, turn_id="t1", accepted=dup, rejected=dup),
        InvalidArgument,
        "duplicate_proposal",
    )
    h.run(RecordWriteBack(lease=h.token, turn_id="t1"))
    h.rejects(
        RecordWriteBack(lease=h.token, turn_id="t1"), FailedPrecondition, "already_written_back"
    )


def test_second_terminal_is_rejected() -> None:
    h = new_session()
    complete_turn(h, "t1")
    h.rejects(
        CompleteTurn(lease=h.token, turn_id="t1", snapshot=snapshot()),
        FailedPrecondition,
        "turn_already_terminal",
    )


def test_failed_turn_takes_no_further_steps() -> None:
    h = new_session()
    fail_turn(h, "t1")
    h.rejects(
        RecordWriteBack(lease=h.token, turn_id="t1"), FailedPrecondition, "turn_already_terminal"
    )
    h.rejects(
        CompleteTurn(lease=h.token, turn_id="t1", snapshot=snapshot()),
        FailedPrecondition,
        "turn_already_terminal",
    )


def test_new_work_waits_for_an_unresolved_recovery_but_repair_may_run() -> None:
    h = new_session()
    fail_turn(h, "t1")
    h.rejects(
        AcceptTurn(lease=h.token, envelope=envelope(h, "t2")),
        FailedPrecondition,
        "recovery_unresolved",
    )
    accept(h, "t2", spec(kind="repair", todo_id=None))
    assert h.s.recovery is not None and h.s.recovery.turn_id == "t1"


def test_contract_is_part_of_the_envelope() -> None:
    h = new_session()
    env = envelope(h, "t1")
    assert env.contract == CONTRACT
    assert env.idempotency_key.startswith("tkturn1-")
