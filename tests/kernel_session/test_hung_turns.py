"""Hung turns in a row: folded from the turns' ends, bounded by the recovery policy.

A turn whose host the driver ended as hung fails with error kind ``hung``; the
session's ``consecutive_hangs`` counts such failures in a row (from the log alone, so
a restarted ``run`` counts on), any other end of a turn but a lost or abandoned one
breaks the streak, and an operator's resume starts it again. Once it reaches the
policy's ``max_consecutive_hangs`` the session is suspended (reason ``hung``) instead
of being retried.
"""

from __future__ import annotations

from tests.kernel_session.helpers import (
    Harness,
    accept,
    at,
    complete_turn,
    failure,
    new_session,
    record,
    spec,
    start_host,
)
from turnkeeper.kernel.session import (
    LossProof,
    NextTurn,
    ProgressPolicy,
    RecordReceipt,
    RecordTurnLost,
    RecoveryPolicy,
    ResolveHostRecovery,
    SetStatus,
    decide_recovery,
    fold_session,
    pace_next_turn,
)
from turnkeeper.vocabulary import HostErrorKind

POLICY = RecoveryPolicy(max_attempts=10, backoff_base_seconds=0, max_consecutive_hangs=2)
PROGRESS = ProgressPolicy()


def _fail(h: Harness, turn_id: str, kind: HostErrorKind) -> None:
    """A first turn that starts and fails with ``kind``."""
    accept(h, turn_id, spec())
    start_host(h, turn_id)
    h.run(RecordReceipt(lease=h.token, turn_id=turn_id, receipt=failure(h, turn_id, 1, kind)))


def _continuation(h: Harness) -> NextTurn:
    """The continuation the pending recovery was resolved into."""
    pending = h.s.recovery
    assert pending is not None and pending.next is not None
    return pending.next


def _resolve(h: Harness, turn_id: str, attempt: int) -> None:
    h.run(ResolveHostRecovery(lease=h.token, record=record(h, turn_id, attempt)))


def test_hung_failures_in_a_row_are_counted_and_folded_from_the_log() -> None:
    h = new_session()
    _fail(h, "turn-1", HostErrorKind.HUNG)
    assert (h.s.consecutive_hangs, h.s.consecutive_host_failures) == (1, 1)
    assert h.s.recovery is not None and h.s.recovery.error_kind is HostErrorKind.HUNG
    # Below the bound: recovered like any failure.
    assert decide_recovery(h.s, POLICY, at(10)).action == "recover_now"
    _resolve(h, "turn-1", 1)
    accept(h, "turn-2", _continuation(h))
    start_host(h, "turn-2")
    h.run(
        RecordReceipt(
            lease=h.token, turn_id="turn-2", receipt=failure(h, "turn-2", 2, HostErrorKind.HUNG)
        )
    )
    assert h.s.consecutive_hangs == 2
    # The projection is the fold of the stream: the count needs no memory of a run.
    assert fold_session(h.events) == h.s

    decision = decide_recovery(h.s, POLICY, at(10))
    assert (decision.action, decision.reason, decision.turn_id) == ("suspend", "hung", "turn-2")
    pace = pace_next_turn(h.s, POLICY, PROGRESS, at(10), no_progress_reported=False)
    assert (pace.action, pace.reason) == ("suspend", "hung")
    # A larger bound retries it instead.
    lenient = POLICY.model_copy(update={"max_consecutive_hangs": 3})
    assert decide_recovery(h.s, lenient, at(10)).action == "recover_now"

    # Suspended for an operator; a resume vouches for a fresh start.
    h.run(SetStatus(lease=h.token, action="suspend", reason="hung"))
    assert (h.s.status, h.s.status_reason, h.s.consecutive_hangs) == ("suspended", "hung", 2)
    h.run(SetStatus(lease=h.token, action="resume"))
    assert h.s.consecutive_hangs == 0 and h.s.consecutive_host_failures == 0
    assert decide_recovery(h.s, POLICY, at(10)).action == "recover_now"
    assert fold_session(h.events) == h.s


def test_another_failure_or_a_completed_turn_breaks_the_streak_a_lost_one_does_not() -> None:
    h = new_session()
    _fail(h, "turn-1", HostErrorKind.HUNG)
    _resolve(h, "turn-1", 1)
    accept(h, "turn-2", _continuation(h))
    start_host(h, "turn-2")
    # Lost to a restart: not the host's doing, the streak stands.
    gone = LossProof(ended="proven_gone", detail="no process carries the turn marker")
    h.run(RecordTurnLost(lease=h.token, turn_id="turn-2", proof=gone))
    assert h.s.consecutive_hangs == 1
    pending = h.s.recovery
    assert pending is not None and pending.next is not None
    accept(h, "turn-3", pending.next)
    start_host(h, "turn-3")
    h.run(
        RecordReceipt(
            lease=h.token,
            turn_id="turn-3",
            receipt=failure(h, "turn-3", pending.next.attempt, HostErrorKind.EXIT_CODE),
        )
    )
    assert (h.s.consecutive_hangs, h.s.consecutive_host_failures) == (0, 2)

    fresh = new_session()
    _fail(fresh, "turn-1", HostErrorKind.HUNG)
    _resolve(fresh, "turn-1", 1)
    complete_turn(fresh, "turn-2", _continuation(fresh))
    assert fresh.s.consecutive_hangs == 0
    assert fold_session(fresh.events) == fresh.s


def test_a_continuation_after_a_hang_tells_the_agent_why_it_was_ended() -> None:
    h = new_session()
    _fail(h, "turn-1", HostErrorKind.HUNG)
    _resolve(h, "turn-1", 1)
    pending = h.s.recovery
    assert pending is not None and pending.next is not None
    note = pending.next.reconcile_note or ""
    assert "(hung)" in note and "made no progress for too long" in note, note

    other = new_session()
    _fail(other, "turn-1", HostErrorKind.SIGNAL)
    _resolve(other, "turn-1", 1)
    assert other.s.recovery is not None and other.s.recovery.next is not None
    assert "no progress" not in (other.s.recovery.next.reconcile_note or "")
