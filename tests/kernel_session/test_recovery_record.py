"""Host failure recovery: valid records resolve, forged or stale ones are refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.kernel_session.helpers import (
    HANDLE,
    HOST,
    OTHER_SID,
    Harness,
    accept,
    envelope,
    fail_turn,
    new_session,
    proc,
    record,
    spec,
    start_host,
)
from turnkeeper.errors import FailedPrecondition, InvalidArgument, TurnkeeperError
from turnkeeper.kernel.session import (
    AcceptTurn,
    RecordHostStarted,
    RecoveryResolved,
    ResolvedRecovery,
    ResolveHostRecovery,
    resolve_host_recovery,
)
from turnkeeper.vocabulary import HostErrorKind


def failed_session() -> Harness:
    h = new_session()
    fail_turn(h, "t1")
    return h


def test_valid_record_resolves_to_a_continuation() -> None:
    h = failed_session()
    resolved = resolve_host_recovery(record(h, "t1"), h.s)
    assert resolved.session_action == "resume"
    assert resolved.skip_host_for_turn == "t1"
    nxt = resolved.next
    assert (nxt.kind, nxt.attempt, nxt.resume_host_session, nxt.recovers_turn_id) == (
        "continuation",
        2,
        True,
        "t1",
    )
    assert nxt.todo_id == "todo-1"
    assert nxt.reconcile_note and "reconcile" in nxt.reconcile_note


def test_record_as_json_text_is_accepted() -> None:
    h = failed_session()
    assert resolve_host_recovery(json.dumps(record(h, "t1")), h.s).skip_host_for_turn == "t1"


def test_resolve_command_emits_recovery_resolved_then_continuation_is_accepted() -> None:
    h = failed_session()
    events = h.run(ResolveHostRecovery(lease=h.token, record=record(h, "t1")))
    resolution = resolve_host_recovery(record(h, "t1"), failed_session().s)
    assert events == [RecoveryResolved(turn_id="t1", resolution=resolution, at=h.now)]
    assert h.s.recovery is not None and h.s.recovery.status == "resolved"
    accept(h, "t2", resolution.next)
    assert h.s.recovery is None
    assert h.s.counters.turns_recovered == 1
    assert h.s.last_recovered is not None and h.s.last_recovered.continued_by == "t2"
    env = h.s.in_flight.envelope if h.s.in_flight else None
    assert env is not None and env.resume_host_session and env.reconcile_note


def test_resolved_recovery_must_be_continued_first() -> None:
    h = failed_session()
    h.run(ResolveHostRecovery(lease=h.token, record=record(h, "t1")))
    h.rejects(
        AcceptTurn(lease=h.token, envelope=envelope(h, "t2", spec(todo_id="todo-2"))),
        FailedPrecondition,
        "recovery_continuation_expected",
    )
    wrong_attempt = spec(kind="continuation", attempt=5, resume=True, recovers="t1")
    h.rejects(
        AcceptTurn(lease=h.token, envelope=envelope(h, "t2", wrong_attempt)),
        FailedPrecondition,
        "recovery_continuation_expected",
    )


def test_recovered_host_step_is_never_recorded_again() -> None:
    """Invariant 2: after turn.recovery_resolved for X, host_started for X is refused."""
    h = failed_session()
    h.run(ResolveHostRecovery(lease=h.token, record=record(h, "t1")))
    cmd = RecordHostStarted(lease=h.token, turn_id="t1", host_kind=HOST, process=proc())
    h.rejects(cmd, FailedPrecondition, "host_step_recovered")
    assert h.s.recovery is not None and h.s.recovery.next is not None
    accept(h, "t2", h.s.recovery.next)
    h.rejects(cmd, FailedPrecondition, "host_step_recovered")


def test_without_a_host_session_the_recovery_is_a_retry() -> None:
    h = new_session()
    accept(h, "t1")
    start_host(h, "t1", handle=None)
    from tests.kernel_session.helpers import failure
    from turnkeeper.kernel.session import RecordReceipt

    h.run(
        RecordReceipt(
            lease=h.token, turn_id="t1", receipt=failure(h, "t1", error_kind=HostErrorKind.TIMEOUT)
        )
    )
    nxt = resolve_host_recovery(record(h, "t1"), h.s).next
    assert (nxt.kind, nxt.resume_host_session, nxt.attempt) == ("retry", False, 2)


def _rejected(h: Harness, rec: Any, error: type[TurnkeeperError], reason: str) -> None:
    with pytest.raises(error) as info:
        resolve_host_recovery(rec, h.s)
    assert info.value.reason == reason
    h.rejects(ResolveHostRecovery(lease=h.token, record=rec), error, reason)


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ({"session_id": OTHER_SID}, "session_mismatch"),
        ({"generation": 2}, "generation_mismatch"),
        ({"host_kind": "claude-code"}, "host_kind_mismatch"),
        ({"host_session_handle": "thread-other"}, "host_handle_mismatch"),
        ({"host_session_handle": None}, "host_handle_mismatch"),
        ({"turn_id": "t-never"}, "turn_not_recoverable"),
        ({"attempt": 3}, "attempt_mismatch"),
    ],
)
def test_mismatched_binding(override: dict[str, Any], reason: str) -> None:
    h = failed_session()
    assert h.s.host_session_handle == HANDLE
    rec = record(h, "t1")
    rec["binding"].update(override)
    _rejected(h, rec, FailedPrecondition, reason)


@pytest.mark.parametrize(
    ("field", "value", "error", "reason"),
    [
        (
            "schema_version",
            "turnkeeper.host_recovery.v2",
            FailedPrecondition,
            "unsupported_schema_version",
        ),
        (
            "schema_version",
            "loopx_turn_host_recovery_v0",
            FailedPrecondition,
            "unsupported_schema_version",
        ),
        ("kind", "start_new", FailedPrecondition, "unsupported_recovery_kind"),
        ("failed_phase", "write_back", FailedPrecondition, "wrong_failed_phase"),
        ("binding", {"session_id": "x"}, InvalidArgument, "malformed_recovery_record"),
        ("binding", None, InvalidArgument, "malformed_recovery_record"),
        ("extra_field", 1, InvalidArgument, "malformed_recovery_record"),
    ],
)
def test_invalid_record(field: str, value: Any, error: type[TurnkeeperError], reason: str) -> None:
    h = failed_session()
    _rejected(h, {**record(h, "t1"), field: value}, error, reason)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '"just a string"', "null"])
def test_malformed_json(text: str) -> None:
    h = failed_session()
    _rejected(h, text, InvalidArgument, "malformed_recovery_record")


def test_missing_schema_version_is_malformed() -> None:
    h = failed_session()
    rec = record(h, "t1")
    del rec["schema_version"]
    _rejected(h, rec, InvalidArgument, "malformed_recovery_record")


def test_already_recovered_turn_is_not_recoverable_again() -> None:
    h = failed_session()
    rec = record(h, "t1")
    h.run(ResolveHostRecovery(lease=h.token, record=rec))
    _rejected(h, rec, FailedPrecondition, "turn_not_recoverable")
    assert h.s.recovery is not None and h.s.recovery.next is not None
    accept(h, "t2", h.s.recovery.next)
    _rejected(h, rec, FailedPrecondition, "turn_not_recoverable")


def test_completed_turn_is_not_recoverable() -> None:
    h = new_session()
    from tests.kernel_session.helpers import complete_turn

    complete_turn(h, "t1")
    _rejected(h, record(h, "t1"), FailedPrecondition, "turn_not_recoverable")


def test_failed_repair_turn_does_not_displace_the_pending_recovery() -> None:
    h = failed_session()
    fail_turn(h, "r1", spec(kind="repair", todo_id=None))
    assert h.s.recovery is not None and h.s.recovery.turn_id == "t1"
    assert h.s.consecutive_host_failures == 2
    _rejected(h, record(h, "r1"), FailedPrecondition, "turn_not_recoverable")
    assert isinstance(resolve_host_recovery(record(h, "t1"), h.s), ResolvedRecovery)


def test_a_host_session_that_saved_nothing_is_continued_in_a_fresh_one() -> None:
    """The runtime found the bound session's artifact missing and never recorded by a
    completed turn: the continuation is a retry that does not resume, and the kernel
    accepts exactly that turn (and binds the new handle it reports)."""
    h = failed_session()
    lost = ResolveHostRecovery(lease=h.token, record=record(h, "t1"), host_session_lost=True)
    [resolved] = h.run(lost)
    assert isinstance(resolved, RecoveryResolved)
    nxt = resolved.resolution.next
    assert (nxt.kind, nxt.attempt, nxt.resume_host_session) == ("retry", 2, False)
    assert nxt.reconcile_note and "saved nothing" in nxt.reconcile_note
    resuming = nxt.model_copy(update={"kind": "continuation", "resume_host_session": True})
    with pytest.raises(FailedPrecondition, match="continued by its resolved recovery"):
        accept(h, "t2", resuming)  # the old session may not be resumed instead
    accept(h, "t2", nxt)
    assert h.s.recovery is None and h.s.in_flight is not None
    assert not h.s.in_flight.envelope.resume_host_session
