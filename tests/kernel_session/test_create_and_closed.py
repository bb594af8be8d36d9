"""The kernel side of create under a request id, and of deleting a closed session.

A create under a request id records the id and its payload digest in
``session.created``; the same request again decides nothing, another payload under
that id is ``ALREADY_EXISTS``. A closed session does no more work, yet grants a
lease to delete it and runs the delete to its end.
"""

from __future__ import annotations

from tests.kernel_session.helpers import (
    OWNER,
    SID,
    Harness,
    accept,
    at,
    complete_turn,
    envelope,
    new_session,
)
from turnkeeper.errors import AlreadyExists, FailedPrecondition
from turnkeeper.kernel.session import AcceptTurn, AcquireLease, ReleaseLease, SetStatus
from turnkeeper.kernel.session.commands import BeginOperation, CreateSession, FinishOperation
from turnkeeper.kernel.session.events import SessionCreated
from turnkeeper.kernel.session.operations import create_payload_digest


def create(request_id: str | None = "c1", workspace: str = "/ws") -> CreateSession:
    return CreateSession(
        session_id=SID,
        goal_id="goal-1",
        workspace=workspace,
        host_kind="codex",
        host_config={"model": "m"},
        request_id=request_id,
    )


def test_create_records_its_request_id_and_payload_digest() -> None:
    h = Harness()
    [created] = h.run(create())
    assert isinstance(created, SessionCreated)
    assert created.request_id == "c1"
    assert created.payload_digest == create_payload_digest(create())
    # The digest is over the payload only: another request id asks for the same thing,
    # another workspace does not.
    assert create_payload_digest(create("c2")) == created.payload_digest
    assert create_payload_digest(create(workspace="/other")) != created.payload_digest


def test_a_retried_create_changes_nothing_and_another_payload_is_already_exists() -> None:
    h = Harness()
    h.run(create())
    assert h.run(create()) == []
    h.rejects(create(workspace="/other"), AlreadyExists, "request_id_reused")
    # Without a request id the older reason stays.
    h.rejects(create(None, workspace="/other"), AlreadyExists, "session_exists")


def test_a_create_without_request_id_records_none() -> None:
    h = Harness()
    [created] = h.run(create(None))
    assert isinstance(created, SessionCreated)
    assert (created.request_id, created.payload_digest) == (None, None)


def closed() -> Harness:
    h = new_session()
    complete_turn(h, "t1")
    h.run(SetStatus(lease=h.token, action="close", reason="goal closed"))
    assert h.s.status == "closed"
    return h


def delete(h: Harness, request_id: str = "d1") -> BeginOperation:
    return BeginOperation(
        lease=h.token,
        request_id=request_id,
        kind="delete",
        payload_digest="delete-d",
        executor=OWNER,
        lease_expires_at=at(600),
        expected_generation=h.s.generation,
    )


def test_a_closed_session_does_no_work_but_can_be_deleted() -> None:
    h = closed()
    h.rejects(
        AcceptTurn(lease=h.token, envelope=envelope(h, "t2")), FailedPrecondition, "session_closed"
    )
    h.rejects(AcquireLease(owner="b", expires_at=at(10)), FailedPrecondition, "session_closed")
    h.rejects(SetStatus(lease=h.token, action="resume"), FailedPrecondition, "session_closed")
    # A revert is work on the session too: refused before its own rules.
    revert = delete(h, "r1").model_copy(update={"kind": "revert"})
    h.rejects(revert, FailedPrecondition, "session_closed")
    # Giving the lease back is always allowed, and a lease to delete is granted.
    h.run(ReleaseLease(lease=h.token))
    assert h.s.lease.owner is None
    h.run(AcquireLease(owner=OWNER, expires_at=at(3600), purpose="delete"))
    events = h.run(delete(h))
    assert [e.type for e in events] == ["operation.started"]
    h.run(FinishOperation(lease=h.token, request_id="d1", executor=OWNER, generation=1))
    assert (h.s.status, h.s.operation) == ("deleted", None)


def test_a_delete_lease_on_an_open_session_is_an_ordinary_lease() -> None:
    h = new_session()
    h.run(ReleaseLease(lease=h.token))
    h.run(AcquireLease(owner=OWNER, expires_at=at(3600), purpose="delete"))
    accept(h, "t1")
    assert h.s.in_flight is not None
