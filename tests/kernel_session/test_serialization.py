"""JSON round-trips, the recovery report and bounded state size (the kernel's purity:
tests/kernel/test_purity.py)."""

from __future__ import annotations

import json
import typing

import pytest
from pydantic import BaseModel, JsonValue, ValidationError

import turnkeeper.kernel.session as session_pkg
from tests.kernel_session.helpers import (
    OWNER,
    Harness,
    accept,
    at,
    complete_turn,
    envelope,
    fail_turn,
    new_session,
    proc,
    record,
    snapshot,
    start_host,
)
from turnkeeper.errors import DataLoss
from turnkeeper.host_reports import HostEvent, ProcessIdentity
from turnkeeper.kernel.session import (
    SESSION_COMMAND_ADAPTER,
    SESSION_EVENT_ADAPTER,
    SESSION_EVENT_SCHEMA_VERSION,
    AcquireLease,
    CompleteTurn,
    EffectReadback,
    LossProof,
    ProbedFacts,
    ProcessProbe,
    ProposalDecision,
    ReceiptSuccess,
    RecordEffectIntended,
    RecordEffectRejected,
    RecordEffectResolved,
    RecordEffects,
    RecordHostEvents,
    RecordReceipt,
    RecordRecoveryReport,
    RecordTurnLost,
    RecordWriteBack,
    RecoveryAction,
    RecoveryReport,
    RecoveryReported,
    ReleaseLease,
    RenewLease,
    ReplayedFacts,
    ReportUnboundTurn,
    ResolveHostRecovery,
    SessionState,
    SetStatus,
    TurnAccepted,
    derive_effect_key,
    event_from_json,
    event_to_json,
    evolve_session,
    fold_session,
)
from turnkeeper.kernel.session.commands import (
    BeginOperation,
    FinishOperation,
    RecordOperationStep,
)


def _report() -> RecoveryReport:
    return RecoveryReport(
        started_at=at(0),
        finished_at=at(2),
        replayed=ReplayedFacts(goal_id="goal-1", todo_lineage=("todo-1",), receipts=("t0",)),
        probed=ProbedFacts(
            probed_at=at(1),
            workspace_revision="abc123",
            workspace_dirty=True,
            dirty_diff_summary="2 files changed",
            host_processes=(ProcessProbe(process=proc(), alive=False),),
            due_monitors=("ci",),
        ),
        actions=(
            RecoveryAction(kind="killed_process", at=at(1), pids=(4242,)),
            RecoveryAction(kind="turn_marked_lost", at=at(1), turn_id="t1"),
            RecoveryAction(kind="continuation_queued", at=at(2), turn_id="t1"),
        ),
    )


def every_kind_of_event() -> Harness:
    h = new_session()
    accept(h, "t0")
    start_host(h, "t0")
    h.run(
        RecordHostEvents(
            lease=h.token, turn_id="t0", events=(HostEvent(seq=1, kind="x", data={"k": [1, None]}),)
        )
    )
    effects: list[JsonValue] = [{"provider": "http", "request": {"body": {"n": 1}}}, "bad"]
    receipt = ReceiptSuccess(result={"summary": "done", "effects": effects})
    h.run(RecordReceipt(lease=h.token, turn_id="t0", receipt=receipt))
    h.run(
        RecordWriteBack(lease=h.token, turn_id="t0", accepted=(ProposalDecision(proposal_id="p"),))
    )
    key = derive_effect_key(envelope(h, "t0").idempotency_key, 0)
    h.run(
        RecordEffectIntended(
            lease=h.token,
            turn_id="t0",
            effect_id="e0",
            idempotency_key=key,
            provider="http",
            request={"body": {"n": 1}},
        )
    )
    h.run(
        RecordEffectResolved(
            lease=h.token,
            turn_id="t0",
            effect_id="e0",
            outcome="applied",
            readback=EffectReadback(status="applied", value={"n": 1, "ok": [True, None]}),
            apply_called=True,
        )
    )
    h.run(RecordEffectRejected(lease=h.token, turn_id="t0", effect_id="e1", reason="malformed"))
    h.run(RecordEffects(lease=h.token, turn_id="t0"))
    h.run(CompleteTurn(lease=h.token, turn_id="t0", snapshot=snapshot()))
    fail_turn(h, "t1")
    h.run(ResolveHostRecovery(lease=h.token, record=record(h, "t1")))
    assert h.s.recovery is not None and h.s.recovery.next is not None
    accept(h, "t2", h.s.recovery.next)
    start_host(h, "t2")
    h.run(
        RecordTurnLost(
            lease=h.token, turn_id="t2", proof=LossProof(ended="killed", killed_pids=(1,))
        )
    )
    h.run(ReportUnboundTurn(lease=h.token, turn_id="tx", terminal="lost", cause="lost_on_restore"))
    h.run(RecordRecoveryReport(lease=h.token, report=_report()))
    assert h.s.recovery is not None and h.s.recovery.next is not None
    accept(h, "t3", h.s.recovery.next)
    h.run(SetStatus(lease=h.token, action="stop"))
    h.run(RenewLease(lease=h.token, expires_at=at(7200)))
    h.run(ReleaseLease(lease=h.token))
    h.run(AcquireLease(owner=OWNER, expires_at=at(7200)))
    # A crashed session reverted through a durable operation (joined once).
    h.run(SetStatus(lease=h.token, action="mark_crashed"))
    for request_id in ("r1", "r2"):
        h.run(
            BeginOperation(
                lease=h.token,
                request_id=request_id,
                kind="revert",
                payload_digest="p",
                executor=OWNER,
                lease_expires_at=at(7200),
                expected_generation=h.s.generation,
            )
        )
    h.run(RecordOperationStep(lease=h.token, request_id="r1", executor=OWNER, step="restored"))
    h.run(FinishOperation(lease=h.token, request_id="r1", executor=OWNER, generation=1))
    return h


