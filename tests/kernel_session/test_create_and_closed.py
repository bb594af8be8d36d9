"""The kernel side of create under a request id.

A create under a request id records the id and its payload digest in
``session.created``; the same request again decides nothing, another payload under
that id is ``ALREADY_EXISTS``.
"""

from __future__ import annotations

from tests.kernel_session.helpers import (
    SID,
    Harness,
)
from turnkeeper.errors import AlreadyExists
from turnkeeper.kernel.session.commands import CreateSession
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
