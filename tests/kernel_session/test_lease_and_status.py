"""Lease fencing (invariant 6) and operator status changes."""

from __future__ import annotations

import pytest

from tests.kernel_session.helpers import (
    OWNER,
    Harness,
    accept,
    at,
    envelope,
    fail_turn,
    new_session,
    start_host,
)
from turnkeeper.errors import Aborted, FailedPrecondition, InvalidArgument
from turnkeeper.kernel.session import (
    AcceptTurn,
    AcquireLease,
    LeaseAcquired,
    LeaseReleased,
    LeaseRenewed,
    LeaseToken,
    ReleaseLease,
    RenewLease,
    SetStatus,
    StatusChanged,
    TurnAbandoned,
)


def status(h: Harness) -> str:
    return h.s.status  # a call, so mypy does not narrow the status across commands


def test_acquire_renew_release() -> None:
    h = new_session(lease_seconds=60)
    assert h.s.lease.owner == OWNER and h.s.lease.epoch == 1
    assert h.run(RenewLease(lease=h.token, expires_at=at(120))) == [
        LeaseRenewed(owner=OWNER, epoch=1, expires_at=at(120), at=h.now)
    ]
    assert h.run(ReleaseLease(lease=h.token)) == [LeaseReleased(owner=OWNER, epoch=1, at=h.now)]
    assert h.s.lease.owner is None and h.s.lease.epoch == 1
    assert h.run(AcquireLease(owner="worker-b", expires_at=at(60))) == [
        LeaseAcquired(owner="worker-b", epoch=2, expires_at=at(60), at=h.now)
    ]


def test_live_lease_of_another_owner_is_held() -> None:
    h = new_session(lease_seconds=60)
    h.rejects(AcquireLease(owner="worker-b", expires_at=at(90)), Aborted, "lease_held", now=at(30))


def test_expired_lease_is_taken_over_and_old_holder_is_fenced() -> None:
    h = new_session(lease_seconds=60)
    old = h.token
    h.run(AcquireLease(owner="worker-b", expires_at=at(200)), now=at(61))
    assert h.s.lease.epoch == 2
    h.rejects(AcceptTurn(lease=old, envelope=envelope(h, "t1")), Aborted, "stale_lease", now=at(62))
    h.rejects(RenewLease(lease=old, expires_at=at(300)), Aborted, "stale_lease", now=at(62))
    accept(h, "t1")  # the new holder writes


def test_same_owner_reacquiring_bumps_the_epoch() -> None:
    h = new_session()
    old = h.token
    h.run(AcquireLease(owner=OWNER, expires_at=at(500)))
    assert h.s.lease.epoch == old.epoch + 1
    h.rejects(AcceptTurn(lease=old, envelope=envelope(h, "t1")), Aborted, "stale_lease")


@pytest.mark.parametrize(
    "token",
    [LeaseToken(owner=OWNER, epoch=7), LeaseToken(owner="intruder", epoch=1)],
)
def test_wrong_epoch_or_owner_is_stale(token: LeaseToken) -> None:
    h = new_session()
    h.rejects(AcceptTurn(lease=token, envelope=envelope(h, "t1")), Aborted, "stale_lease")


def test_own_expired_lease_must_be_reacquired() -> None:
    h = new_session(lease_seconds=60)
    h.rejects(
        AcceptTurn(lease=h.token, envelope=envelope(h, "t1")), Aborted, "lease_expired", now=at(60)
    )
    h.rejects(RenewLease(lease=h.token, expires_at=at(120)), Aborted, "lease_expired", now=at(61))


def test_released_lease_writes_nothing() -> None:
    h = new_session()
    token = h.token
    h.run(ReleaseLease(lease=token))
    h.rejects(AcceptTurn(lease=token, envelope=envelope(h, "t1")), Aborted, "stale_lease")


def test_lease_expiry_must_be_in_the_future() -> None:
    h = new_session()
    h.rejects(
        AcquireLease(owner="b", expires_at=at(0)),
        InvalidArgument,
        "invalid_lease_expiry",
        now=at(3601),
    )
    h.rejects(RenewLease(lease=h.token, expires_at=at(0)), InvalidArgument, "invalid_lease_expiry")