def test_every_event_type_round_trips_losslessly() -> None:
    h = every_kind_of_event()
    assert {e.type for e in h.events} == {m.model_fields["type"].default for m in _event_classes()}
    for event in h.events:
        text = event_to_json(event)
        assert event_from_json(text) == event
        assert event_to_json(event_from_json(text)) == text
        assert event.schema_version == SESSION_EVENT_SCHEMA_VERSION == 2
    rebuilt = fold_session(event_from_json(event_to_json(e)) for e in h.events)
    assert rebuilt == h.s
    assert SessionState.model_validate_json(h.s.model_dump_json()) == h.s


def test_version_1_streams_still_fold_with_the_same_process_identity() -> None:
    """Version 1 journaled a host process as ``start_fingerprint``; the same stream,
    written that way, folds to the state version 2 records."""
    h = new_session()
    accept(h, "t1")
    start_host(h, "t1")  # the host process is helpers.proc(): pid 4242
    v1_lines = []
    for event in h.events:
        data = json.loads(event_to_json(event))
        data["schema_version"] = 1
        if data["type"] == "turn.host_started":
            process = data["process"]
            fingerprint = f"{process.pop('boot_id')}:{process.pop('start_time')}"
            data["process"] = {**process, "start_fingerprint": fingerprint}
        v1_lines.append(json.dumps(data))
    assert '"start_fingerprint":"boot-4242:4242"' in "".join(v1_lines).replace(" ", "")
    old = [event_from_json(line) for line in v1_lines]
    assert fold_session(old) == h.s
    assert h.s.in_flight is not None
    assert h.s.in_flight.process == ProcessIdentity(
        pid=4242, start_time=4242, boot_id="boot-4242", marker="tk-4242"
    )
    # Rewritten, it is version 2: the identity's own fields, no fingerprint.
    assert "start_fingerprint" not in event_to_json(old[-1])
    for broken in ("no-colon", "boot:x", ":12"):
        with pytest.raises(ValidationError, match="start_fingerprint"):
            ProcessIdentity.model_validate(
                {"pid": 1, "start_fingerprint": broken, "marker": "tk-1"}
            )


def _event_classes() -> list[type[BaseModel]]:
    union = typing.get_args(session_pkg.SessionEvent)[0]
    return list(typing.get_args(union))


def test_commands_round_trip() -> None:
    h = new_session()
    cmd = RecordRecoveryReport(lease=h.token, report=_report())
    assert SESSION_COMMAND_ADAPTER.validate_json(SESSION_COMMAND_ADAPTER.dump_json(cmd)) == cmd


def test_recovery_report_is_kept_as_latest() -> None:
    h = new_session()
    events = h.run(RecordRecoveryReport(lease=h.token, report=_report()))
    assert events == [RecoveryReported(report=_report(), at=h.now)]
    assert h.s.latest_recovery_report == _report()
    assert h.s.counters.recovery_reports == 1


def test_unknown_fields_and_types_fail_closed() -> None:
    h = new_session()
    data = SESSION_EVENT_ADAPTER.dump_python(h.events[0], mode="json")
    with pytest.raises(ValidationError):
        SESSION_EVENT_ADAPTER.validate_python({**data, "surprise": 1})
    with pytest.raises(ValidationError):
        SESSION_EVENT_ADAPTER.validate_python({**data, "type": "session.unknown"})


def test_a_state_of_an_unknown_version_is_refused_not_taken_for_this_one() -> None:
    state = new_session().s.model_dump(mode="json")
    assert state["schema_version"] == 1
    assert session_pkg.SessionState.model_validate(state).schema_version == 1
    with pytest.raises(ValidationError):
        session_pkg.SessionState.model_validate({**state, "schema_version": 2})


def test_fold_refuses_inconsistent_streams() -> None:
    h = new_session()
    accept(h, "t1")
    accepted = h.events[-1]
    assert isinstance(accepted, TurnAccepted)
    with pytest.raises(DataLoss):
        fold_session([accepted])
    with pytest.raises(DataLoss):
        fold_session([*h.events, accepted])
    with pytest.raises(DataLoss):
        evolve_session(h.s, h.events[0])
    with pytest.raises(DataLoss):
        fold_session([])


def test_state_size_is_constant_over_a_thousand_turns() -> None:
    """The LangGraph lesson: per-turn storage must not grow with the number of turns."""
    h = new_session()
    sizes = []
    for n in range(1, 1201):
        if n % 7 == 0:
            fail_turn(h, f"t{n}")
            h.run(ResolveHostRecovery(lease=h.token, record=record(h, f"t{n}")))
            assert h.s.recovery is not None and h.s.recovery.next is not None
            complete_turn(h, f"t{n}r", h.s.recovery.next)
        else:
            complete_turn(h, f"t{n}")
        sizes.append(len(h.s.model_dump_json()))
    assert h.s.counters.turns_completed > 1000
    # Only counters' digits and ids' lengths may grow.
    assert max(sizes) - min(sizes[10:]) < 64
    assert max(sizes) < 6_000