# --- status -------------------------------------------------------------------------


def test_suspend_lets_the_turn_finish_but_accepts_no_new_one() -> None:
    h = new_session()
    accept(h, "t1")
    assert h.run(SetStatus(lease=h.token, action="suspend", reason="maintenance")) == [
        StatusChanged(action="suspend", status="suspended", reason="maintenance", at=h.now)
    ]
    start_host(h, "t1")
    from tests.kernel_session.helpers import finish

    finish(h, "t1")
    assert status(h) == "suspended"
    h.rejects(
        AcceptTurn(lease=h.token, envelope=envelope(h, "t2")),
        FailedPrecondition,
        "session_suspended",
    )
    assert h.run(SetStatus(lease=h.token, action="suspend")) == []
    h.run(SetStatus(lease=h.token, action="resume"))
    assert status(h) == "ready"
    accept(h, "t2")


def test_stop_abandons_the_in_flight_turn() -> None:
    h = new_session()
    accept(h, "t1")
    events = h.run(SetStatus(lease=h.token, action="stop", reason="operator"))
    assert events == [
        TurnAbandoned(turn_id="t1", reason="stopped by operator: operator", at=h.now),
        StatusChanged(action="stop", status="suspended", reason="operator", at=h.now),
    ]
    assert h.s.in_flight is None and h.s.counters.turns_abandoned == 1


def test_mark_crashed_and_resume_resets_host_failures() -> None:
    h = new_session()
    fail_turn(h, "t1")
    h.run(SetStatus(lease=h.token, action="mark_crashed", reason="attempts exhausted"))
    assert status(h) == "crashed"
    h.rejects(
        AcceptTurn(lease=h.token, envelope=envelope(h, "t2")), FailedPrecondition, "session_crashed"
    )
    h.rejects(
        SetStatus(lease=h.token, action="suspend"), FailedPrecondition, "invalid_status_transition"
    )
    assert h.run(SetStatus(lease=h.token, action="mark_crashed")) == []
    h.run(SetStatus(lease=h.token, action="resume"))
    assert status(h) == "ready" and h.s.consecutive_host_failures == 0


def test_resume_with_a_turn_in_flight_is_running() -> None:
    h = new_session()
    accept(h, "t1")
    h.run(SetStatus(lease=h.token, action="mark_crashed"))
    h.run(SetStatus(lease=h.token, action="resume"))
    assert status(h) == "running"
    assert h.run(SetStatus(lease=h.token, action="resume")) == []


def test_close_is_final_and_needs_no_turn_in_flight() -> None:
    h = new_session()
    accept(h, "t1")
    h.rejects(SetStatus(lease=h.token, action="close"), FailedPrecondition, "turn_in_flight")
    h.run(SetStatus(lease=h.token, action="stop"))
    h.run(SetStatus(lease=h.token, action="close"))
    assert status(h) == "closed"
    h.rejects(
        AcceptTurn(lease=h.token, envelope=envelope(h, "t2")), FailedPrecondition, "session_closed"
    )
    h.rejects(AcquireLease(owner="b", expires_at=at(10)), FailedPrecondition, "session_closed")


def test_live_lease_of_a_proven_dead_holder_is_taken_over() -> None:
    h = new_session(lease_seconds=60)
    dead = h.token
    takeover = AcquireLease(
        owner="worker-b", expires_at=at(90), takeover_from=dead, takeover_proof="pid gone"
    )
    assert h.run(takeover, now=at(30)) == [
        LeaseAcquired(owner="worker-b", epoch=2, expires_at=at(90), at=at(30))
    ]
    h.rejects(
        AcceptTurn(lease=dead, envelope=envelope(h, "t1")), Aborted, "stale_lease", now=at(31)
    )


def test_takeover_naming_an_older_lease_is_refused() -> None:
    h = new_session(lease_seconds=60)
    old = h.token
    h.run(AcquireLease(owner="worker-b", expires_at=at(200)), now=at(61))
    stale = AcquireLease(owner="worker-c", expires_at=at(250), takeover_from=old)
    h.rejects(stale, Aborted, "stale_lease", now=at(62))
    assert h.s.lease.owner == "worker-b"
